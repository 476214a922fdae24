"""Classic baselines. Each keeps colocation groups whole: it places colocation units (a group,
or a lone op), in topological order of their first op."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers import register


@register("single")
@dataclass
class SinglePlacer:
    """Every op on one device (``device``, default the first)."""

    device: int = 0

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        if not 0 <= self.device < cluster.num_devices:
            raise ConfigError(f"single: device {self.device} out of range (cluster has "
                              f"{cluster.num_devices} devices)")
        return Placement(np.full(graph.num_ops, self.device, dtype=np.int64))


@register("round_robin")
@dataclass
class RoundRobinPlacer:
    """Unit k on device k mod n."""

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        units = CoarseGraph.colocation(graph)
        return units.expand(np.arange(units.num_groups) % cluster.num_devices)


@register("random")
@dataclass
class RandomPlacer:
    """Every unit on a uniformly random device; the same seed gives the same placement."""

    seed: int = 0

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        units = CoarseGraph.colocation(graph)
        rng = np.random.default_rng(self.seed)
        return units.expand(rng.integers(0, cluster.num_devices, units.num_groups))
