"""Real measurement in the loop (issue 19): train or search on the simulator, measure only the
best placements on the real backend.

Every placement a run evaluates costs about a millisecond in the simulator and seconds on real
TensorFlow. ``VerifyingBackend`` answers every evaluation from the simulator (on the caller's
graph and cluster, e.g. a cluster preset written by ``rlplace-calibrate``) and keeps the
``top_k`` distinct placements that fit, by simulated step time. ``verify`` measures those not
yet measured on the real backend; ``finish`` does so once more at the end of a run and returns
the placement with the best *measured* step time, with both its simulated and measured step
times.

With ``recalibrate`` (a function of the original graph and cluster and every measurement so
far, returning a corrected graph and cluster: ``rlplace.calibration.recalibrate``), each
verification refits the simulator from the measurements as they come, and the kept candidates
are simulated again under the new model, so the top-k stays a top-k of the current simulator.
With ``every`` the top-k is verified every ``every`` evaluations; without it, only at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from rlplace.backends import Backend, SimBackend
from rlplace.cluster import Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import BatchResult, StepResult, simulate

# (graph, cluster, placements (k × ops), measured step times (k,)) -> (graph, cluster) fitted to them
Recalibrate = Callable[[OpGraph, Cluster, np.ndarray, np.ndarray], tuple[OpGraph, Cluster]]


@dataclass
class Verified:
    """One placement measured on the real backend, with the simulator's step time for it when
    it was measured (under the simulator of that moment)."""

    placement: np.ndarray
    simulated: float
    measured: StepResult

    def as_dict(self) -> dict[str, Any]:
        return {**self.measured.as_dict(), "simulated_step_time": float(self.simulated)}


@dataclass
class VerifyingBackend(Backend):
    real: Backend
    top_k: int
    every: int | None = None
    recalibrate: Recalibrate | None = None
    min_measurements: int = 3   # measurements that fit before the first recalibration
    evaluated: int = 0
    verified: list[Verified] = field(default_factory=list)
    recalibrations: int = 0
    _model: tuple[OpGraph, Cluster] | None = field(default=None, repr=False)
    _pool: dict[bytes, tuple[float, np.ndarray]] = field(default_factory=dict, repr=False)
    simulated: ClassVar[bool] = True  # accounting: what the run waits for is simulation

    def __post_init__(self) -> None:
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ConfigError(f"verify_top_k must be an integer >= 1, got {self.top_k!r}")
        if self.every is not None and (not isinstance(self.every, int) or self.every < 1):
            raise ConfigError(f"verify_every must be an integer >= 1 (or null: at the end), got {self.every!r}")

    # ----------------------------------------------------------------- the simulator's answers
    def evaluate(self, graph: OpGraph, cluster: Cluster, placement) -> StepResult:
        placement = placement if isinstance(placement, Placement) else Placement(placement)
        placement.validate(graph, cluster)
        result = simulate(*self._simulator(graph, cluster), placement)
        self._offer(placement.device_of, result.step_time, result.oom)
        self._count(graph, cluster, 1)
        return result

    def evaluate_many(self, graph: OpGraph, cluster: Cluster, placements) -> BatchResult:
        rows = np.asarray(placements)
        batch = SimBackend().evaluate_many(*self._simulator(graph, cluster), rows)
        for row, t, oom in zip(rows, batch.step_time, batch.oom):
            self._offer(row, float(t), bool(oom))
        self._count(graph, cluster, len(rows))
        return batch

    def _simulator(self, graph: OpGraph, cluster: Cluster) -> tuple[OpGraph, Cluster]:
        return self._model if self._model is not None else (graph, cluster)

    def _offer(self, devices: np.ndarray, step_time: float, oom: bool) -> None:
        """Keep the placement if it is among the ``top_k`` fastest simulated so far."""
        key = np.asarray(devices, dtype=np.int64).tobytes()
        if oom or key in self._pool:
            return
        if len(self._pool) >= self.top_k:
            worst = max(self._pool, key=lambda k: self._pool[k][0])
            if step_time >= self._pool[worst][0]:
                return
            del self._pool[worst]
        self._pool[key] = (float(step_time), np.array(devices, dtype=np.int64))

    def _count(self, graph: OpGraph, cluster: Cluster, n: int) -> None:
        before, self.evaluated = self.evaluated, self.evaluated + n
        if self.every is not None and before // self.every != self.evaluated // self.every:
            self.verify(graph, cluster)

    # ------------------------------------------------------------------- the real backend
    def verify(self, graph: OpGraph, cluster: Cluster) -> list[Verified]:
        """Measure the kept placements not measured yet; recalibrate from all measurements."""
        measured = {v.placement.tobytes() for v in self.verified}
        new = []
        for key, (simulated, devices) in sorted(self._pool.items(), key=lambda kv: kv[1][0]):
            if key not in measured:
                new.append(Verified(devices, simulated, self.real.evaluate(graph, cluster, Placement(devices))))
        self.verified.extend(new)
        fits = [v for v in self.verified if not v.measured.oom]
        if new and self.recalibrate is not None and len(fits) >= self.min_measurements:
            self._model = self.recalibrate(graph, cluster, np.stack([v.placement for v in fits]),
                                           np.array([v.measured.step_time for v in fits]))
            self.recalibrations += 1
            rows = np.stack([devices for _, devices in self._pool.values()])
            times = SimBackend().evaluate_many(*self._model, rows).step_time
            self._pool = {key: (float(t), devices) for (key, (_, devices)), t in zip(self._pool.items(), times)}
        return new

    def finish(self, graph: OpGraph, cluster: Cluster) -> Verified | None:
        """Verify the last top-k; the measured placement that fits with the lowest measured step
        time, its simulated step time under the final simulator (None if none fits)."""
        self.verify(graph, cluster)
        fits = [v for v in self.verified if not v.measured.oom]
        if not fits:
            return None
        best = min(fits, key=lambda v: v.measured.step_time)
        now = simulate(*self._simulator(graph, cluster), best.placement).step_time
        return Verified(best.placement, now, best.measured)

    def record(self) -> dict[str, Any]:
        """What results.json keeps: every measured placement's simulated and measured step time."""
        return {"top_k": self.top_k, "every": self.every, "evaluated": self.evaluated,
                "recalibrations": self.recalibrations,
                "measured": [{"simulated_step_time": v.simulated, "step_time": v.measured.step_time,
                              "oom": v.measured.oom} for v in self.verified]}

    def close(self) -> None:
        self.real.close()
