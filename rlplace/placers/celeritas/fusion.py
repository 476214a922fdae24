"""Celeritas' Optimal Operation Fusion (Celeritas §5.1, Algorithm 1): cut the CPD-TOPO order into
runs of at most ``exploration_range`` nodes and a memory limit so that the edges cut cost least
(dynamic programming over breakpoints), and fuse each run into one node."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placers.celeritas.orders import cpd_topo, edge_comm_time


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
    starts, _ = optimal_breakpoints(graph, order, edge_comm_time(graph, cluster.comm), graph.op_memory,
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
