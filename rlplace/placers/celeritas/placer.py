"""Celeritas' placers: Order-Place and Adjusting Placement (Celeritas §5.2, Algorithm 2) on the
coarse graph that Optimal Operation Fusion builds (``rlplace.placers.celeritas.fusion``), in
CPD-TOPO order (``rlplace.placers.celeritas.orders``).

Costs follow the paper: ``w_i`` is an op's ``compute_time`` (reference device) and ``c_ij`` the
cluster CommModel's transfer time of the edge's bytes. The placers work on the coarse graph that
fusion builds (``CoarseGraph.quotient``), or on the op graph itself with ``fusion=False``.

Adjusting Placement runs on the execution model the simulator runs (``rlplace.schedule``), in
time order (``in_time``, the default: the ``ADJUST`` policy of the list-scheduling skeleton,
``rlplace.schedule.list_scheduling``): Eq. 7-9 decide each node's device as the paper has
them, but nodes are taken when they can start, not in CPD-TOPO order, and a device
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

from rlplace.cluster import Cluster
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placed
from rlplace.placers import register
from rlplace.placers.celeritas.fusion import optimal_fusion
from rlplace.placers.celeritas.orders import cpd_topo, edge_comm_time
from rlplace.placers.fit import fastest_fit, known_of_one_device, whole_graph_on_one_device
from rlplace.schedule import Schedule, memory_peaks, new_model, schedule_of
from rlplace.schedule.list_scheduling import ADJUST, list_schedule
from rlplace.schedule.ops import duration, first_idle_slot, occupy, record_transfer, start, vacate


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
    model (``rlplace.schedule.list_scheduling``); False: the paper's plan, CPD-TOPO order with insertion into idle
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
        edge_cost = edge_comm_time(g, cluster.comm)
        if self.adjust and self.in_time:
            previous = np.full(g.num_ops, -1, dtype=np.int64)  # v_{i-1} of Algorithm 2 line 11
            previous[order[1:]] = order[:-1]
            back_cost = np.zeros(g.num_ops)  # Eq. 8: the largest cost of a node's out-edges
            np.maximum.at(back_cost, g.edge_src, edge_cost)
            groups = [g.colocation_groups[name] for name in sorted(g.colocation_groups)]  # as colocation_ids
            m = list_schedule(g, cluster, cap, groups, ADJUST, order=order, previous=previous, back_cost=back_cost)
            if np.any(m.ops.device < 0):
                raise PlacementError(f"{self.name}: node {g.names[int(np.argmax(m.ops.device < 0))]!r} left unplaced")
        else:
            coloc = colocation_ids(g)
            member = coloc >= 0
            coloc_persistent = np.zeros(len(g.colocation_groups), dtype=np.int64)
            np.add.at(coloc_persistent, coloc[member], g.persistent_bytes[member])
            run_bytes = np.asarray(transient, dtype=np.int64) + g.output_total - g.unread_output_bytes
            coloc_reserve = np.zeros(len(g.colocation_groups), dtype=np.int64)
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
