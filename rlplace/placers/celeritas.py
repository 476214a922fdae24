"""Celeritas: DFS-TOPO and CPD-TOPO orders, Optimal Operation Fusion, Order-Place and Adjusting
Placement (Celeritas §4.2.2 and §5, Algorithms 1 and 2).

Costs follow the paper: ``w_i`` is an op's ``compute_time`` (reference device) and ``c_ij`` the
cluster CommModel's transfer time of the edge's bytes. The placers work on the coarse graph that
fusion builds (``CoarseGraph.quotient``), or on the op graph itself with ``fusion=False``.

Adjusting Placement runs on the execution model the simulator runs (``rlplace.schedule``), in
time order (``in_time``, the default; ``_adjust_in_time``): Eq. 7-9 decide each node's device as
the paper has them, but nodes are taken when they can start, not in CPD-TOPO order, and a device
runs its nodes one after another instead of inserting them into idle slots. The simulator, like
TensorFlow's executor, runs whichever op is ready first: a plan that inserts nodes out of time
order is not what runs (on layered DAGs the paper's plan predicts 1.2x the lower bound and the
simulator runs its placement at 1.4-1.7x). Memory is then the simulator's, from the placer's
own schedule (m-ETF's ledger: outputs held until their last reader ends and their transfers are
done, received copies until their last reader there ends), so a node goes only where it fits at
the time it runs; ``fits`` says whether the simulator ran the placement returned within memory
(``rlplace.placers.fit`` places again with a smaller budget where it did not).

The paper's plan (``in_time=False``, and Order-Place) estimates memory in placement order:
a device holds the persistent bytes of its nodes, each output until every reader of it has been
placed, and every copy it has received (to the end of the step: the simulator receives a copy
as soon as its producer ends, often long before the reader runs). A node fits on a device if
that, plus its own temporary bytes, outputs nobody reads (for a fused node: every tensor that
stays inside it) and the copies it would receive, stays within ``memory_fraction`` of the
device's memory. Colocation is co-adjusted (Baechi §3.1, Celeritas §6.1): the first node of a
colocation group reserves the group's persistent bytes and its members' run-time bytes on its
device (released member by member as they are placed; in time order, Baechi §4.2's largest
temporary plus largest output) and pins the rest of the group there. A fused node holds ops of
many colocation groups, so on the coarse graph colocation is applied to the ops instead: each
group follows its member placed first (``follow_first_placed``). The placer's own schedule does
not see those moves (mostly variable reads and updates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numba
import numpy as np

from rlplace.cluster import Cluster, CommModel
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placed
from rlplace.placers import register
from rlplace.placers.fit import fastest_fit, known_of_one_device, whole_graph_on_one_device
from rlplace.schedule import Schedule, memory_peaks, new_model, schedule_of
from rlplace.schedule.heap import pop, push
from rlplace.schedule.ops import (arrival, book_inputs, defer, duration, first_idle_slot, fits, hold_op_memory,
                                  hold_persistent, input_time, newly_ready, occupy, overfill, received_bytes,
                                  record_transfer, release_on_until, start, vacate)


# ------------------------------------------------------------------------------------ orders
def edge_comm_time(graph: OpGraph, comm: CommModel) -> np.ndarray:
    """``c_ij`` of every edge: its transfer time between two devices."""
    return np.asarray(comm.transfer_time(graph.edge_bytes), dtype=np.float64).reshape(graph.num_edges)


def levels(graph: OpGraph, comm: CommModel) -> tuple[np.ndarray, np.ndarray]:
    """``tlevel`` and ``blevel`` of every op (Celeritas Eq. 2 and 3); ``cpath = tlevel + blevel``."""
    return _levels(graph.in_ptr, graph.in_edges, graph.edge_src, graph.out_ptr, graph.edge_dst,
                   graph.compute_time, edge_comm_time(graph, comm))


def dfs_topo(graph: OpGraph) -> np.ndarray:
    """DFS-TOPO (Celeritas §4.2.2): the op order in which a node whose last input was just
    emitted goes to the head of the queue of ready nodes, so chains stay together. Ready nodes
    and siblings are taken lowest index first."""
    return _stack_order(graph, np.zeros(graph.num_ops))


def cpd_topo(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """CPD-TOPO (Celeritas §5.1.3, Algorithm 1 lines 6-21): DFS-TOPO where the sources are queued
    by decreasing ``cpath`` and the ready children of the node just emitted are pushed to the
    head by increasing ``cpath``, so the child on the critical path comes next. Ties go to the
    lower op index."""
    tlevel, blevel = levels(graph, cluster.comm)
    return _stack_order(graph, tlevel + blevel)


def _stack_order(graph: OpGraph, cpath: np.ndarray) -> np.ndarray:
    """The queue of Algorithm 1 is a stack: its head is the node pushed last. ``rank`` orders
    nodes by (cpath, -index), so pushing by increasing rank leaves the largest on top."""
    n = graph.num_ops
    by_rank = np.lexsort((-np.arange(n), cpath))
    rank = np.empty(n, dtype=np.int64)
    rank[by_rank] = np.arange(n)
    edge_order = np.lexsort((rank[graph.edge_dst], graph.edge_src)).astype(np.int64)
    indegree = np.diff(graph.in_ptr)
    sources = by_rank[indegree[by_rank] == 0].astype(np.int64)
    return _stack_topo(n, sources, edge_order, graph.out_ptr, graph.edge_dst, indegree)


# ------------------------------------------------------------------------------------ fusion
def op_memory(graph: OpGraph) -> np.ndarray:
    """``Memory[v]`` of Eq. 6: persistent + temporary + output bytes (no reuse assumed)."""
    return graph.persistent_bytes + graph.temporary_bytes + graph.output_total


def optimal_breakpoints(graph: OpGraph, order: np.ndarray, edge_cost: np.ndarray, memory: np.ndarray,
                        exploration_range: int, memory_cap: float,
                        compute: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """OPTIMAL_BP of Algorithm 1 (Kernighan's dynamic program, Eq. 4-6): cut the op sequence
    ``order`` into runs of at most ``exploration_range`` ops whose ``memory`` sums to at most
    ``memory_cap`` (a single op always forms a run), minimising the summed ``edge_cost`` of the
    edges between runs. Returns the positions in ``order`` where runs start (the breakpoints, 0
    first) and the minimal cost ``S``.

    With ``compute`` (seconds per op) a run must also serialise no more compute than the
    transfers it saves: its compute minus its longest compute path must not exceed the summed
    cost of the edges inside it. Not in the paper: without it, on graphs whose communication is
    cheap (layered DAGs) a run of 200 ops spans many parallel branches and the fused graph is a
    chain that one device runs alone."""
    if exploration_range < 1:
        raise ConfigError(f"celeritas: exploration_range must be >= 1, got {exploration_range}")
    order = np.asarray(order, dtype=np.int64)
    pos_of = np.empty(graph.num_ops, dtype=np.int64)
    pos_of[order] = np.arange(graph.num_ops)
    check = compute is not None
    starts, cost = _optimal_bp(order, pos_of, graph.out_ptr, graph.edge_dst,
                               np.asarray(edge_cost, dtype=np.float64),
                               np.asarray(memory, dtype=np.float64), int(exploration_range), float(memory_cap),
                               np.asarray(compute if check else np.zeros(graph.num_ops), dtype=np.float64), check)
    return starts, float(cost)


def optimal_fusion(graph: OpGraph, cluster: Cluster, exploration_range: int = 200,
                   memory_cap: float | None = None, keep_parallelism: bool = True) -> CoarseGraph:
    """Optimal Operation Fusion (Celeritas Algorithm 1): the ops between adjacent breakpoints of
    the CPD-TOPO order form one group. ``memory_cap`` (M, bytes) defaults to a quarter of the
    smallest device's memory (§5.1.3). Every group is a run of consecutive ops of a topological
    order, so every edge between groups goes from an earlier run to a later one and the coarse
    graph is a DAG (Celeritas Lemma 2). Colocation plays no part here: the placers pin each
    colocation group op by op (``follow_first_placed``). ``keep_parallelism``: a run serialises
    no more compute than the transfers it saves (``optimal_breakpoints``; not in the paper)."""
    if memory_cap is None:
        memory_cap = 0.25 * float(cluster.memory.min())
    order = cpd_topo(graph, cluster)
    starts, _ = optimal_breakpoints(graph, order, edge_comm_time(graph, cluster.comm), op_memory(graph),
                                    exploration_range, memory_cap,
                                    graph.compute_time if keep_parallelism else None)
    run = np.zeros(graph.num_ops, dtype=np.int64)
    run[starts[1:]] = 1
    labels = np.empty(graph.num_ops, dtype=np.int64)
    labels[order] = np.cumsum(run)
    return CoarseGraph.from_labels(graph, labels)


@dataclass(frozen=True)
class FusionStats:
    """Node count and CCR (Celeritas Eq. 1) before and after fusion, as in Celeritas Table 2."""

    nodes_before: int
    ccr_before: float
    nodes_after: int
    ccr_after: float

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def fusion_stats(graph: OpGraph, cluster: Cluster, exploration_range: int = 200,
                 fusion_memory_fraction: float = 0.25, keep_parallelism: bool = True) -> FusionStats:
    """Celeritas Table 2 for ``graph``: fuse it as the ``celeritas`` placer does by default."""
    coarse = optimal_fusion(graph, cluster, exploration_range,
                            fusion_memory_fraction * float(cluster.memory.min()), keep_parallelism).quotient()
    return FusionStats(graph.num_ops, graph.ccr(cluster.comm), coarse.num_ops, coarse.ccr(cluster.comm))


# ------------------------------------------------------------------------------------ placers
@dataclass
class _CeleritasPlacer:
    """Shared by Order-Place and Adjusting Placement: fuse (Algorithm 1), order the coarse graph
    by CPD-TOPO, place node by node, expand to ops.

    ``fusion``: fuse before placing. ``exploration_range``: R of Eq. 6. ``fusion_memory_fraction``:
    M of Eq. 6 as a fraction of the smallest device's usable memory (the paper's 0.25).
    ``fusion_keeps_parallelism``: a fused node serialises no more compute than the transfers it
    saves (``optimal_breakpoints``; not in the paper). ``fusion_fallback``: also place the
    unfused graph and keep whichever placement the simulator finds faster (not in the paper:
    on graphs whose communication is cheap, such as layered DAGs, fused nodes serialise
    parallel branches, while on high-CCR graphs they keep the placement from spreading the
    graph over devices where transfers cost more than they save).
    ``memory_fraction``: the share of each device's memory the placer may fill. ``memory_rounds``:
    placements tried until the simulator finds one that fits (``rlplace.placers.fit``).
    ``single_fallback`` (not in the paper): the whole graph on one device is weighed beside the
    placer's placements, so where the step fits one device it is never slower than ``single``
    (before it: Celeritas 1.34x ``single`` on a 2+2-layer Transformer, Order-Place up to 1.89x
    on random training steps that fit one device; ``rlplace.placers.fit``).
    ``in_time`` (Adjusting Placement only): place in time order on the simulator's execution
    model (``_adjust_in_time``); False: the paper's plan, CPD-TOPO order with insertion into idle
    slots and the memory sums of the module docstring.

    ``place`` returns a ``Placed`` with ``fits`` (the simulator runs the placement within every
    device's memory), ``schedule`` (the placer's own, of the graph placed: the fused graph unless
    the unfused placement won), ``peak_memory`` (that schedule's peak bytes per device by the
    simulator's memory rules, ``rlplace.schedule.memory_peaks``), ``planned_peak`` (the peak as
    the placer saw it while deciding) and ``nodes_placed``."""

    fusion: bool = True
    exploration_range: int = 200
    fusion_memory_fraction: float = 0.25
    memory_fraction: float = 1.0
    memory_rounds: int = 4
    fusion_keeps_parallelism: bool = True
    fusion_fallback: bool = True
    in_time: bool = True
    single_fallback: bool = True

    adjust: ClassVar[bool]
    name: ClassVar[str]

    def place(self, graph: OpGraph, cluster: Cluster) -> Placed:
        if not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"{self.name}: memory_fraction must be in (0, 1], got {self.memory_fraction}")
        if not self.fusion_memory_fraction > 0:
            raise ConfigError(f"{self.name}: fusion_memory_fraction must be > 0, got {self.fusion_memory_fraction}")
        if not isinstance(self.exploration_range, int) or self.exploration_range < 1:
            raise ConfigError(f"{self.name}: exploration_range must be an integer >= 1, got {self.exploration_range!r}")
        if not isinstance(self.memory_rounds, int) or self.memory_rounds < 1:
            raise ConfigError(f"{self.name}: memory_rounds must be an integer >= 1, got {self.memory_rounds!r}")
        cap = np.floor(self.memory_fraction * cluster.memory).astype(np.int64)
        rounds = {}  # each placement tried: what the placer knew of it
        fuses = (True, False) if self.fusion and self.fusion_fallback else (self.fusion,)
        placed = whole_graph_on_one_device(graph, cluster) if self.single_fallback else []
        device, result = fastest_fit([lambda budget, fuse=fuse: self._place_within(graph, cluster, budget, fuse, rounds)
                                      for fuse in fuses], graph, cluster, cap, self.memory_rounds, placed)
        nodes_placed, planned_peak, schedule, peak_memory = (
            rounds.get(device.tobytes()) or known_of_one_device(graph, result))
        return Placed(device, nodes_placed=nodes_placed, schedule=schedule, planned_peak=planned_peak,
                      peak_memory=peak_memory, fits=not result.oom)

    def _place_within(self, graph: OpGraph, cluster: Cluster, cap: np.ndarray, fuse: bool,
                      rounds: dict) -> tuple[np.ndarray, np.ndarray]:
        """One device per op within ``cap`` (of the fused graph's nodes with ``fuse``), and the
        peak bytes per device the placer planned; ``rounds[device bytes]`` keeps the node count,
        that peak, the own schedule and its peak memory (of the first way it came to a placement)."""
        device, known = self._place_nodes(graph, cluster, cap, fuse)
        rounds.setdefault(device.tobytes(), known)
        return device, known[1]

    def _place_nodes(self, graph: OpGraph, cluster: Cluster, cap: np.ndarray,
                     fuse: bool) -> tuple[np.ndarray, tuple[int, np.ndarray, Schedule, np.ndarray]]:
        """One device per op: the graph (``fuse``: its fused nodes) placed within ``cap``; and
        what the placer knew of it: the nodes placed, the peak bytes per device it planned, its
        own schedule (of the graph it placed) and that schedule's peak memory."""
        if not fuse or graph.num_ops == 0:
            schedule, planned_peak = self._place_graph(graph, cluster, cap,
                                                       graph.temporary_bytes + graph.unread_output_bytes,
                                                       cpd_topo(graph, cluster))
            return schedule.op_device, (graph.num_ops, planned_peak, schedule,
                                        memory_peaks(graph, cluster.num_devices, schedule, cluster.memory_model))
        coarse = optimal_fusion(graph, cluster, self.exploration_range,
                                self.fusion_memory_fraction * float(cap.min()), self.fusion_keeps_parallelism)
        # A fused node holds ops of many colocation groups; pinning whole nodes to their groups'
        # devices would chain the graph onto one device, so colocation is applied op by op.
        q = coarse.quotient(colocation=False)  # op j of q is group j
        inside = np.zeros(q.num_ops, dtype=np.int64)
        np.add.at(inside, coarse.group_of, graph.temporary_bytes + graph.output_total)
        transient = inside - (q.output_total - q.unread_output_bytes)
        order = cpd_topo(q, cluster)
        schedule, planned_peak = self._place_graph(q, cluster, cap, transient, order)
        device = schedule.op_device
        rank = np.empty(q.num_ops, dtype=np.int64)
        rank[order] = np.arange(q.num_ops)
        return follow_first_placed(graph, device[coarse.group_of], rank[coarse.group_of]), (
            q.num_ops, planned_peak, schedule, memory_peaks(q, cluster.num_devices, schedule, cluster.memory_model))

    def _place_graph(self, g: OpGraph, cluster: Cluster, cap: np.ndarray, transient: np.ndarray,
                     order: np.ndarray) -> tuple[Schedule, np.ndarray]:
        """The placer's own schedule of ``g`` (the device of every node, placed in ``order``, and
        its start and finish times) and the peak bytes per device it planned; ``transient``:
        bytes a node needs only while it runs."""
        coloc = colocation_ids(g)
        member = coloc >= 0
        groups = len(g.colocation_groups)
        coloc_persistent = np.zeros(groups, dtype=np.int64)
        np.add.at(coloc_persistent, coloc[member], g.persistent_bytes[member])
        edge_cost = edge_comm_time(g, cluster.comm)
        if self.adjust and self.in_time:
            m = new_model(g, cluster, placer=True)
            previous = np.full(g.num_ops, -1, dtype=np.int64)  # v_{i-1} of Algorithm 2 line 11
            previous[order[1:]] = order[:-1]
            coloc_extra = np.zeros(groups, dtype=np.int64)  # Baechi §4.2: largest temporary + largest output
            largest_temporary = np.zeros(groups, dtype=np.int64)
            np.maximum.at(largest_temporary, coloc[member], g.temporary_bytes[member])
            np.maximum.at(coloc_extra, coloc[member], g.output_total[member])
            by_group = np.argsort(coloc, kind="stable")
            coloc_members = by_group[coloc[by_group] >= 0].astype(np.int64)
            coloc_ptr = np.searchsorted(coloc[coloc_members], np.arange(groups + 1)).astype(np.int64)
            _adjust_in_time(m, np.asarray(order, dtype=np.int64), previous, cap, edge_cost, coloc, coloc_ptr,
                            coloc_members, coloc_persistent, coloc_extra + largest_temporary)
            if np.any(m.ops.device < 0):
                raise PlacementError(f"{self.name}: node {g.names[int(np.argmax(m.ops.device < 0))]!r} left unplaced")
        else:
            run_bytes = np.asarray(transient, dtype=np.int64) + g.output_total - g.unread_output_bytes
            coloc_reserve = np.zeros(groups, dtype=np.int64)
            np.add.at(coloc_reserve, coloc[member], run_bytes[member])
            m = new_model(g, cluster, insertion=True)
            _place(m, order, self.adjust, cap, edge_cost, np.asarray(transient, dtype=np.int64),
                   coloc, coloc_persistent, coloc_reserve)
        return schedule_of(m, g), m.memory.peak.copy()  # of ``g``: the fused graph unless fusion=False


def colocation_ids(graph: OpGraph) -> np.ndarray:
    """One integer per op: its colocation group's rank among the group names, -1 for none."""
    ids = np.full(graph.num_ops, -1, dtype=np.int64)
    for k, name in enumerate(sorted(graph.colocation_groups)):
        ids[graph.colocation_groups[name]] = k
    return ids


def follow_first_placed(graph: OpGraph, device: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Colocation as Celeritas §6.1 (after Baechi §3.1) applies it: once the first op of a
    colocation group is placed on a device, every op of the group goes there. ``rank``: when
    each op was placed (ops of one fused node share a rank); the result is a new array."""
    device = np.array(device, dtype=np.int64)
    for ops in graph.colocation_groups.values():
        device[ops] = device[ops[np.argmin(rank[ops])]]
    return device


@register("order_place")
@dataclass
class OrderPlacer(_CeleritasPlacer):
    """Order-Place (Celeritas §5.2, §6.2.2): the coarse graph in CPD-TOPO order, each device
    filled up to its memory before moving on to the next (after the last, back to the first that
    has room); best effort (the least used device) when none has room."""

    adjust: ClassVar[bool] = False
    name: ClassVar[str] = "order_place"


@register("celeritas")
@dataclass
class CeleritasPlacer(_CeleritasPlacer):
    """Adjusting Placement (Celeritas §5.2, Algorithm 2, Eq. 7-9): each node of the coarse graph
    stays on the device of the node before it in CPD-TOPO order unless another device would let
    it start earlier by more than ``back_cost`` (its largest outgoing transfer time); devices
    without room are skipped; when none has room, the one it overfills least is taken (best
    effort). Nodes are placed in time order on the simulator's execution model (``in_time``; see
    the module docstring), or with ``in_time=False`` in CPD-TOPO order with insertion into idle
    slots, as the paper has it. Transfers are sent once per (tensor, device); with a
    ``sequential`` CommModel they queue on the sender's send and the receiver's receive channel,
    the paper's data-transmission tasks (§6.1)."""

    adjust: ClassVar[bool] = True
    name: ClassVar[str] = "celeritas"


# ------------------------------------------------------------------------------------ kernels
@numba.njit(cache=True)
def _levels(in_ptr, in_edges, edge_src, out_ptr, edge_dst, w, c):  # pragma: no cover - compiled
    n = len(w)
    tlevel = np.zeros(n)
    blevel = np.zeros(n)
    for i in range(n):
        for k in range(in_ptr[i], in_ptr[i + 1]):
            e = in_edges[k]
            p = edge_src[e]
            tlevel[i] = max(tlevel[i], tlevel[p] + w[p] + c[e])
    for i in range(n - 1, -1, -1):
        tail = 0.0
        for e in range(out_ptr[i], out_ptr[i + 1]):
            tail = max(tail, blevel[edge_dst[e]] + c[e])
        blevel[i] = tail + w[i]
    return tlevel, blevel


@numba.njit(cache=True)
def _stack_topo(n, sources, edge_order, out_ptr, edge_dst, indegree):  # pragma: no cover - compiled
    """``edge_order`` lists each op's out-edges (positions out_ptr[i]:out_ptr[i+1]) by
    increasing rank of their destination; ``sources`` are by increasing rank."""
    left = indegree.copy()
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for s in sources:
        stack[top] = s
        top += 1
    order = np.empty(n, dtype=np.int64)
    k = 0
    while top > 0:
        top -= 1
        v = stack[top]
        order[k] = v
        k += 1
        for idx in range(out_ptr[v], out_ptr[v + 1]):
            child = edge_dst[edge_order[idx]]
            left[child] -= 1
            if left[child] == 0:
                stack[top] = child
                top += 1
    return order


@numba.njit(cache=True)
def _optimal_bp(order, pos_of, out_ptr, edge_dst, cost, memory, R, M, compute, check):  # pragma: no cover - compiled
    """S[j]: least cost of cutting positions 0..j-1 with a breakpoint at j (j = n: the end).
    cost(i, j) = sum over positions k in [i, j) of the cost of k's edges to positions >= j."""
    n = len(order)
    # Out-edges of the op at position k: dpos[ptr[k]:ptr[k+1]] ascending, suffix[]: cost from there on.
    ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(n):
        v = order[k]
        ptr[k + 1] = ptr[k] + out_ptr[v + 1] - out_ptr[v]
    dpos = np.empty(ptr[n], dtype=np.int64)
    suffix = np.zeros(ptr[n] + 1)
    for k in range(n):
        v = order[k]
        lo, hi = ptr[k], ptr[k + 1]
        d = np.empty(hi - lo, dtype=np.int64)
        cc = np.empty(hi - lo)
        for e in range(out_ptr[v], out_ptr[v + 1]):
            d[e - out_ptr[v]] = pos_of[edge_dst[e]]
            cc[e - out_ptr[v]] = cost[e]
        perm = np.argsort(d)
        acc = 0.0
        for r in range(hi - lo - 1, -1, -1):
            dpos[lo + r] = d[perm[r]]
            acc += cc[perm[r]]
            suffix[lo + r] = acc
    prefix_mem = np.zeros(n + 1)
    for k in range(n):
        prefix_mem[k + 1] = prefix_mem[k] + memory[order[k]]

    S = np.zeros(n + 1)
    P = np.zeros(n + 1, dtype=np.int64)
    longest_from = np.zeros(n)  # within the run [i, j): the longest compute path from position p
    for j in range(1, n + 1):
        best = np.inf
        arg = j - 1
        acc = 0.0
        inside = 0.0  # cost of the edges inside the run
        run_compute = 0.0
        longest = 0.0
        for i in range(j - 1, max(0, j - R) - 1, -1):
            if i < j - 1 and prefix_mem[j] - prefix_mem[i] > M:
                break
            lo, hi = ptr[i], ptr[i + 1]
            r = lo + np.searchsorted(dpos[lo:hi], j)
            leaving = suffix[r] if r < hi else 0.0
            if r < hi:
                acc += suffix[r]
            if check:
                inside += (suffix[lo] if lo < hi else 0.0) - leaving
                tail = 0.0
                for q in range(lo, r):
                    tail = max(tail, longest_from[dpos[q]])
                longest_from[i] = compute[order[i]] + tail
                longest = max(longest, longest_from[i])
                run_compute += compute[order[i]]
                if run_compute - longest > inside * (1 + 1e-12):
                    continue
            total = S[i] + acc
            if total <= best:  # ties: the longer run
                best = total
                arg = i
        S[j] = best
        P[j] = arg
    count = 0
    k = n
    while k > 0:
        k = P[k]
        count += 1
    starts = np.empty(count, dtype=np.int64)
    k = n
    while k > 0:
        k = P[k]
        count -= 1
        starts[count] = k
    return starts, S[n]


@numba.njit(cache=True)
def _inputs_ready(graph, ops, transfers, sent, slots, sequential, v, d, commit):  # pragma: no cover - compiled
    """pre_t of Eq. 7: when every input of ``v`` is on device ``d``. A tensor already sent to
    ``d`` is not sent again. With ``sequential`` a transfer is a task (Celeritas §6.1) that needs
    an idle slot on the sender's send channel and on ``d``'s receive channel at once. With
    ``commit`` the transfers are booked, else their bookings are undone."""
    ndev = len(slots.count) // 3
    ready = 0.0
    booked = np.empty((2 * (graph.in_ptr[v + 1] - graph.in_ptr[v]), 2), dtype=np.int64)  # (resource, position)
    nbooked = 0
    for k in range(graph.in_ptr[v], graph.in_ptr[v + 1]):
        e = graph.in_edges[k]
        p = graph.edge_src[e]
        tensor = graph.edge_tensor[e]
        x = sent.of[tensor * ndev + d]
        if ops.device[p] == d:
            t = ops.end[p]
        elif x >= 0:
            t = transfers.end[x]
        else:
            length = graph.xfer_time[tensor]
            begin = ops.end[p]
            if sequential:
                send, recv = ndev + ops.device[p], 2 * ndev + d
                while True:
                    s1 = first_idle_slot(slots, send, begin, length)
                    begin = first_idle_slot(slots, recv, s1, length)
                    if begin == s1:
                        break
                booked[nbooked, 0] = send
                booked[nbooked, 1] = occupy(slots, send, begin, length)
                booked[nbooked + 1, 0] = recv
                booked[nbooked + 1, 1] = occupy(slots, recv, begin, length)
                nbooked += 2
            t = begin + length
            if commit:
                record_transfer(transfers, sent, tensor, d, begin, t, ndev)
        ready = max(ready, t)
    if not commit:
        for b in range(nbooked - 1, -1, -1):  # newest first, so each recorded position still holds
            vacate(slots, booked[b, 0], booked[b, 1])
    return ready


@numba.njit(cache=True)
def _place(m, order, adjust, cap, edge_cost, transient, coloc, coloc_persistent,
           coloc_reserve):  # pragma: no cover - compiled
    """Algorithm 2 (``adjust``) or Order-Place over the nodes in ``order``, on the execution
    model ``m`` (ops in idle slots of their device, transfers in idle slots of the channels);
    see the module docstring for the memory estimate. ``coloc_reserve``: per colocation group,
    its members' run-time bytes (transient and outputs), reserved from the placement of its first
    member until each member is placed, so that the device chosen for the group can hold it."""
    graph, ops, devices, transfers, sent, slots = m.graph, m.ops, m.devices, m.transfers, m.sent, m.slots
    sequential = m.channels.sequential
    ndev = len(devices.avail)
    readers_left = m.releases.readers_left
    coloc_dev = np.full(len(coloc_persistent), -1, dtype=np.int64)
    live = np.zeros(ndev, dtype=np.int64)
    need = np.zeros(ndev, dtype=np.int64)
    est = np.empty(ndev)
    prev_dev = -1
    current = 0  # Order-Place: the device being filled

    for v in order:
        c = coloc[v]
        pinned = coloc_dev[c] if c >= 0 else -1
        own = transient[v]
        for tt in range(graph.op_tensor_ptr[v], graph.op_tensor_ptr[v + 1]):
            own += graph.held_bytes[tt]
        reserve = 0  # change of the colocation reservation
        if c < 0:
            own += graph.persistent[v]
        elif pinned < 0:
            reserve = coloc_reserve[c] - own
            own += coloc_persistent[c]
        else:
            reserve = -own
        for d in range(ndev):
            need[d] = own
            for k in range(graph.in_ptr[v], graph.in_ptr[v + 1]):
                e = graph.in_edges[k]
                if ops.device[graph.edge_src[e]] != d and sent.of[graph.edge_tensor[e] * ndev + d] < 0:
                    need[d] += graph.recv_bytes[graph.edge_tensor[e]]

        choice = -1
        if pinned >= 0:
            choice = pinned
        elif adjust:
            for d in range(ndev):
                est[d] = np.inf
                if live[d] + need[d] + reserve <= cap[d]:
                    ready = _inputs_ready(graph, ops, transfers, sent, slots, sequential, v, d, False)
                    est[d] = first_idle_slot(slots, d, ready, duration(graph.compute, devices.speed, v, d))
            best = 0
            for d in range(1, ndev):
                if est[d] < est[best]:
                    best = d
            dk = prev_dev if prev_dev >= 0 else best
            back_cost = 0.0
            for e in range(graph.out_ptr[v], graph.out_ptr[v + 1]):
                back_cost = max(back_cost, edge_cost[e])
            if est[dk] - est[best] > back_cost:  # Eq. 9 (inf - inf is nan: not taken)
                choice = best
            elif est[dk] < np.inf:
                choice = dk
        else:
            for step in range(ndev):
                d = (current + step) % ndev
                if live[d] + need[d] + reserve <= cap[d]:
                    choice = d
                    current = d
                    break
        if choice < 0:  # no device has room: the least used one (best effort)
            choice = 0
            for d in range(1, ndev):
                if live[d] * cap[choice] < live[choice] * cap[d]:
                    choice = d

        d = choice
        ready = _inputs_ready(graph, ops, transfers, sent, slots, sequential, v, d, True)
        length = duration(graph.compute, devices.speed, v, d)
        begin = first_idle_slot(slots, d, ready, length)
        occupy(slots, d, begin, length)
        start(ops, devices, v, d, begin, length)
        prev_dev = d
        if c >= 0 and pinned < 0:
            coloc_dev[c] = d

        m.memory.peak[d] = max(m.memory.peak[d], live[d] + need[d] + reserve)  # the plan's peak
        live[d] += need[d] - transient[v] + reserve
        for k in range(graph.in_ptr[v], graph.in_ptr[v + 1]):
            tt = graph.edge_tensor[graph.in_edges[k]]
            readers_left[tt] -= 1
            if readers_left[tt] == 0:
                live[ops.device[graph.tensor_src[tt]]] -= graph.held_bytes[tt]


@numba.njit(cache=True)
def _adjust_in_time(m, order, previous, cap, edge_cost, coloc, coloc_ptr, coloc_members, coloc_persistent,
                    coloc_extra):  # pragma: no cover - compiled
    """Adjusting Placement (Algorithm 2, Eq. 7-9) in time order on the execution model ``m``, as
    the simulator will run the placement: repeatedly the ready node that can start first (its
    EST, Eq. 7, on its best device; ties: the node whose inputs are there first, as the
    simulator runs them, then the first in CPD-TOPO ``order``) goes to the device of
    ``previous[v]`` (its predecessor in ``order``, Algorithm 2's d_k) unless another device lets it start earlier by more
    than ``edge_cost``'s back_cost (Eq. 8-9). EST on a device: when its last op ends and ``v``'s
    inputs are there (``arrival``; sequential transfers queue on the channels, Baechi §3.4).
    Memory is the simulator's, from this schedule (the ledger m-ETF uses, ``hold_op_memory``): a
    device without room for the node now, or whose peak so far cannot take its persistent
    bytes, has EST = inf (§5.2) until its next release; a node no device can take goes to the
    device it overfills least (best effort). Colocation: the first member placed pins its group
    there, with the group's persistent bytes and ``coloc_extra`` reserved until its last member
    is placed. Per device a heap of ready nodes keyed by when their inputs can be there (raised
    lazily: that only grows as the schedule fills), so the device's EST is max(avail, key)."""
    graph, ops, devices, channels, transfers, sent = m.graph, m.ops, m.devices, m.channels, m.transfers, m.sent
    memory, releases = m.memory, m.releases
    n = len(graph.compute)
    ndev = len(devices.avail)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    npred = graph.in_ptr[1:] - graph.in_ptr[:-1]
    coloc_dev = np.full(len(coloc_persistent), -1, dtype=np.int64)
    coloc_left = coloc_ptr[1:] - coloc_ptr[:-1]
    reserved = np.zeros(ndev, dtype=np.int64)
    not_before = np.zeros(n * ndev)  # (node, device): that device's next release, when it lacked room
    dropped = np.zeros(n * ndev, dtype=np.bool_)  # (node, device): no room and no release to come
    drop_count = np.zeros(n, dtype=np.int64)
    est = np.empty(ndev)
    scratch = np.zeros(ndev)
    hcap = 2 * n + 1  # each node once when ready, once more when its group is pinned
    hf = np.empty(ndev * hcap)
    hi = np.empty(ndev * hcap, dtype=np.int64)  # CPD-TOPO rank
    hsize = np.zeros(ndev, dtype=np.int64)
    fresh = np.empty(n, dtype=np.int64)  # ready, not yet in the heaps: the sources first
    sources = np.flatnonzero(npred == 0)
    nfresh = len(sources)
    fresh[:nfresh] = sources
    placed = 0
    while placed < n:
        while nfresh > 0:  # newly ready nodes join the heaps of the devices they may go to
            nfresh -= 1
            v = fresh[nfresh]
            pin = coloc_dev[coloc[v]] if coloc[v] >= 0 else -1
            for d in range(ndev):
                if pin < 0 or d == pin:
                    hsize[d] = push(hf, hi, d * hcap, hsize[d], _input_time(m, v, d, not_before, scratch), rank[v])
        v, first, first_key = -1, np.inf, np.inf
        for d in range(ndev):  # the (node, device) pair of earliest EST; ties: earliest inputs, then CPD-TOPO order
            base = d * hcap
            while hsize[d] > 0:
                c = order[hi[base]]
                pin = coloc_dev[coloc[c]] if coloc[c] >= 0 else -1
                if ops.device[c] >= 0 or (pin >= 0 and d != pin) or (pin < 0 and dropped[c * ndev + d]):
                    _, _, hsize[d] = pop(hf, hi, base, hsize[d])
                    continue
                key = _input_time(m, c, d, not_before, scratch)
                if key > hf[base]:
                    _, _, hsize[d] = pop(hf, hi, base, hsize[d])
                    hsize[d] = push(hf, hi, base, hsize[d], key, rank[c])
                    continue
                s = max(devices.avail[d], key)
                if s < first or (s == first and (key < first_key or (key == first_key and rank[c] < rank[v]))):
                    v, first, first_key = c, s, key
                break
        if v < 0:
            break  # cannot happen on a DAG; the caller reports an unplaced node
        c = coloc[v]
        pinned = c >= 0 and coloc_dev[c] >= 0
        _est(m, v, coloc_dev, c, not_before, dropped, est, scratch)
        best = 0
        for d in range(1, ndev):
            if est[d] < est[best]:
                best = d
        p = previous[v]
        dk = ops.device[p] if p >= 0 and ops.device[p] >= 0 else best
        back_cost = 0.0
        for e in range(graph.out_ptr[v], graph.out_ptr[v + 1]):
            back_cost = max(back_cost, edge_cost[e])
        d = best if est[dk] - est[best] > back_cost or est[dk] == np.inf else dk  # Eq. 9
        persistent = 0
        if c < 0:
            persistent = graph.persistent[v]
        elif not pinned:
            persistent = coloc_persistent[c]
        s = est[d]
        if not pinned:
            release_on_until(releases, memory, d, s)
            need = persistent + (coloc_extra[c] if c >= 0 else 0) + graph.alloc_at_start[v] + \
                received_bytes(graph, ops, sent, v, d)
            if not fits(memory, reserved, cap, d, need, persistent):
                if not defer(releases, not_before, dropped, drop_count, v, d):
                    continue
                own = need - received_bytes(graph, ops, sent, v, d)
                d = 0  # it fits nowhere: the device it overfills least (best effort)
                for d2 in range(1, ndev):
                    if overfill(memory, reserved, cap, d2, own + received_bytes(graph, ops, sent, v, d2), persistent) < \
                            overfill(memory, reserved, cap, d, own + received_bytes(graph, ops, sent, v, d), persistent):
                        d = d2
                s = max(devices.avail[d], arrival(graph, ops, transfers, sent, channels, v, d, scratch))
        received = book_inputs(graph, ops, transfers, sent, channels, v, d)
        start(ops, devices, v, d, s, duration(graph.compute, devices.speed, v, d))
        placed += 1
        if c >= 0:
            if not pinned:
                coloc_dev[c] = d
                reserved[d] += coloc_extra[c]
                for k in range(coloc_ptr[c], coloc_ptr[c + 1]):  # its ready members wait for d only
                    u = coloc_members[k]
                    if ops.device[u] < 0 and npred[u] == 0:
                        hsize[d] = push(hf, hi, d * hcap, hsize[d], _input_time(m, u, d, not_before, scratch), rank[u])
            coloc_left[c] -= 1
            if coloc_left[c] == 0:
                reserved[d] -= coloc_extra[c]
        hold_persistent(memory, d, persistent)
        hold_op_memory(graph, ops, transfers, sent, memory, releases, v, received)
        nfresh = newly_ready(graph, npred, v, fresh, nfresh)


@numba.njit(cache=True)
def _input_time(m, v, d, not_before, scratch):  # pragma: no cover - compiled
    """When ``v``'s inputs would be on device ``d`` (pre_t of Eq. 7, ``arrival``), not before
    ``d``'s next release where it lacked the memory."""
    return input_time(m.graph, m.ops, m.transfers, m.sent, m.channels, not_before, v, d, scratch)


@numba.njit(cache=True)
def _est(m, v, coloc_dev, c, not_before, dropped, est, scratch):  # pragma: no cover - compiled
    """EST of node ``v`` on every device (Eq. 7; inf where it may not go)."""
    ndev = len(est)
    pin = coloc_dev[c] if c >= 0 else -1
    for d in range(ndev):
        if (pin >= 0 and d != pin) or (pin < 0 and dropped[v * ndev + d]):
            est[d] = np.inf
        else:
            est[d] = max(m.devices.avail[d], _input_time(m, v, d, not_before, scratch))
