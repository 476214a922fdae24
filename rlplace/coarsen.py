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

    def quotient(self) -> OpGraph:
        """The graph of the groups, as an OpGraph a placer can work on: one op per group (named
        after its first op) and one edge per (tensor, reading group) crossing groups.

        A group's compute time and persistent bytes are its members' sums; its temporary bytes
        the largest of its members' (they run one at a time); its outputs are the tensors that
        leave it, each sized as in the op graph, so a tensor read by several ops of one group is
        still sent once. Colocation groups carry over: groups sharing a colocation group, even
        through another group, share one. ``forward_op`` is the group of the members' forward ops
        when those lie in one other group. Raises GraphError if the grouping makes a cycle."""
        g = self.graph
        k = self.num_groups
        first = np.full(k, g.num_ops, dtype=np.int64)
        np.minimum.at(first, self.group_of, np.arange(g.num_ops))
        compute = np.zeros(k)
        np.add.at(compute, self.group_of, g.compute_time)
        persistent = np.zeros(k, dtype=np.int64)
        np.add.at(persistent, self.group_of, g.persistent_bytes)
        temporary = np.zeros(k, dtype=np.int64)
        np.maximum.at(temporary, self.group_of, g.temporary_bytes)

        crossing = self.group_of[g.edge_src] != self.group_of[g.edge_dst]
        outputs: list[list[int]] = [[] for _ in range(k)]  # bytes of each tensor leaving a group
        port_of: dict[int, int] = {}  # tensor -> output port of its group
        edges: dict[tuple[int, int, int], int] = {}  # (src group, port, dst group) -> bytes
        for e in np.flatnonzero(crossing):
            t = int(g.edge_tensor[e])
            src, dst = int(self.group_of[g.edge_src[e]]), int(self.group_of[g.edge_dst[e]])
            if g.edge_src_output[e] < 0:
                port = -1
            elif t in port_of:
                port = port_of[t]
            else:
                port = port_of[t] = len(outputs[src])
                outputs[src].append(int(g.tensor_output_bytes[t]))
            key = (src, port, dst)
            edges[key] = max(edges.get(key, 0), int(g.edge_bytes[e]))

        colocation = _merged_colocation(g, self.group_of, k)
        forward = _group_forward_op(g, self.group_of, k)
        names = [g.names[i] for i in first]
        ops = []
        size = np.bincount(self.group_of, minlength=k)
        for j in range(k):
            rec = {"name": names[j], "compute_time": float(compute[j]), "persistent_bytes": int(persistent[j]),
                   "temporary_bytes": int(temporary[j]), "output_bytes": outputs[j],
                   "colocation_group": colocation[j], "layer": g.layer[first[j]],
                   "op_type": g.op_type[first[j]] if size[j] == 1 else "Fused",
                   "forward_op": names[forward[j]] if forward[j] >= 0 else None}
            ops.append({key: v for key, v in rec.items() if v is not None})
        edge_list = [(names[s], names[d], b, p) for (s, p, d), b in edges.items()]
        return OpGraph.from_records(ops, edge_list, name=f"{g.name}/coarse")

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

    def merged_with_colocation(self) -> CoarseGraph:
        """This grouping with every colocation group whole: groups that hold ops of one
        colocation group are merged (transitively)."""
        parent = np.arange(self.num_groups)

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for ops in self.graph.colocation_groups.values():
            groups = np.unique(self.group_of[ops])
            for other in groups[1:]:
                parent[find(int(other))] = find(int(groups[0]))
        roots = np.array([find(j) for j in range(self.num_groups)], dtype=np.int64)
        return CoarseGraph.from_labels(self.graph, roots[self.group_of])

    @classmethod
    def colocation(cls, graph: OpGraph) -> CoarseGraph:
        """One group per colocation group; every other op is a group of its own."""
        labels = np.arange(graph.num_ops)
        for ops in graph.colocation_groups.values():
            labels[ops] = ops[0]
        return cls.from_labels(graph, labels)


def _merged_colocation(graph: OpGraph, group_of: np.ndarray, k: int) -> list[str | None]:
    """Colocation group name per coarse group: groups holding ops of one colocation group, or
    of two colocation groups that share a coarse group, get one name (the smallest)."""
    parent = list(range(k))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    name: dict[int, str] = {}
    for group, ops in graph.colocation_groups.items():
        coarse = np.unique(group_of[ops])
        root = find(int(coarse[0]))
        for c in coarse[1:]:
            parent[find(int(c))] = root
        name[root] = min(name.get(root, group), group)
    roots = [find(j) for j in range(k)]
    merged: dict[int, str] = {}
    for root, group in name.items():
        r = find(root)
        merged[r] = min(merged.get(r, group), group)
    return [merged.get(r) for r in roots]


def _group_forward_op(graph: OpGraph, group_of: np.ndarray, k: int) -> np.ndarray:
    """The coarse group of the members' forward ops, where those lie in exactly one other group."""
    forward = np.full(k, -1, dtype=np.int64)
    ambiguous = np.zeros(k, dtype=bool)
    for op in np.flatnonzero(graph.forward_op >= 0):
        own, fwd = group_of[op], group_of[graph.forward_op[op]]
        if fwd == own:
            continue
        if forward[own] not in (-1, fwd):
            ambiguous[own] = True
        forward[own] = fwd
    forward[ambiguous] = -1
    return forward
