"""The design of a calibration: placements chosen so that their measured step times separate
the simulator's parameters (issue 19).

* ``single_<d>``: every op on device ``d``. The step time is that device's compute sum, so these
  fix the compute scale and each device's speed, with no transfer in them.
* ``cut_<f>``: the first fraction ``f`` of the colocation units (topological order) on device 0,
  the rest on device 1: one cut of increasing size, few transfers, both devices partly idle.
* ``mix_<p>_s<seed>``: each unit on a device other than 0 with probability ``p`` (uniform
  among them): the number of transfers grows with the mixing rate ``p`` while the compute per
  device moves less, which separates the per-transfer cost from the per-byte cost and from the
  parallelism. ``p = (n - 1) / n`` is a uniformly random placement.
* heuristic placements (``metis``, ``m_etf``, ...): the placements a user of the simulator
  cares about ranking.

Placements that coincide (an expert placement equal to a cut, say) are kept once, under the
first name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError, RlplaceError
from rlplace.graph import OpGraph

log = logging.getLogger(__name__)

CUTS = (0.1, 0.25, 0.5, 0.75, 0.9)
MIXING_RATES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
HEURISTICS = ("round_robin", "expert", "metis", "m_etf", "heft", "celeritas")


@dataclass
class Design:
    """Named placements (one row of device indices per op each) and the family of each."""

    labels: list[str] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    families: list[str] = field(default_factory=list)

    def add(self, label: str, family: str, row) -> None:
        row = np.asarray(row, dtype=np.int64)
        if any(np.array_equal(row, r) for r in self.rows):
            return
        self.labels.append(label)
        self.rows.append(row)
        self.families.append(family)

    @property
    def placements(self) -> np.ndarray:
        return np.stack(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def design(graph: OpGraph, cluster: Cluster, cuts: Sequence[float] = CUTS,
           mixing_rates: Sequence[float] = MIXING_RATES, mixing_seeds: int = 2,
           heuristics: Sequence[str] = HEURISTICS, seed: int = 0) -> Design:
    """The calibration design of ``graph`` on ``cluster`` (see the module docstring). A
    heuristic that cannot place this graph (``expert`` without layer tags, say) is skipped with
    a log line."""
    for key, values in (("cuts", cuts), ("mixing_rates", mixing_rates)):
        if any(not 0 < v < 1 for v in values):
            raise ConfigError(f"{key} must lie in (0, 1), got {list(values)}")
    n = cluster.num_devices
    units = CoarseGraph.colocation(graph)
    out = Design()
    for d in range(n):
        out.add(f"single_{d}", "single", np.full(graph.num_ops, d))
    if n > 1:
        order = np.arange(units.num_groups)
        for f in sorted(cuts):
            out.add(f"cut_{f:g}", "cut", units.expand((order >= f * units.num_groups).astype(np.int64)).device_of)
        rng = np.random.default_rng(seed)
        for p in sorted(mixing_rates):
            for s in range(mixing_seeds):
                moved = rng.random(units.num_groups) < p
                other = rng.integers(1, n, units.num_groups)
                out.add(f"mix_{p:g}_s{s}", "mix", units.expand(np.where(moved, other, 0)).device_of)
    from rlplace.placers import make_placer

    check_heuristics(heuristics)
    for name in heuristics:
        try:
            placement = make_placer(name, seed=seed).place(graph, cluster)
        except RlplaceError as exc:
            log.info(f"design: placer {name} skipped ({exc})")
            continue
        out.add(name, "heuristic", placement.device_of)
    return out


def check_heuristics(names: Sequence[str]) -> None:
    from rlplace.placers import available_placers

    unknown = sorted(set(names) - set(available_placers()))
    if unknown:
        raise ConfigError(f"heuristics: unknown placer {unknown[0]!r} (known: {', '.join(available_placers())})")
