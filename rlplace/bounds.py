"""Lower bounds on the step time of every placement of a graph on a cluster (issue 42 item 2).

``rlplace.sim.lower_bound`` is max(the compute-only critical path on the fastest device, total
compute / the devices' summed speed): it ignores communication. ``communication_bound`` adds
what any placement must pay at forks and joins, in the style of the DSC/CASS bounds of list
scheduling (Yang & Gerasoulis, IEEE TPDS 5(9), 1994): an op's inputs either come from
other devices, a transfer after their producer ends, or are made on the op's own device, one
after another.

Head. ``h(i)`` bounds when op ``i`` can start in any schedule. Let ``w(p)`` be ``p``'s duration
on the fastest device, ``a(p) = h(p) + w(p)`` (``p`` cannot end earlier), and ``c(p, i)`` the
longest transfer of a tensor ``p`` sends to ``i`` (the simulator starts a transfer when its
producer ends, and a tensor cached on a device got there no sooner). In a schedule, let ``S`` be
the predecessors on ``i``'s device. Each ``p`` outside ``S`` delays ``i`` to ``a(p) + c(p, i)``;
those in ``S`` run one at a time on one device before ``i``, from the first of them to start
(no sooner than the smallest ``h`` among them), so ``i`` starts no sooner than
``max(max over S of a, min over S of h + sum over S of w)``. The smallest of these over every
``S`` bounds ``start(i)``. Sorting the predecessors by ``a + c`` (largest first), any ``S`` holds
every predecessor whose ``a + c`` exceeds the largest outside it: a prefix ``P``. Every ``S``
holding the prefix ``P`` has ``min over S of h + sum over S of w`` at least
``min(min over P of h, min over the rest of a) + sum over P of w`` (an extra member ``q`` that
starts first still runs ``w(q)``), so the minimum over the prefixes of
``max(max outside P of a + c, max over P of a, that sum)`` is at most the minimum over every
``S``: ``h(i)``, computed in topological order. With one device every predecessor is in ``S``.

Tail. ``t(i)`` bounds the time from ``i``'s end to the step's end, the same way over the
successors (those on ``i``'s device run one after another after it; the others wait for a
transfer). Each op's ``h(i) + w(i) + t(i)`` bounds the step, since the three hold in the same
schedule; ``communication_bound`` is the largest, or the compute bound where that is larger.
It never exceeds a simulated step time (tests/test_bounds.py: every placer and random
placements on random graphs, sequential and parallel links, uneven speeds) and is at least
``rlplace.sim.lower_bound``. Memory is not used: a graph that fits no single device still gets
the bound of one that does.
"""

from __future__ import annotations

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph
from rlplace.sim import lower_bound

__all__ = ["communication_bound", "heads_and_tails", "lower_bound"]


def communication_bound(graph: OpGraph, cluster: Cluster) -> float:
    """A lower bound on any placement's step time that counts communication (module docstring)."""
    if graph.num_ops == 0:
        return 0.0
    head, tail = heads_and_tails(graph, cluster)
    w = graph.compute_time / float(cluster.speeds.max())
    return max(float((head + w + tail).max()), lower_bound(graph, cluster))


def heads_and_tails(graph: OpGraph, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """Per op, a bound on its start (head) and on the time from its end to the step's end (tail)
    in any placement and schedule on ``cluster``."""
    w = graph.compute_time / float(cluster.speeds.max())
    xfer = np.asarray(cluster.comm.transfer_time(graph.tensor_bytes), dtype=np.float64).reshape(-1)
    one = cluster.num_devices == 1
    head = _levels(graph.in_ptr, graph.in_edges, graph.edge_src, graph.edge_tensor, xfer, w, one, False)
    tail = _levels(graph.out_ptr, np.arange(graph.num_edges, dtype=np.int64), graph.edge_dst, graph.edge_tensor,
                   xfer, w, one, True)
    return head, tail


@numba.njit(cache=True)
def _levels(ptr, edges, other, edge_tensor, xfer, w, one_device, reverse):  # pragma: no cover - compiled
    """Heads (over predecessors, in index order, which is topological) or, with ``reverse``,
    tails (over successors, backwards): ``level[i]`` is the smallest over the prefixes ``P`` of
    the neighbours sorted by ``a + c`` (largest first) of ``max(largest a + c outside P,
    largest a in P, min(smallest level in P, smallest a outside P) + total w of P)``, with
    ``a = level + w`` of a neighbour and ``c`` its longest transfer to or from the op."""
    n = len(w)
    level = np.zeros(n)
    for step in range(n):
        i = n - 1 - step if reverse else step
        k0, k1 = ptr[i], ptr[i + 1]
        if k1 == k0:
            continue
        nb = np.empty(k1 - k0, dtype=np.int64)
        cost = np.empty(k1 - k0)
        for k in range(k0, k1):
            e = edges[k]
            nb[k - k0] = other[e]
            cost[k - k0] = xfer[edge_tensor[e]]
        r = 0  # distinct neighbours, each with its longest transfer
        distinct = np.empty(k1 - k0, dtype=np.int64)
        longest = np.empty(k1 - k0)
        for k in np.argsort(nb):
            if r > 0 and nb[k] == distinct[r - 1]:
                longest[r - 1] = max(longest[r - 1], cost[k])
            else:
                distinct[r], longest[r] = nb[k], cost[k]
                r += 1
        a = np.empty(r)
        key = np.empty(r)
        for j in range(r):
            a[j] = level[distinct[j]] + w[distinct[j]]
            key[j] = a[j] + longest[j]
        order = np.argsort(-key)
        rest_min_a = np.empty(r + 1)  # smallest a from position j on
        rest_min_a[r] = np.inf
        for j in range(r - 1, -1, -1):
            rest_min_a[j] = min(rest_min_a[j + 1], a[order[j]])
        best = np.inf
        max_a, min_level, total_w = 0.0, np.inf, 0.0
        for k in range(r + 1):  # P = the first k
            if not one_device or k == r:
                outside = key[order[k]] if k < r else 0.0
                inside = max(max_a, min(min_level, rest_min_a[k]) + total_w) if k > 0 else 0.0
                best = min(best, max(outside, inside))
            if k < r:
                p = distinct[order[k]]
                max_a = max(max_a, a[order[k]])
                min_level = min(min_level, level[p])
                total_w += w[p]
        level[i] = best
    return level
