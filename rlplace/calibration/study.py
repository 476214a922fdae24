"""One calibration from measurements: fit on the training placements, score the fitted
simulator (and the one before calibration) on the held-out placements and by cross-validation,
and set the scores beside the noise ceiling of the same placements (issue 19, items 1-3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from rlplace.calibration.fit import Fit, fit
from rlplace.calibration.protocol import Measurements
from rlplace.calibration.validate import cross_validate, held_out_split, scores
from rlplace.cluster import COMM_MODES, Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.sim import simulate_many


@dataclass
class Study:
    """A calibration and its fidelity. Arrays are per measured placement; ``held_out`` and
    ``fits`` are masks; ``cross_validated`` is nan where a placement was not predicted."""

    fit: Fit
    measurements: Measurements
    held_out: np.ndarray
    before: np.ndarray           # simulated step time, the simulator as given
    after: np.ndarray            # simulated step time, calibrated
    cross_validated: np.ndarray

    @property
    def train(self) -> np.ndarray:
        return self.measurements.fits & ~self.held_out

    def summary(self) -> dict[str, Any]:
        m, held = self.measurements, self.held_out
        cv = ~np.isnan(self.cross_validated)
        noise = {name: (None if s is None else s.as_dict()) for name, s in
                 (("all", m.split_half()), ("held_out", m.split_half(held)))}
        return {"fit": self.fit.as_dict(), "placements": len(m.labels), "fit_on": int(self.train.sum()),
                "held_out": int(held.sum()), "rounds": int(m.rounds.shape[0]),
                "held_out_before": scores(self.before[held], m.median[held]),
                "held_out_after": scores(self.after[held], m.median[held]),
                "cross_validated": scores(self.cross_validated[cv], m.median[cv]) if cv.any() else None,
                "noise_floor": m.noise_floor(), "noise_ceiling": noise}

    def rows(self) -> list[dict[str, Any]]:
        m = self.measurements
        return [{"placement": label, "family": fam, "role": "held out" if self.held_out[i] else "fit"
                 if m.fits[i] else "out of memory", "num_transfers": int(m.num_transfers[i]),
                 "measured": float(m.median[i]), "rounds": [float(t) for t in m.rounds[:, i]],
                 "spread": float(m.spread[i]), "simulated_before": float(self.before[i]),
                 "simulated_after": float(self.after[i])} for i, (label, fam) in enumerate(zip(m.labels, m.families))]


def study(graph: OpGraph, cluster: Cluster, measurements: Measurements, held_out: float = 0.33,
          cv_folds: int = 0, op_type_groups: int = 4, fit_speeds: bool = True,
          modes: Sequence[str] = COMM_MODES, max_evaluations: int = 200, seed: int = 0) -> Study:
    m = measurements
    ok = m.fits
    held = held_out_split(m.families, held_out, seed) & ok
    train = ok & ~held
    if train.sum() < 2:
        raise ConfigError(f"only {int(train.sum())} measured placements fit in memory outside the held-out "
                          f"ones: nothing to fit on (give a larger cluster or a smaller held_out)")
    options = dict(op_type_groups=op_type_groups, fit_speeds=fit_speeds, modes=modes, max_evaluations=max_evaluations)
    fitted = fit(graph, cluster, m.placements[train], m.median[train], **options)
    before = simulate_many(graph, cluster, m.placements).step_time
    after = fitted.simulate(graph, cluster, m.placements)
    cv = np.full(len(m.labels), np.nan)
    if cv_folds:
        idx = np.flatnonzero(ok)

        def predict(train_mask: np.ndarray, test_mask: np.ndarray) -> np.ndarray:
            f = fit(graph, cluster, m.placements[idx[train_mask]], m.median[idx[train_mask]], **options)
            return f.simulate(graph, cluster, m.placements[idx[test_mask]])

        cv[idx] = cross_validate([m.families[i] for i in idx], cv_folds, predict, seed)
    return Study(fitted, m, held, before, after, cv)
