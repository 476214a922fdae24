"""CoarseGraph: a grouping of ops that are placed together, and the map op -> group.

Placing the groups places the ops: ``expand`` turns one device per group into a Placement.
Colocation groups (ops TensorFlow requires on one device) are the first grouping; Baechi's
co-placement and fusion and the Hierarchical Planner's learned groups build on the same type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.errors import PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement


@dataclass(frozen=True)
class CoarseGraph:
    """``group_of[op]`` is the group of each op; groups are numbered 0..num_groups-1 in the
    order of their first op (so in topological order of first appearance)."""

    graph: OpGraph
    group_of: np.ndarray

    @property
    def num_groups(self) -> int:
        return int(self.group_of.max(initial=-1)) + 1

    def members(self, group: int) -> np.ndarray:
        return np.flatnonzero(self.group_of == group)

    def expand(self, group_device) -> Placement:
        """The op placement that puts every op on its group's device."""
        group_device = np.asarray(group_device)
        if group_device.shape != (self.num_groups,):
            raise PlacementError(f"expected one device per group ({self.num_groups}), "
                                 f"got shape {group_device.shape}")
        return Placement(group_device[self.group_of])

    @classmethod
    def from_labels(cls, graph: OpGraph, labels) -> CoarseGraph:
        """Group ops by any per-op label (equal labels, one group), renumbered by first op."""
        labels = np.asarray(labels)
        if labels.shape != (graph.num_ops,):
            raise PlacementError(f"expected one group label per op ({graph.num_ops}), got shape {labels.shape}")
        _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first)] = np.arange(len(first))
        return cls(graph, rank[inverse.reshape(-1)])

    @classmethod
    def colocation(cls, graph: OpGraph) -> CoarseGraph:
        """One group per colocation group; every other op is a group of its own."""
        labels = np.arange(graph.num_ops)
        for ops in graph.colocation_groups.values():
            labels[ops] = ops[0]
        return cls.from_labels(graph, labels)
