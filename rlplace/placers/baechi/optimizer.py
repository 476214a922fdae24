"""Baechi's graph optimizer (Baechi §3.1-3.3, §4.1): which ops must share a device
(``coplacement_labels``), operator fusion inside those sets (``fuse``), both as switches
(``GraphOptimizer``), and forward-operator-based placement (``backward_ops``, ``forward_part``,
``follow_forward``). Its result is a ``rlplace.coarsen.CoarseGraph`` whose quotient the Baechi
placers place."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from rlplace.cluster import CommModel
from rlplace.coarsen import CoarseGraph, no_gc_pauses, union_labels
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph

COPLACEMENT_RULES = ("paper", "cost")


def coplacement_labels(graph: OpGraph, colocation: bool = True, coplacement: bool = True,
                       rule: str = "cost", comm: CommModel | None = None, ratio: float = 0.1,
                       memory_limit: int | None = None) -> np.ndarray:
    """One label per op; ops with equal labels must share a device (Baechi §3.1-3.2).

    ``colocation``: the ops of a TensorFlow colocation group. ``coplacement``: a forward op
    whose output feeds one forward op only joins it, and a backward op joins its forward op.
    ``memory_limit`` (bytes; not in the paper): a co-placement that would make a set's memory
    exceed it is left out (``_bounded_union``); colocation groups stay whole.

    ``rule="paper"`` is §3.2's single-successor rule as written. It ignores what the reader
    waits for and what the ops cost: a reader with several inputs whose producers all feed it only
    pulls them all onto one device, where they run one after another instead of side by side, and
    the set's device is chosen when its first op is ready (§3.1's co-adjusting), before the
    reader's other inputs are known. On layered random DAGs this makes m-ETF 12% slower than
    without co-placement (geometric mean, up to 30%; experiments/results/coplacement.md).
    ``rule="cost"`` (the default) keeps §3.2's case (i) as its text motivates it, "operators whose computation
    times are much shorter than their communication times": an op joins its only reader when its
    compute is at most ``ratio`` (0.1: an order of magnitude, "much shorter") times the time its
    outputs take to send with ``comm``, or when every other input of the reader comes from such
    cheap ops (the reader waits for the op anyway, so joining loses no parallelism and saves the
    transfer). Without ``comm`` only the second case applies.

    Only data edges count as uses of an output: a control edge carries no tensor, so co-placing
    along it saves no transfer (every optimizer update has one to the train op, which would
    otherwise join all variables into one group). The single-successor rule looks at the forward
    ops, the graph that forward-operator-based placement places (§3.3); backward ops are
    co-placed by their pairs ("forcing corresponding pairs to be co-placed", §3.3). Applied to
    the backward ops too, it chains the layers of our GNMT through the gradient sums into one
    set of 23,818 of its 31,509 ops."""
    n = graph.num_ops
    a: list[np.ndarray] = [np.arange(n)]
    b: list[np.ndarray] = [np.arange(n)]
    if colocation:
        for ops in graph.colocation_groups.values():
            a.append(np.full(len(ops), ops[0]))
            b.append(ops)
    if coplacement:
        forward = ~backward_ops(graph)
        use = (graph.edge_src_output >= 0) & forward[graph.edge_src] & forward[graph.edge_dst]
        src, dst = graph.edge_src[use], graph.edge_dst[use]
        lo = np.full(n, n, dtype=np.int64)
        hi = np.full(n, -1, dtype=np.int64)
        np.minimum.at(lo, src, dst)
        np.maximum.at(hi, src, dst)
        single = np.flatnonzero(lo == hi)  # every out-edge goes to one op
        if rule == "cost":
            if not ratio > 0:
                raise ConfigError(f"coplacement ratio must be > 0, got {ratio!r}")
            single = single[_coplacement_saves(graph, single, lo[single], use, comm, ratio)]
        elif rule not in COPLACEMENT_RULES:
            raise ConfigError(f"coplacement rule must be one of {COPLACEMENT_RULES}, got {rule!r}")
        backward = np.flatnonzero(graph.forward_op >= 0)
        if memory_limit is not None:
            return _bounded_union(union_labels(n, np.concatenate(a), np.concatenate(b)),
                                  np.concatenate([single, backward]),
                                  np.concatenate([lo[single], graph.forward_op[backward]]),
                                  graph.op_memory, memory_limit)
        a += [single, backward]
        b += [lo[single], graph.forward_op[backward]]
    return union_labels(n, np.concatenate(a), np.concatenate(b))


def _bounded_union(base: np.ndarray, a: np.ndarray, b: np.ndarray, memory: np.ndarray, limit: int) -> np.ndarray:
    """The sets of ``base`` (labels) joined pair by pair, (a[k], b[k]) in order, except where the
    joined set's ``memory`` (summed over its ops) would exceed ``limit``.

    Baechi places a co-placement set on one device (§3.1), so a set larger than a device cannot
    fit. On residual training graphs the sets chain into one: on BERT-12 (5,897 ops), TensorFlow's
    colocation of the gradient sums with the gradient ops they add, joined to their forward ops by
    case (ii), puts 5,647 ops in one set; its placement runs out of memory on every device of 8 GiB,
    and without the optimizer m-ETF spreads the ops over the devices (2.86x the communication
    bound). An op's memory here is §2.2's (its persistent, temporary and output bytes, as m-TOPO
    counts it), which overstates what a set's own ops hold at once (experiments/studies.md,
    "m-ETF on BERT-12")."""
    from scipy.cluster.hierarchy import DisjointSet

    k = int(base.max(initial=-1)) + 1
    held = np.bincount(base, weights=memory, minlength=k)
    sets = DisjointSet(range(k))
    for x, y in zip(base[a].tolist(), base[b].tolist()):
        rx, ry = sets[x], sets[y]
        if rx != ry and held[rx] + held[ry] <= limit:
            sets.merge(rx, ry)
            held[sets[rx]] = held[rx] + held[ry]
    roots = np.array([sets[x] for x in range(k)], dtype=np.int64)
    return np.unique(roots, return_inverse=True)[1].reshape(-1)[base]


def _coplacement_saves(graph: OpGraph, op: np.ndarray, reader: np.ndarray, use: np.ndarray,
                       comm: CommModel | None, ratio: float) -> np.ndarray:
    """For each ``op`` whose counted outputs (``use``: per edge) all go to ``reader``, whether
    ``rule="cost"`` joins them (``coplacement_labels``): the op is cheap (its compute at most
    ``ratio`` times the transfer time of its outputs with ``comm``), or every other data input of
    the reader comes from cheap ops (a TensorFlow colocation group counts as one producer)."""
    n = graph.num_ops
    unit = np.arange(n)
    for ops in graph.colocation_groups.values():
        unit[ops] = ops[0]
    cheap = np.zeros(n, dtype=bool)
    if comm is not None:
        out = np.unique(graph.edge_tensor[use])
        send = np.zeros(n)  # its outputs to the reader, one after another
        np.add.at(send, graph.tensor_src[out],
                  np.asarray(comm.transfer_time(graph.tensor_bytes[out]), dtype=np.float64).reshape(-1))
        cheap[op] = graph.compute_time[op] <= ratio * send[op]
    data = np.flatnonzero(graph.edge_src_output >= 0)
    src, dst = graph.edge_src[data], graph.edge_dst[data]
    pairs = np.unique(np.column_stack([unit[src], dst])[~cheap[src]], axis=0)
    costly = np.bincount(pairs[:, 1], minlength=n)  # per reader: producers that are not cheap
    return cheap[op] | (costly[reader] <= 1)


FUSION_RULES = ("lossless", "degree")


def deferred_sets(graph: OpGraph, set_of: np.ndarray, joined: bool = False) -> np.ndarray:
    """Per set (``set_of``: one label 0..k-1 per op): whether its sources should wait until a
    member that has an input from outside decides the set's device (§3.1 places a set where its
    first op goes; a source is ready at time 0, before anything the set reads exists). True
    where some such member does not wait for the set's sources. Where every one does (a
    variable's set {variable, read, slot, update} in a whole training step is entered by the
    update, which waits for the gradient of the variable's read), holding the sources would hold
    the set until nothing else is ready, so its sources place it, as §3.1 says. ``joined``
    (``fuse``): the sources are to join the members they feed, so only waiting through ops
    outside the set counts."""
    k = int(set_of.max(initial=-1)) + 1
    cross = set_of[graph.edge_src] != set_of[graph.edge_dst]
    members = np.unique(graph.edge_dst[cross])  # with an input from outside
    members = members[np.argsort(set_of[members], kind="stable")]
    member_ptr = np.searchsorted(set_of[members], np.arange(k + 1))
    sources = np.flatnonzero(np.diff(graph.in_ptr) == 0)
    sources = sources[np.argsort(set_of[sources], kind="stable")]
    source_ptr = np.searchsorted(set_of[sources], np.arange(k + 1))
    return _deferred_sets(graph.out_ptr, graph.edge_dst, set_of, member_ptr, members, source_ptr, sources, joined)


@numba.njit(cache=True)
def _deferred_sets(out_ptr, edge_dst, set_of, member_ptr, members, source_ptr, sources,
                   joined):  # pragma: no cover - compiled
    """``deferred_sets`` per set: a search from the set's sources, up to its last entered member
    (op indices are topological), that tells the ops reached without leaving the set from those
    reached through an op outside it; then whether an entered member was not reached so (nor
    at all, unless ``joined``)."""
    k = len(member_ptr) - 1
    n = len(out_ptr) - 1
    inside = np.full(n, -1, dtype=np.int64)  # reached from set s's sources without leaving s
    outside = np.full(n, -1, dtype=np.int64)  # reached through an op outside s
    stack = np.empty(2 * n, dtype=np.int64)  # op * 2 + (1 if the path has left the set)
    deferred = np.zeros(k, dtype=np.bool_)
    for s in range(k):
        if member_ptr[s] == member_ptr[s + 1] or source_ptr[s] == source_ptr[s + 1]:
            continue  # nothing enters it, or nothing to hold
        limit = members[member_ptr[s + 1] - 1]
        top = 0
        for q in range(source_ptr[s], source_ptr[s + 1]):
            inside[sources[q]] = s
            stack[top] = 2 * sources[q]
            top += 1
        while top > 0:
            top -= 1
            v, left = stack[top] // 2, stack[top] % 2
            for e in range(out_ptr[v], out_ptr[v + 1]):
                w = edge_dst[e]
                if w > limit:
                    continue
                if left == 0 and set_of[w] == s:
                    if inside[w] != s:
                        inside[w] = s
                        stack[top] = 2 * w
                        top += 1
                elif outside[w] != s:
                    outside[w] = s
                    stack[top] = 2 * w + 1
                    top += 1
        for q in range(member_ptr[s], member_ptr[s + 1]):
            if outside[members[q]] != s and (joined or inside[members[q]] != s):
                deferred[s] = True
                break
    return deferred


@no_gc_pauses()
def fuse(graph: OpGraph, coplace: np.ndarray, exact_check: bool = False, rule: str = "lossless") -> CoarseGraph:
    """Operator fusion (Baechi §3.3): contract edges src -> dst whose ends share a co-placement
    label, keeping the graph of groups acyclic. Degrees count every edge (data and control) of
    the current graph of groups; passes repeat until nothing fuses.

    ``rule="degree"`` is §3.3's rule as written: contract when src has at most one successor or
    dst at most one predecessor (a second path src -> dst, which contraction would turn into a
    cycle, needs both degrees >= 2); with ``exact_check`` the remaining edges are contracted too
    when a search finds no second path. It is a cycle test only, and a fused node starts when all
    its inputs are in and releases its outputs when all its ops are done, so it lets through
    contractions that lose parallelism in the graph the placer schedules: dst's only input is src
    but src feeds other groups (they now wait for dst's compute too), or src's only reader is dst
    but dst has other inputs (src can no longer run before they arrive).

    ``rule="lossless"`` (the default) contracts only where the fused node waits for nothing its
    ops would not wait for and holds back no output its ops would release earlier, in the
    as-soon-as-possible schedule (unlimited devices, compute times only) of the current groups,
    which these contractions leave unchanged:

    * a chain link: src's only successor is dst and dst's only predecessor is src;
    * src's only successor is dst, and dst's other predecessors share the set (so the same
      device, no transfer) and finish before src can start;
    * dst's only predecessor is src, and src's other successors share the set and cannot start
      before dst ends;
    * a source (an op with no inputs) of a set whose placement waits for a member
      (``deferred_sets``) joins a successor in its set (one that no other path from the source reaches, so no cycle), until
      the set has no source left: the set (a variable, its slots, the batch-norm constants of a
      co-placement set) is then placed when a member that waits for that input is ready, not by
      one of its sources at time 0 before anything is known (Baechi Fig. 6's reason for fusing
      Step into UpdateStep). Only this one delays anything: the source's own compute, which for
      a training step's sources (variables, constants, inputs) is next to none. The list
      schedulers hold the sources that cannot join (``rlplace.placers.baechi.placer._list_schedule``).

    Otherwise a source is never extended: every source is ready at time 0, so a list scheduler
    runs the other sources between a source and its reader, which a fused node would forbid.
    Each of these contractions has src's out-degree or dst's in-degree 1, so none closes a cycle
    and ``exact_check`` changes nothing."""
    if rule not in FUSION_RULES:
        raise ConfigError(f"fusion rule must be one of {FUSION_RULES}, got {rule!r}")
    groups = _Groups(graph)
    inside = groups.pairs[coplace[groups.pairs[:, 0]] == coplace[groups.pairs[:, 1]]].tolist()
    if rule == "degree":
        _fuse_by_degree(groups, inside, exact_check)
    else:
        _fuse_lossless(groups, graph, coplace, inside)
    return CoarseGraph.from_labels(graph, [groups.find(i) for i in range(graph.num_ops)], coplace=coplace)


class _Groups:
    """The graph of groups while ``fuse`` contracts edges: each group is named by a root op
    (union-find with path halving) and holds its successor and predecessor groups."""

    def __init__(self, graph: OpGraph):
        n = graph.num_ops
        self.pairs = np.unique(np.column_stack([graph.edge_src, graph.edge_dst]), axis=0)
        self.succ: list[set[int]] = [set() for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        for u, v in self.pairs.tolist():
            self.succ[u].add(v)
            self.pred[v].add(u)
        self.root = list(range(n))

    def find(self, x: int) -> int:
        root = self.root
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    def other_path(self, u: int, v: int) -> bool:
        """Whether group ``v`` is reachable from ``u`` other than by the edge u -> v (contracting
        the edge would then close a cycle)."""
        stack = [x for x in self.succ[u] if x != v]
        seen = set(stack)
        while stack:
            x = stack.pop()
            if x == v:
                return True
            for y in self.succ[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def contract(self, u: int, v: int) -> int:
        """Merge group ``v`` into ``u`` (or the other way, keeping the one with more edges);
        returns the root kept."""
        succ, pred = self.succ, self.pred
        succ[u].discard(v)
        pred[v].discard(u)
        keep, gone = (u, v) if len(succ[u]) + len(pred[u]) >= len(succ[v]) + len(pred[v]) else (v, u)
        self.root[gone] = keep
        for x in succ[gone]:
            pred[x].discard(gone)
            pred[x].add(keep)
            succ[keep].add(x)
        for x in pred[gone]:
            succ[x].discard(gone)
            succ[x].add(keep)
            pred[keep].add(x)
        succ[gone] = set()
        pred[gone] = set()
        return keep


def _fuse_by_degree(groups: _Groups, inside: list[list[int]], exact_check: bool) -> None:
    """§3.3's rule as written (``fuse``'s ``rule="degree"``), passes until nothing fuses."""
    changed = True
    while changed:
        changed = False
        for u0, v0 in inside:
            u, v = groups.find(u0), groups.find(v0)
            if u != v and (len(groups.succ[u]) <= 1 or len(groups.pred[v]) <= 1 or (
                    exact_check and not groups.other_path(u, v))):
                groups.contract(u, v)
                changed = True


def _fuse_lossless(groups: _Groups, graph: OpGraph, coplace: np.ndarray, inside: list[list[int]]) -> None:
    """The contractions that lose no parallelism (``fuse``'s ``rule="lossless"``): sources join
    a member of their set where that defers the set's placement, then passes of the other three
    cases over the as-soon-as-possible schedule, until nothing fuses."""
    work = np.array(graph.compute_time, dtype=np.float64)  # compute of each group, at its root
    _, set_of = np.unique(np.asarray(coplace), return_inverse=True)
    set_of = set_of.reshape(-1)
    deferred = deferred_sets(graph, set_of, joined=True)
    tol = 1e-9 * (float(work.sum()) or 1.0)  # the same times summed in another order
    _sources_join(groups, inside, work, set_of, deferred)
    while True:
        est, eft = _asap(groups, work)
        changed = True
        while changed:
            changed = False
            for u0, v0 in inside:
                u, v = groups.find(u0), groups.find(v0)
                if u != v and groups.pred[u] and _loses_nothing(groups, u, v, set_of, est, eft, tol):
                    start, finish, w = est[u], eft[v], work[u] + work[v]
                    r = groups.contract(u, v)
                    est[r], eft[r], work[r] = start, finish, w
                    changed = True
        if not _sources_join(groups, inside, work, set_of, deferred):
            return


def _loses_nothing(groups: _Groups, u: int, v: int, set_of: np.ndarray, est: np.ndarray, eft: np.ndarray,
                   tol: float) -> bool:
    """Whether contracting u -> v (u not a source) is one of the lossless cases of ``fuse``: a
    chain link; u's only successor v, whose other predecessors share the set and finish before u
    can start; v's only predecessor u, whose other successors share the set and cannot start
    before v ends."""
    single_out, single_in = len(groups.succ[u]) == 1, len(groups.pred[v]) == 1
    s = set_of[u]
    if single_out and single_in:
        return True
    if single_out:
        return all(set_of[x] == s and eft[x] <= est[u] + tol for x in groups.pred[v] if x != u)
    if single_in:
        return all(set_of[x] == s and est[x] + tol >= eft[v] for x in groups.succ[u] if x != v)
    return False


def _sources_join(groups: _Groups, inside: list[list[int]], work: np.ndarray, set_of: np.ndarray,
                  deferred: np.ndarray) -> bool:
    """Sources join a reader in their set where that defers their set's placement; whether any did."""
    done = False
    for u0, v0 in inside:
        u, v = groups.find(u0), groups.find(v0)
        if u != v and not groups.pred[u] and deferred[set_of[u0]] and not groups.other_path(u, v):
            w = work[u] + work[v]
            work[groups.contract(u, v)] = w
            done = True
    return done


def _asap(groups: _Groups, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start and finish of every group (at its root) with unlimited devices."""
    n = len(work)
    est, eft = np.zeros(n), np.zeros(n)
    roots = [i for i in range(n) if groups.root[i] == i]
    indegree = {r: len(groups.pred[r]) for r in roots}
    ready = [r for r in roots if indegree[r] == 0]
    while ready:
        r = ready.pop()
        eft[r] = est[r] + work[r]
        for x in groups.succ[r]:
            est[x] = max(est[x], eft[r])
            indegree[x] -= 1
            if indegree[x] == 0:
                ready.append(x)
    return est, eft


@dataclass(frozen=True)
class GraphOptimizer:
    """Baechi's graph optimizer (§3.1-3.3, §4.1), each step a switch.

    ``colocation`` keeps TensorFlow colocation groups on one device, ``coplacement`` adds the
    co-placement sets of §3.2, ``fusion`` contracts edges inside those sets (``fuse``:
    ``fusion_rule`` "lossless", the default, or §3.3's "degree" rule, which ``fusion_exact_check``
    extends with the path check). ``coplacement_rule``: "cost" (the default,
    ``coplacement_labels``, with ``coplacement_ratio``) or "paper" (§3.2's rule as written, which
    experiments/bench_fusion.py compares against; experiments/studies.md, "Graph optimizer on vs off"). The result's ``coplace`` labels become
    the colocation groups of its quotient, which placers co-adjust (§3.1)."""

    colocation: bool = True
    coplacement: bool = True
    fusion: bool = True
    fusion_exact_check: bool = False
    fusion_rule: str = "lossless"
    coplacement_rule: str = "cost"  # or "paper" (``coplacement_labels``)
    coplacement_ratio: float = 0.1

    def optimize(self, graph: OpGraph, comm: CommModel | None = None, memory_limit: int | None = None) -> CoarseGraph:
        """The grouping of ``graph``; ``comm``: the interconnect, for the "cost" co-placement rule;
        ``memory_limit``: the most memory a co-placement set may have (``coplacement_labels``)."""
        labels = coplacement_labels(graph, self.colocation, self.coplacement, self.coplacement_rule, comm,
                                    self.coplacement_ratio, memory_limit)
        if self.fusion:
            return fuse(graph, labels, self.fusion_exact_check, self.fusion_rule)
        return CoarseGraph(graph, np.arange(graph.num_ops), labels)


def backward_ops(graph: OpGraph, updates: bool = False) -> np.ndarray:
    """Which ops belong to the backward pass: those with a ``forward_op``, and those whose data
    inputs all come from the backward pass (gradient sums such as TensorFlow's
    ``gradients/AddN``, which name no forward op).

    With ``updates`` the backward pass is everything forward-only placement (§3.3) should not
    place by itself, because it runs after the gradients or only feeds them:

    * ops with any data input from the backward pass, or only control inputs and one from it:
      the optimizer's updates (``ResourceApplyRMSProp``), which read the gradient beside the
      variable and the learning rate, and what runs after them (the train op, the step counter's
      increment). Counted as forward, an update is placed with the forward ops although it runs
      after the gradients and, colocated with its variable, it decides the device of the
      variable's co-placement set at time 0 (§3.1);
    * ops none of whose readers is forward and that no backward op names as its forward op:
      the learning-rate schedule, which only the updates read, and the gradients' seed
      (``gradients/grad_ys_0``). Left in the forward part they would be placed with no reader
      in sight, wherever a device is idle at time 0, and their tensors sent across from there."""
    backward = graph.forward_op >= 0
    if not backward.any():
        return backward
    data = graph.edge_src_output >= 0
    for i in np.flatnonzero(~backward):  # op indices are topological: inputs are decided first
        inputs = graph.in_edges[graph.in_ptr[i]:graph.in_ptr[i + 1]]
        from_backward = backward[graph.edge_src[inputs[data[inputs]]]]
        if len(from_backward):
            backward[i] = bool(from_backward.any() if updates else from_backward.all())
        elif updates:
            backward[i] = bool(backward[graph.edge_src[inputs]].any())
    if updates:
        named = np.zeros(graph.num_ops, dtype=bool)
        named[graph.forward_op[graph.forward_op >= 0]] = True
        for i in np.flatnonzero(~backward & ~named)[::-1]:  # readers are decided first
            readers = graph.edge_dst[graph.out_ptr[i]:graph.out_ptr[i + 1]]
            backward[i] = len(readers) > 0 and bool(backward[readers].all())
    return backward


def forward_part(graph: OpGraph) -> tuple[OpGraph, np.ndarray]:
    """The subgraph of forward ops (not ``backward_ops`` with ``updates``: the optimizer's
    updates, what runs after them and what only feeds them follow too) and their indices in
    ``graph``, for forward-operator-based placement (Baechi §3.3)."""
    keep = np.flatnonzero(~backward_ops(graph, updates=True))
    if len(keep) == graph.num_ops:
        return graph, keep
    ops = []
    for i in keep.tolist():
        rec = graph.op_record(i)
        rec.pop("forward_op", None)
        ops.append(rec)
    kept = np.zeros(graph.num_ops, dtype=bool)
    kept[keep] = True
    inside = np.flatnonzero(kept[graph.edge_src] & kept[graph.edge_dst])
    names = graph.names
    edges = [(names[s], names[d], b, p) for s, d, b, p in zip(
        graph.edge_src[inside].tolist(), graph.edge_dst[inside].tolist(),
        graph.edge_bytes[inside].tolist(), graph.edge_src_output[inside].tolist())]
    return OpGraph.from_records(ops, edges, name=f"{graph.name}/forward"), keep


def follow_forward(graph: OpGraph, forward_ops: np.ndarray, forward_devices: np.ndarray) -> np.ndarray:
    """One device per op of ``graph`` from the devices of its forward ops: every backward op
    follows its forward op (Baechi §3.2); an op after the gradients with no forward op (a
    gradient sum, an optimizer update, the train op) follows its first data input, or its first
    input where it has only control inputs; an op before them that only feeds them (the
    learning-rate schedule, ``backward_ops`` with ``updates``) follows its first reader. Then
    each colocation group follows its first forward member (or its first member), so no group
    is split."""
    device = np.full(graph.num_ops, -1, dtype=np.int64)
    device[forward_ops] = forward_devices
    n = graph.num_ops
    data = graph.edge_src_output >= 0
    first_data_input, first_input, first_reader = np.full((3, n), n, dtype=np.int64)
    np.minimum.at(first_data_input, graph.edge_dst[data], graph.edge_src[data])
    np.minimum.at(first_input, graph.edge_dst, graph.edge_src)
    np.minimum.at(first_reader, graph.edge_src, graph.edge_dst)
    first_input = np.where(first_data_input < n, first_data_input, first_input)
    after = np.zeros(n, dtype=bool)  # the gradients and every op they reach
    gradients = np.flatnonzero(graph.forward_op >= 0)
    if len(gradients):
        reach = sp.csr_matrix((np.ones(graph.num_edges + len(gradients)),
                               (np.concatenate([graph.edge_src, np.full(len(gradients), n)]),
                                np.concatenate([graph.edge_dst, gradients]))), shape=(n + 1, n + 1))
        after[breadth_first_order(reach, n, return_predecessors=False)[1:]] = True
    leader = np.where(graph.forward_op >= 0, graph.forward_op, np.where(after, first_input, first_reader))
    leader[leader == n] = -1
    todo = np.flatnonzero(device < 0)
    while len(todo):  # chains (backward ops of backward ops, sums of sums) resolve pass by pass
        device[todo] = np.where(leader[todo] >= 0, device[leader[todo]], -1)
        left = todo[device[todo] < 0]
        if len(left) == len(todo):
            device[left] = 0  # a cycle of leaders: nothing to follow
            break
        todo = left
    is_forward = np.zeros(graph.num_ops, dtype=bool)
    is_forward[forward_ops] = True
    for ops in graph.colocation_groups.values():
        lead = ops[is_forward[ops]]
        device[ops] = device[lead[0] if len(lead) else ops[0]]
    return device
