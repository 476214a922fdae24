"""``critical_path``: the critical-path list scheduler, a standard baseline (issue 42 item 3).

Highest bottom level first, earliest start: the list scheduler that DOPPLER (ICLR 2026) and
the scheduling literature before it (Kwok & Ahmad, ACM Computing Surveys 31(4), 1999: the
bottom level as the priority of list scheduling) use as their baseline. Ops are decided in
decreasing bottom level, the upward rank with each edge's transfer weighted by the fraction of
device pairs that are distinct (HEFT Eq. 8, ``rlplace.placers.baselines.rank_order``), each on
the device where it can start first (ties: where it finishes first, then the lower device).

It runs on the learned placer's loop (``rlplace.placers.learned.ListSchedule``), which runs the
step as the simulator does: an op is decided once its inputs have started, so when it decides
it knows when they end, and each device serves its queue first come, first served. So with
parallel links its own schedule is the simulator's. Unlike DOPPLER's memory-blind baseline it
tracks memory as m-ETF does (an op goes only where it fits; where it fits nowhere, the device it
overfills least), and like the other list schedulers it places again under a smaller budget
where the simulator finds a device over memory (``memory_rounds``) and weighs the whole graph on
one device beside its placement (``single_fallback``, ``rlplace.placers.fit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.cluster import Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers import register
from rlplace.placers.fit import fastest_fit, whole_graph_on_one_device
from rlplace.placers.learned import ListSchedule


@register("critical_path")
@dataclass
class CriticalPathPlacer:
    """Bottom-level priority, earliest start, memory-aware (module docstring)."""

    single_fallback: bool = True
    memory_rounds: int = 4

    def __post_init__(self):
        if not isinstance(self.memory_rounds, int) or self.memory_rounds < 1:
            raise ConfigError(f"critical_path: memory_rounds must be an integer >= 1, got {self.memory_rounds!r}")

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        plan = ListSchedule(graph, cluster)

        def place_within(budget):
            m = plan.run(None, budget)
            return m.ops.device.copy(), m.memory.peak.copy()

        placed = whole_graph_on_one_device(graph, cluster) if self.single_fallback else []
        device, _ = fastest_fit([place_within], graph, cluster, cluster.memory.astype(np.int64),
                                self.memory_rounds, placed)
        return Placement(device)
