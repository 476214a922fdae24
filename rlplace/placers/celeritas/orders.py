"""Celeritas' orders (Celeritas §4.2.2): levels over compute and communication costs, DFS-TOPO
and CPD-TOPO, the critical-path-first topological order its fusion and placers follow."""

from __future__ import annotations

import numba
import numpy as np

from rlplace.cluster import Cluster, CommModel
from rlplace.graph import OpGraph


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
