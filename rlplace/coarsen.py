"""CoarseGraph: a grouping of ops that are placed together, and the map op -> group.

Placing the groups places the ops: ``expand`` turns one device per group into a Placement.
Colocation groups (ops TensorFlow requires on one device) are the first grouping; Baechi's
co-placement and fusion and the Hierarchical Planner's learned groups build on the same type.

Baechi's graph optimizer, which builds its groupings, is ``rlplace.placers.baechi.optimizer``.
"""

from __future__ import annotations

import gc
import heapq
from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from rlplace.errors import PlacementError, first_line
from rlplace.graph import OpGraph
from rlplace.placement import Placement


@contextmanager
def no_gc_pauses():
    """Python's cycle collector off while a grouping builds its per-op sets and records (as a
    decorator): they hold no cycles, and the collections their number triggers, each walking
    every object a large graph keeps alive, took half of ``fuse``'s time on a 20,000-op graph."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class CoarseGraph:
    """``group_of[op]`` is the group of each op. ``from_labels`` numbers the groups in a
    topological order of the graph of groups (ties: the earlier first op first), so op ``j`` of
    ``quotient()`` is group ``j``; a grouping whose groups form a cycle is numbered by first op.

    ``coplace`` (optional, one label per op, constant within a group) names the sets of ops
    that must share a device although they are not one group (Baechi's co-placement and
    colocation sets, which fusing whole would make cycles). Where it is given, the quotient's
    colocation groups are exactly these sets."""

    graph: OpGraph
    group_of: np.ndarray
    coplace: np.ndarray | None = None

    @property
    def num_groups(self) -> int:
        return int(self.group_of.max(initial=-1)) + 1

    def members(self, group: int) -> np.ndarray:
        return np.flatnonzero(self.group_of == group)

    def first_ops(self) -> np.ndarray:
        """The first (lowest-index, so topologically first) op of each group: the op that
        stands for its group where one op's attributes are needed."""
        first = np.full(self.num_groups, self.graph.num_ops, dtype=np.int64)
        np.minimum.at(first, self.group_of, np.arange(self.graph.num_ops))
        return first

    def expand(self, group_device) -> Placement:
        """The op placement that puts every op on its group's device."""
        group_device = np.asarray(group_device)
        if group_device.shape != (self.num_groups,):
            raise PlacementError(f"expected one device per group ({self.num_groups}), "
                                 f"got shape {group_device.shape}")
        return Placement(group_device[self.group_of])

    @no_gc_pauses()
    def quotient(self, colocation: bool = True) -> OpGraph:
        """The graph of the groups, as an OpGraph a placer can work on: one op per group (named
        after its first op) and one edge per (tensor, reading group) crossing groups.

        The group's costs are the ones the simulator sees for its ops on one device. Compute time
        and persistent bytes are the members' sums. Its outputs are the tensors that leave it,
        each sized and sent as in the op graph (once per reading device, however many of the
        group's ops read it). Its temporary bytes are the most its ops hold at once besides
        those outputs when they run back to back (``group_working_bytes``: temporaries, outputs
        read inside the group until their last reader there ends, unread outputs while their op
        runs); a group of one op keeps exactly the op's bytes (temporary + unread outputs).
        Colocation groups carry over: groups sharing a colocation group, even through another
        group, share one; with ``colocation=False`` the quotient has none (for a placer that
        applies colocation to the ops itself). ``forward_op`` is the group of the members'
        forward ops when those lie in one other group. Raises GraphError if the grouping makes
        a cycle."""
        g = self.graph
        k = self.num_groups
        first = self.first_ops()
        compute = np.zeros(k)
        np.add.at(compute, self.group_of, g.compute_time)
        persistent = np.zeros(k, dtype=np.int64)
        np.add.at(persistent, self.group_of, g.persistent_bytes)

        # one output port per tensor leaving a group, numbered by tensor within the group
        crossing = np.flatnonzero(self.group_of[g.edge_src] != self.group_of[g.edge_dst])
        src, dst = self.group_of[g.edge_src[crossing]], self.group_of[g.edge_dst[crossing]]
        tensor = g.edge_tensor[crossing]
        data = g.edge_src_output[crossing] >= 0
        leaving = np.unique(tensor[data])
        owner = self.group_of[g.tensor_src[leaving]]
        by_owner = np.lexsort((leaving, owner))
        leaving, owner = leaving[by_owner], owner[by_owner]
        start = np.searchsorted(owner, np.arange(k))
        port_of_tensor = np.full(len(g.tensor_src), -1, dtype=np.int64)
        port_of_tensor[leaving] = np.arange(len(leaving)) - start[owner]
        out_bytes, out_ptr = g.tensor_output_bytes[leaving].tolist(), np.append(start, len(leaving)).tolist()
        port = np.where(data, port_of_tensor[tensor], -1)
        keys, inverse = np.unique(np.stack([src, port, dst]), axis=1, return_inverse=True)
        nbytes = np.zeros(keys.shape[1], dtype=np.int64)
        # a data edge carries its tensor's bytes (what the simulator sends), a control edge its own
        np.maximum.at(nbytes, inverse.reshape(-1),
                      np.where(data, g.tensor_bytes[tensor], g.edge_bytes[crossing]))
        temporary = group_working_bytes(g, self.group_of, k)

        if not colocation:
            coloc_names: list[str | None] = [None] * k
        elif self.coplace is None:
            coloc_names = _merged_colocation(g, self.group_of, k)
        else:
            coloc_names = _coplace_names(g, self.group_of, self.coplace, first)
        forward = _group_forward_op(g, self.group_of, k)
        names = [g.names[i] for i in first]
        ops = []
        alone = (np.bincount(self.group_of, minlength=k) == 1).tolist()
        for j, (i, c, p, t, f) in enumerate(zip(first.tolist(), compute.tolist(), persistent.tolist(),
                                                temporary.tolist(), forward.tolist())):
            rec = {"name": names[j], "compute_time": c, "persistent_bytes": p, "temporary_bytes": t,
                   "output_bytes": out_bytes[out_ptr[j]:out_ptr[j + 1]], "colocation_group": coloc_names[j],
                   "layer": g.layer[i], "op_type": g.op_type[i] if alone[j] else "Fused",
                   "forward_op": names[f] if f >= 0 else None}
            ops.append({key: v for key, v in rec.items() if v is not None})
        name = f"{g.name}/coarse"
        if np.all(keys[0] < keys[2]):
            # groups numbered in topological order (``from_labels``), edges sorted by (src, port,
            # dst): the form ``from_records`` gives, whose checks a grouping of a valid graph passes
            return OpGraph(name, ops, np.column_stack([keys[0], keys[2], nbytes, keys[1]]))
        edge_list = [(names[a], names[c], b, p) for (a, p, c), b in zip(keys.T.tolist(), nbytes.tolist())]
        return OpGraph.from_records(ops, edge_list, name=name)  # renumbers, or names the cycle

    @classmethod
    def from_labels(cls, graph: OpGraph, labels, coplace=None) -> CoarseGraph:
        """Group ops by any per-op label (equal labels, one group), renumbered by first op."""
        try:
            labels = np.asarray(labels)
            if labels.shape != (graph.num_ops,):
                raise PlacementError(f"expected one group label per op ({graph.num_ops}), got shape {labels.shape}")
            _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        except (TypeError, ValueError) as exc:   # ragged, or labels that do not compare
            raise PlacementError(f"group labels must be one comparable label per op ({first_line(exc)})") from None
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first)] = np.arange(len(first))
        group_of = rank[inverse.reshape(-1)]
        order = _topological_groups(len(first), group_of[graph.edge_src], group_of[graph.edge_dst])
        if len(order) == len(first):  # acyclic: renumber in topological order
            renumber = np.empty(len(first), dtype=np.int64)
            renumber[order] = np.arange(len(first))
            group_of = renumber[group_of]
        return cls(graph, group_of, None if coplace is None else np.asarray(coplace))

    def merged_with_colocation(self) -> CoarseGraph:
        """This grouping with every colocation group whole: groups that hold ops of one
        colocation group are merged (transitively)."""
        component = _colocation_components(self.graph, self.group_of, self.num_groups)
        return CoarseGraph.from_labels(self.graph, component[self.group_of])

    @classmethod
    def colocation(cls, graph: OpGraph) -> CoarseGraph:
        """One group per colocation group; every other op is a group of its own."""
        labels = np.arange(graph.num_ops)
        for ops in graph.colocation_groups.values():
            labels[ops] = ops[0]
        return cls.from_labels(graph, labels)


@numba.njit(cache=True)
def _topological_groups(k, src, dst):  # pragma: no cover - compiled
    """Kahn's algorithm on the graph of groups (edges src[e] -> dst[e] between different
    groups), smallest ready group first. Returns fewer than k groups if there is a cycle."""
    indegree = np.zeros(k, dtype=np.int64)
    count = np.zeros(k + 1, dtype=np.int64)
    for e in range(len(src)):
        if src[e] != dst[e]:
            indegree[dst[e]] += 1
            count[src[e] + 1] += 1
    ptr = np.cumsum(count)
    succ = np.empty(ptr[k], dtype=np.int64)
    fill = ptr[:k].copy()
    for e in range(len(src)):
        if src[e] != dst[e]:
            succ[fill[src[e]]] = dst[e]
            fill[src[e]] += 1
    ready = [j for j in range(k) if indegree[j] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        j = heapq.heappop(ready)
        order.append(j)
        for q in range(ptr[j], ptr[j + 1]):
            indegree[succ[q]] -= 1
            if indegree[succ[q]] == 0:
                heapq.heappush(ready, succ[q])
    return np.array(order, dtype=np.int64)


def _colocation_components(graph: OpGraph, group_of: np.ndarray, k: int) -> np.ndarray:
    """Label per coarse group: groups that hold ops of one colocation group, directly or
    through other groups, share a label."""
    pairs = [(groups[0], other) for ops in graph.colocation_groups.values()
             for groups in [np.unique(group_of[ops])] for other in groups[1:]]
    a, b = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return union_labels(k, a, b)


def _merged_colocation(graph: OpGraph, group_of: np.ndarray, k: int) -> list[str | None]:
    """Colocation group name per coarse group: groups holding ops of one colocation group, or
    of two colocation groups that share a coarse group, get one name (the smallest)."""
    component = _colocation_components(graph, group_of, k)
    name: dict[int, str] = {}
    for group, ops in graph.colocation_groups.items():
        c = int(component[group_of[ops[0]]])
        name[c] = min(name.get(c, group), group)
    return [name.get(int(c)) for c in component]


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


def _coplace_names(graph: OpGraph, group_of: np.ndarray, coplace: np.ndarray,
                   first: np.ndarray) -> list[str | None]:
    """Colocation group name per coarse group from per-op co-placement labels: a set spanning
    several coarse groups is named after its smallest TensorFlow colocation group, or
    ``coplace:<its first op>``; a set inside one coarse group needs no name."""
    _, label = np.unique(coplace, return_inverse=True)
    label = label.reshape(-1)
    group_label = label[first]
    spans = np.bincount(group_label)  # coarse groups per set
    set_first = np.full(len(spans), graph.num_ops, dtype=np.int64)
    np.minimum.at(set_first, label, np.arange(graph.num_ops))
    name = {int(s): f"coplace:{graph.names[set_first[s]]}" for s in np.flatnonzero(spans > 1)}
    real: dict[int, str] = {}
    for group, ops in graph.colocation_groups.items():
        s = int(label[ops[0]])
        if s in name:
            real[s] = min(real.get(s, group), group)
    name.update(real)
    return [name.get(int(s)) for s in group_label]


def union_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of the pairs (a[k], b[k]) over n items, as labels."""
    adj = sp.coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    return connected_components(adj, directed=False)[1].astype(np.int64)


def linked_names(pairs: list[tuple[str, str]]) -> dict[str, int]:
    """The component of every name in ``pairs``, names linked by a pair (transitively) sharing
    one: SciPy's connected components, for colocation references by name."""
    if not pairs:
        return {}
    index: dict[str, int] = {}
    for a, b in pairs:
        index.setdefault(a, len(index))
        index.setdefault(b, len(index))
    labels = union_labels(len(index), np.array([index[a] for a, _ in pairs], dtype=np.int64),
                           np.array([index[b] for _, b in pairs], dtype=np.int64))
    return {name: int(labels[i]) for name, i in index.items()}


def group_working_bytes(graph: OpGraph, group_of: np.ndarray, k: int | None = None) -> np.ndarray:
    """Per group: the most bytes its ops hold at once besides the outputs that leave the group,
    when they run back to back on one device in index (topological) order, counted as the
    simulator counts them. An op allocates its temporary bytes and its outputs at its start and
    frees its temporary bytes and unread outputs at its end; an output read only inside the
    group is freed when its last reader there ends. These are the temporary bytes of the
    group's node in the quotient, which (like any op) allocates its outputs at its start: the
    node then holds at least what its ops hold at every moment, and exactly an op's own bytes
    for a group of one op."""
    g = graph
    group_of = np.asarray(group_of, dtype=np.int64)
    if k is None:
        k = int(group_of.max(initial=-1)) + 1
    start = (g.temporary_bytes + g.output_total).astype(np.int64)
    end = (g.temporary_bytes + g.unread_output_bytes).astype(np.int64)
    ntensor = len(g.tensor_src)
    if ntensor:
        own = group_of[g.tensor_src]
        outside = np.zeros(ntensor, dtype=bool)
        np.logical_or.at(outside, g.edge_tensor, group_of[g.edge_dst] != own[g.edge_tensor])
        data = g.tensor_port >= 0
        leave = data & outside  # allocated by the node itself, not counted here
        np.subtract.at(start, g.tensor_src[leave], g.tensor_output_bytes[leave])
        last = np.full(ntensor, -1, dtype=np.int64)
        np.maximum.at(last, g.edge_tensor, g.edge_dst)
        inner = data & ~outside
        np.add.at(end, last[inner], g.tensor_output_bytes[inner])
    order = np.lexsort((np.arange(g.num_ops), group_of))
    gid = group_of[order]
    net = (start - end)[order]
    before = np.cumsum(net) - net  # held before each op starts, counted from the very first op
    first = np.minimum(np.searchsorted(gid, np.arange(k)), max(len(order) - 1, 0))
    live = before - before[first][gid] + start[order]
    peak = np.zeros(k, dtype=np.int64)
    np.maximum.at(peak, gid, live)
    return peak
