"""Classic baselines. Each keeps colocation groups whole: it places colocation units (a group,
or a lone op), or, for heft, pins a group to the device of its first placed op."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pymetis

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placed, Placement
from rlplace.placers import register
from rlplace.placers.fit import fastest_fit, whole_graph_on_one_device
from rlplace.schedule import Schedule, new_model, schedule_of
from rlplace.sim import simulate
from rlplace.schedule.ops import arrival, book_inputs, duration, first_idle_slot, occupy, start


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


# ------------------------------------------------------------------------------------ expert
@register("expert")
@dataclass
class ExpertPlacer:
    """The expert placement of the papers, from the ops' ``layer`` tags: GNMT/NMT/RNNLM one LSTM
    layer per device with the embedding on the first layer's device and attention and softmax on
    the last's (Hierarchical Planner §3; Baechi §5.3), Inception-V3/ResNet on one device.

    Rule: the L distinct integer layer tags, in increasing order, are split into contiguous
    blocks over the n devices (tag of rank r goes to device ``floor(r * n / L)``). The model
    builders tag the embedding with the first layer's tag and attention/softmax with the last's,
    so this one rule covers the papers' placements. Untagged ops (and ops with a non-integer
    tag) take the device of their first (lowest-index) predecessor that is tagged or has itself
    inherited a tagged device, in topological order; ops with no such predecessor go on device
    0, so a graph without tags lies entirely on device 0. Colocation groups follow their first op."""

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        n = cluster.num_devices
        tags = [t if isinstance(t, int) else None for t in graph.layer]
        distinct = sorted({t for t in tags if t is not None})
        rank = {t: r for r, t in enumerate(distinct)}
        tag_device = np.array([rank[t] * n // len(distinct) if t is not None else -1 for t in tags],
                              dtype=np.int64)
        device = _inherit_device(tag_device, graph.in_ptr, graph.in_edges, graph.edge_src)
        units = CoarseGraph.colocation(graph)
        return units.expand(device[units.first_ops()])


@numba.njit(cache=True)
def _inherit_device(tag_device, in_ptr, in_edges, edge_src):  # pragma: no cover - compiled
    """tag_device where >= 0; else the device of the lowest-index predecessor that has one
    (tagged or inherited); else 0 (and not passed on)."""
    n = len(tag_device)
    device = np.zeros(n, dtype=np.int64)
    anchored = tag_device >= 0
    for i in range(n):
        if anchored[i]:
            device[i] = tag_device[i]
            continue
        best = n
        for k in range(in_ptr[i], in_ptr[i + 1]):
            s = edge_src[in_edges[k]]
            if anchored[s] and s < best:
                best = s
        if best < n:
            device[i] = device[best]
            anchored[i] = True
    return device


# ------------------------------------------------------------------------------------- metis
BALANCE = ("compute", "memory")
_METIS_SCALE = 2 ** 30  # integer weights are scaled so that they sum to about this


@register("metis")
@dataclass
class MetisPlacer:
    """k-way min-cut partition by METIS (pymetis), k = number of devices: the MinCut/Scotch
    baseline of the Hierarchical Planner (Table 1) and the Metis baseline of Celeritas (Table 3).

    One vertex per colocation unit, weighted by its compute time (``balance="compute"``) or its
    memory (persistent + temporary + output bytes, ``balance="memory"``); one undirected edge per
    pair of units that exchange data, weighted by the bytes between them (a tensor counts once
    per reading unit, both directions and parallel tensors merged). Weights are scaled to
    positive integers, so zero-cost ops and control edges weigh 1. METIS balances the parts to
    its default tolerance (3 %) and minimizes the cut; with no more units than devices every
    unit gets a device of its own. ``seed`` is METIS's random seed."""

    seed: int = 0
    balance: str = "compute"

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        if self.balance not in BALANCE:
            raise ConfigError(f"metis: balance must be one of {BALANCE}, got {self.balance!r}")
        units = CoarseGraph.colocation(graph)
        k, n = units.num_groups, cluster.num_devices
        if k <= n:
            return units.expand(np.arange(k))
        cost = graph.compute_time if self.balance == "compute" else graph.op_memory.astype(np.float64)
        vweights = np.zeros(k)
        np.add.at(vweights, units.group_of, cost)
        starts, adjacent, eweights = _unit_adjacency(graph, units.group_of, k)
        part = pymetis.part_graph(
            n, pymetis.CSRAdjacency(starts, adjacent), vweights=_positive_ints(vweights),
            eweights=_positive_ints(eweights), options=pymetis.Options(seed=self.seed))
        return units.expand(np.asarray(part.vertex_part, dtype=np.int64))


def _unit_adjacency(graph: OpGraph, unit_of: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR of the undirected graph of units: (starts, adjacent, bytes). A tensor weighs its
    bytes once per reading unit; parallel and opposite edges between two units are summed."""
    src, dst = unit_of[graph.edge_src], unit_of[graph.edge_dst]
    cross = src != dst
    tensor, src, dst = graph.edge_tensor[cross], src[cross], dst[cross]
    _, once = np.unique(tensor * k + dst, return_index=True)
    a, b = src[once], dst[once]
    nbytes = graph.tensor_bytes[tensor[once]].astype(np.float64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pair, inverse = np.unique(lo * k + hi, return_inverse=True)
    weight = np.bincount(inverse.reshape(-1), weights=nbytes, minlength=len(pair))
    u, v = pair // k, pair % k
    frm, to, w = np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([weight, weight])
    order = np.lexsort((to, frm))
    starts = np.searchsorted(frm[order], np.arange(k + 1))
    return starts, to[order], w[order]


def _positive_ints(x: np.ndarray) -> np.ndarray:
    """Non-negative weights as integers >= 1 whose sum is about _METIS_SCALE."""
    total = x.sum()
    scale = _METIS_SCALE / total if total > 0 else 0.0
    return np.maximum(1, np.round(x * scale)).astype(np.int64)


# -------------------------------------------------------------------------------------- heft
@dataclass(frozen=True)
class HeftSchedule:
    """HEFT's own schedule estimate (seconds): the order ops were placed in, and each op's
    device, start and finish; ``schedule``: the whole schedule with its transfers. Only the
    placement leaves the placer; the simulator judges it."""

    order: np.ndarray
    device: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    schedule: Schedule


@register("heft")
@dataclass
class HeftPlacer:
    """Heterogeneous Earliest Finish Time with insertion (Topcuoglu, Hariri & Wu, IEEE TPDS
    13(3), 2002, §4.1), the classic list scheduler Celeritas §2 cites.

    Upward rank (Eq. 8): ``rank(i) = w(i) + max over successors j of (c(i, j) + rank(j))``, with
    ``w(i)`` the mean of ``compute_time / speed`` over the devices and ``c(i, j)`` the CommModel
    time of the edge's bytes times (n - 1) / n, the fraction of device pairs that are distinct.
    Ops are taken in decreasing rank (ties to the lower index, which keeps a topological order)
    and each goes on the device where it finishes earliest, starting in the first idle slot
    long enough after its inputs are ready (insertion policy, Eq. 3-4). An input produced on
    another device arrives one CommModel transfer time after its producer finishes; a tensor
    sent to a device once serves every reader there. Transfers overlap freely (no link
    contention) and memory is not considered, as in the original. Colocation: the first op of a
    colocation group to be placed pins the group to its device, where its later ops go (Baechi
    §3.1 co-adjust, without the memory check).

    The schedule is built on the execution model (``rlplace.schedule``). It is HEFT's own: ops
    run in rank order in idle slots, where the simulator runs ready ops first come first served,
    so the simulator's step time of the placement may differ.

    ``single_fallback`` (not in HEFT): the simulator runs HEFT's placement and the whole graph on
    one device, and the faster that fits is kept. HEFT plans contention-free links without
    memory, so on real training graphs with sequential links its placement ran 2-11x ``single``
    (placer_quality before the fallback: GNMT profile 2.5x, Inception-V3 6-11x, GNMT 8.4-8.6x).

    Why HEFT trails m-ETF on placer_quality's layered DAGs (2.4-2.5x the bound, m-ETF 1.2-1.3x):
    its own schedule is at 1.01x the bound there, but it plans about one transfer per op over
    links it believes never queue; the simulator's sequential channels serve them one at a time.
    ``contention_free=False`` (not in HEFT) plans on the cluster's own links (sequential channels
    booked as m-ETF books them): 28-32% fewer transfers and 1.37-1.47x the bound at 200-2,000
    ops (experiments/studies.md, "HEFT on layered DAGs"). What is left, also with parallel links
    (1.26-1.37x), is the order: HEFT runs ops in rank order in idle slots, the simulator first
    come, first served. The default is the paper's."""

    single_fallback: bool = True
    contention_free: bool = True

    def place(self, graph: OpGraph, cluster: Cluster) -> Placed:
        schedule = self.schedule(graph, cluster).schedule
        if self.single_fallback:
            own = schedule.op_device
            device, result = fastest_fit([], graph, cluster, cluster.memory, 1, [
                (own, simulate(graph, cluster, own)), *whole_graph_on_one_device(graph, cluster)])
            if device is not own:
                schedule = result.schedule
        return Placed(schedule.op_device, schedule=schedule)

    def schedule(self, graph: OpGraph, cluster: Cluster) -> HeftSchedule:
        order = rank_order(graph, cluster)
        units = CoarseGraph.colocation(graph)
        m = new_model(graph, cluster, insertion=True)
        if self.contention_free:
            m = m._replace(channels=m.channels._replace(sequential=False))
        _heft(m, order, units.group_of, units.num_groups)
        s = schedule_of(m, graph)
        return HeftSchedule(order, s.op_device, s.op_start, s.op_end, s)


def rank_order(graph: OpGraph, cluster: Cluster) -> np.ndarray:
    """The ops in decreasing upward rank (HEFT Eq. 8; ties to the lower index: a topological
    order), with ``w(i)`` the mean duration over the devices and ``c(i, j)`` the edge's transfer
    time times the fraction of device pairs that are distinct."""
    n = cluster.num_devices
    durations = graph.compute_time[:, None] / cluster.speeds[None, :]
    mean_comm = cluster.comm.transfer_time(graph.edge_bytes) * ((n - 1) / n)
    rank = _upward_rank(durations.mean(axis=1), graph.out_ptr, graph.edge_dst, mean_comm)
    return np.lexsort((np.arange(graph.num_ops), -rank)).astype(np.int64)


@numba.njit(cache=True)
def _upward_rank(mean_duration, out_ptr, edge_dst, mean_comm):  # pragma: no cover - compiled
    n = len(mean_duration)
    rank = np.zeros(n)
    for i in range(n - 1, -1, -1):
        tail = 0.0
        for e in range(out_ptr[i], out_ptr[i + 1]):
            r = mean_comm[e] + rank[edge_dst[e]]
            if r > tail:
                tail = r
        rank[i] = mean_duration[i] + tail
    return rank


@numba.njit(cache=True)
def _heft(m, order, unit_of, num_units):  # pragma: no cover - compiled
    """Place ops in ``order``, each on the device of earliest finish, in the first idle slot
    after its inputs arrive (Eq. 3-4)."""
    graph, ops, devices, channels, transfers, sent, slots = (m.graph, m.ops, m.devices, m.channels, m.transfers,
                                                           m.sent, m.slots)
    ndev = len(devices.avail)
    pinned = np.full(num_units, -1, dtype=np.int64)
    scratch = np.zeros(ndev)
    for i in order:
        lo, hi = 0, ndev
        if pinned[unit_of[i]] >= 0:
            lo = pinned[unit_of[i]]
            hi = lo + 1
        best_d, best_start, best_finish = -1, 0.0, np.inf
        for d in range(lo, hi):
            length = duration(graph.compute, devices.speed, i, d)
            t0 = first_idle_slot(slots, d, arrival(graph, ops, transfers, sent, channels, i, d, scratch), length)
            if t0 + length < best_finish:
                best_d, best_start, best_finish = d, t0, t0 + length
        book_inputs(graph, ops, transfers, sent, channels, i, best_d)
        start(ops, devices, i, best_d, best_start, best_finish - best_start)
        if best_finish > best_start:
            occupy(slots, best_d, best_start, best_finish - best_start)
        pinned[unit_of[i]] = best_d
