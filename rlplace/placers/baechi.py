"""Baechi's memory-constrained placers (Baechi, SoCC'20, §2-4): ``m_topo``, ``m_etf``, ``m_sct``.

All three first run Baechi's graph optimizer (``rlplace.coarsen.GraphOptimizer``: colocation,
co-placement and fusion, §3.1-3.3, each a switch) and place the groups it returns.
``forward_only``: when one device could hold the whole step, the optimizer and the placer see
only the forward ops, and each backward op follows its forward op (§3.3).

m-ETF and m-SCT are list schedulers that simulate the step while they place it (§4.2): an op
starts at its earliest schedulable time (Eq. 1: the later of its device's earliest available
time and the arrival of its inputs; with ``sequential`` communication the wait at the send and
receive queues is added, §3.4). Memory is tracked as the simulator does: persistent bytes for the
whole step, temporary bytes while the op runs, an output until its last reader on that device has
finished and its transfers are done, a received copy until its last reader there has finished.
An (op, device) pair whose device lacks the memory is put back until the device's next release
of memory, and dropped when none is due (§2.3); when the first op of a colocation group is placed,
the whole group goes to that device and the group's memory is reserved there (§3.1, §4.2). An op
that fits nowhere goes to the device it overfills least: placement never fails, and the
simulator reports the OOM.

Three rules of this project's differ from the paper's text, because with the text's rules the
optimizer made m-ETF/m-SCT up to 1.39x slower than with it off on the zoo
(experiments/results/coplacement.md): co-placement by cost (``coplacement_rule="cost"``, the
default; "paper" is §3.2's rule as written, ``rlplace.coarsen.coplacement_labels``); a group's
sources wait until a member that has an input from outside decides the group's device (fused
into it where possible, ``rlplace.coarsen.fuse``, held otherwise, ``_list_schedule``); and
forward-only placement leaves to follow what runs after the gradients or only feeds them (the
optimizer's updates, the learning-rate schedule, ``rlplace.coarsen.backward_ops``).

``optimizer_fallback`` (on by default; not in the paper, like Celeritas' ``fusion_fallback``):
the placer also places the graph with co-placement and fusion off (colocation kept, the same
forward-only rule) and keeps whichever placement the simulator runs faster, a placement that
fits before one that does not. So the optimizer never makes a placement slower than with it off.
On latency-free parallel links, where a megabyte's transfer outweighs most ops, co-placement by
cost joins them to their readers and lengthens the placer's own schedule, and in forward-only
placement the backward ops, most of the step, follow that placement: the optimized placement ran
up to 1.32x the plain one there (experiments/results/bench_fusion.md, experiments/studies.md, "Graph optimizer on vs off"),
while on sequential links it is up to 4x faster.

``single_fallback`` (on by default for m-ETF and m-SCT; not in the paper): the whole graph on one
device is weighed beside the placer's own placements (``rlplace.placers.fit``), so where the step
fits one device the placer is never slower than ``single``. Greedy earliest-start choices on the
forward ops alone (forward-only placement), or under a memory budget that ``fit_to_memory``
shrank, can spread a graph that one device runs faster: before it, m-ETF and m-SCT were 1.07x
and 1.17x ``single`` on the GNMT profile (baechi_2080) and up to 1.31x on Inception-V3 (Baechi
Table 4 at full memory), and up to 1.47x on random training steps that fit one device
(tests/test_never_slower_than_single.py).

Both run on the execution model (``rlplace.schedule``) and return their own schedule of the graph
they placed with the placement (``Placed.schedule``, ``Placed.peak_memory``). With the graph
optimizer off, parallel transfers and ops that take time, m-ETF's own schedule is exactly the simulator's schedule of its
placement (tested), because it places (op, device) pairs in the order they start and breaks ties
as the simulator does (earliest ready, then lower index). Where they differ, and why:
sequential transfers are booked when m-ETF/m-SCT place the reader (§3.4), the simulator books
them when the producer ends, so a channel may serve them in another order; a pair put back for
memory starts later in the placer than in the simulator, which does not wait for memory; so does
a group's source held until a member decides the group's device (the simulator runs it as soon
as its device is free); m-SCT
keeps a device for a favorite child while the simulator would run another ready op there; with
the optimizer on, the schedule is of the coarse graph. In every case the placer's schedule is
a valid schedule of its placement (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import GraphOptimizer, deferred_sets, follow_forward, forward_part
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placed
from rlplace.placers import register
from rlplace.placers.fit import fastest_fit, known_of_one_device, whole_graph_on_one_device
from rlplace.placers.sct_lp import LP_METHODS, favorite_children
from rlplace.schedule import Model, Schedule, memory_peaks, new_model, schedule_of
from rlplace.schedule.heap import pop, push
from rlplace.schedule.ops import (book_inputs, defer, duration, fits, hold_op_memory, hold_persistent, input_time,
                                  least_overfilled, newly_ready, received_bytes, release_until, start)
from rlplace.sim import simulate


# What the placer knows of a placement: the Placed fields each round fills (m-TOPO: no schedule)
_KNOWN = ("nodes_placed", "planned_peak", "schedule", "peak_memory")


@dataclass
class _BaechiPlacer:
    """Options shared by the three placers (Baechi §3, Table 5's switches)."""

    colocation: bool = True
    coplacement: bool = True
    fusion: bool = True
    fusion_exact_check: bool = False
    fusion_rule: str = "lossless"  # or "degree": §3.3's rule as written (rlplace.coarsen.fuse)
    coplacement_rule: str = "cost"  # §3.2's case (i) by its costs, or "paper" (rlplace.coarsen.coplacement_labels)
    coplacement_ratio: float = 0.1  # "cost": an op joins its reader if its compute <= ratio x its transfer
    forward_only: bool = True
    optimizer_fallback: bool = True  # also place without co-placement and fusion; keep the faster
    memory_fraction: float = 1.0  # of each device's memory the placer may plan to use
    memory_rounds: int = 4  # placements tried until the simulator finds one that fits (rlplace.placers.fit)
    single_fallback: bool = True  # never slower than the whole graph on one device where that fits

    def place(self, graph: OpGraph, cluster: Cluster) -> Placed:
        if not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"{type(self).__name__}: memory_fraction must be in (0, 1], "
                              f"got {self.memory_fraction!r}")
        if not isinstance(self.memory_rounds, int) or self.memory_rounds < 1:
            raise ConfigError(f"{type(self).__name__}: memory_rounds must be an integer >= 1, "
                              f"got {self.memory_rounds!r}")
        caps = np.floor(cluster.memory * self.memory_fraction).astype(np.int64)
        single_peak = None  # of the whole step on one device, where forward-only placement may apply
        if self.forward_only and np.any(graph.forward_op >= 0):
            single_peak = simulate(graph, cluster, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0]
        optimizing = self.coplacement or self.fusion
        ways = (True, False) if optimizing and self.optimizer_fallback else (optimizing,)
        self._memo: dict = {}
        rounds: dict[bytes, dict] = {}  # each placement tried: what the placer knew of it
        placed = whole_graph_on_one_device(graph, cluster) if self.single_fallback else []
        try:
            device, result = fastest_fit([lambda budget, optimize=optimize: self._place_within(
                graph, cluster, budget, single_peak, optimize, rounds) for optimize in ways],
                graph, cluster, caps, self.memory_rounds, placed)
        finally:
            self._memo = {}
        known = rounds.get(device.tobytes()) or dict(zip(_KNOWN, known_of_one_device(graph, result)))
        return Placed(device, **known, fits=not result.oom)

    def _once(self, key, make):
        """``make()``, computed once per ``place``: the forward part, the graph optimizer's
        result and m-SCT's favourite children do not depend on the memory budget that
        ``fit_to_memory`` varies between rounds."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def _place_within(self, graph: OpGraph, cluster: Cluster, caps: np.ndarray, single_peak: int | None,
                      optimize: bool, rounds: dict[bytes, dict]) -> tuple[np.ndarray, np.ndarray]:
        """One device per op within ``caps`` (through the graph optimizer with ``optimize``), and
        the peak bytes per device the placer planned; ``rounds[device bytes]`` keeps what the
        placer knew of the placement (``_KNOWN``) the first way it came to it."""
        if single_peak is not None and single_peak <= caps.min():
            # §3.3: the optimizer and the placer see the forward ops only; backward ops follow
            sub, keep = self._once("forward_part", lambda: forward_part(graph))
            forward_device, known = self._optimize_and_place(sub, cluster, caps, optimize)
            device = follow_forward(graph, keep, forward_device)
        else:
            device, known = self._optimize_and_place(graph, cluster, caps, optimize)
        known = {"planned_peak": caps, **known}  # m-TOPO's plan is its cap; the list schedulers set their own
        rounds.setdefault(device.tobytes(), known)
        return device, known["planned_peak"]

    def _optimize_and_place(self, graph: OpGraph, cluster: Cluster, caps: np.ndarray,
                            optimize: bool) -> tuple[np.ndarray, dict]:
        """Baechi's graph optimizer (with ``optimize``), then the placer on its groups: one device
        per op, and what the placer knew of it (``_KNOWN``: the nodes placed and ``_place_work``'s)."""
        if not optimize:
            device, known = self._place_work(graph, cluster, caps, False)
            return device, {"nodes_placed": graph.num_ops, **known}
        coarse = self._once(("coarse", id(graph)), lambda: GraphOptimizer(
            self.colocation, self.coplacement, self.fusion, self.fusion_exact_check, self.fusion_rule,
            self.coplacement_rule, self.coplacement_ratio).optimize(graph, cluster.comm))
        work = self._once(("work", id(graph)), coarse.quotient)
        work_device, known = self._place_work(work, cluster, caps, True)
        return coarse.expand(work_device).device_of, {"nodes_placed": work.num_ops, **known}

    def _groups(self, work: OpGraph, optimized: bool) -> dict[str, np.ndarray]:
        """The sets placed together: the quotient's colocation groups (which are the
        optimizer's co-placement sets), or TensorFlow's colocation groups when not optimizing."""
        return work.colocation_groups if (optimized or self.colocation) else {}

    def _place_work(self, work: OpGraph, cluster: Cluster, caps: np.ndarray,
                    optimized: bool) -> tuple[np.ndarray, dict]:
        """One device per node of ``work``, and what the placer knew of it (``_KNOWN``: the
        list schedulers their schedule and peaks, ``_keep_schedule``; m-TOPO nothing)."""
        raise NotImplementedError

    @staticmethod
    def _keep_schedule(work: OpGraph, cluster: Cluster, m: Model) -> tuple[np.ndarray, dict]:
        """The devices of the placer's own schedule in ``m`` of the graph it placed (after its
        graph optimizer; with forward-only placement, the forward ops), and what it knew of it:
        that ``schedule``, the peak memory per device it predicts (``peak_memory``) and the
        ``planned_peak`` it saw while deciding. ``place`` returns those of the round whose
        placement it returns (``rounds`` in ``_place_within``)."""
        schedule: Schedule = schedule_of(m, work)
        peak_memory = memory_peaks(work, cluster.num_devices, schedule, cluster.memory_model)
        return schedule.op_device, {"planned_peak": m.memory.peak.copy(), "schedule": schedule,
                                    "peak_memory": peak_memory}


@register("m_topo")
@dataclass
class MTopoPlacer(_BaechiPlacer):
    """m-TOPO (Baechi §2.2): ops in topological order fill device 0 up to the per-device cap
    (total memory / n + the largest op), then device 1, and so on; the last device takes what is
    left. An op's memory is its persistent, temporary and output bytes, as in §2.2; a colocation
    group counts whole at its first op. ``single_fallback`` is off: m-TOPO packs memory and does
    not schedule, and Baechi's tables show it slower than one device where the model fits."""

    single_fallback: bool = False

    def _place_work(self, work, cluster, caps, optimized):
        n, ndev = work.num_ops, cluster.num_devices
        unit = np.arange(n)
        for ops in self._groups(work, optimized).values():
            unit[ops] = ops[0]
        need = np.zeros(n, dtype=np.int64)
        np.add.at(need, unit, work.persistent_bytes + work.temporary_bytes + work.output_total)
        cap = need.sum() // ndev + need.max(initial=0)
        device = np.empty(n, dtype=np.int64)
        d, used = 0, 0
        for i in range(n):
            u = unit[i]
            if u == i:
                if used + need[i] > cap and used > 0 and d < ndev - 1:
                    d, used = d + 1, 0
                used += need[i]
                device[i] = d
            else:
                device[i] = device[u]
        return device, {}


@register("m_etf")
@dataclass
class METFPlacer(_BaechiPlacer):
    """m-ETF (Baechi §2.3): repeatedly place the (op, device) pair of earliest schedulable time
    (Eq. 1) among ready ops whose device has the memory."""

    def _place_work(self, work, cluster, caps, optimized):
        return self._keep_schedule(work, cluster, _list_schedule(work, cluster, caps, self._groups(work, optimized), None))


@register("m_sct")
@dataclass
class MSCTPlacer(_BaechiPlacer):
    """m-SCT (Baechi §2.4): ETF that keeps a device for the favorite child of the op it just
    ran (the child must start there no later than anywhere else), unless an urgent op (one that
    could begin right away on any device: every device is free and has its inputs by then) can
    start first; favorite children come from the LP
    relaxation of Eq. 2, rounded at ``sct_threshold`` (§4.3). A full device is excluded."""

    sct_threshold: float = 0.1
    lp_method: str = "auto"  # the LP's optimum either way (sct_lp: "simplex", "ipm" where an op's fan is dense)

    def __post_init__(self):
        if not 0 < self.sct_threshold <= 1:
            raise ConfigError(f"m_sct: sct_threshold must be in (0, 1], got {self.sct_threshold!r}")
        if self.lp_method not in LP_METHODS:
            raise ConfigError(f"m_sct: lp_method must be one of {LP_METHODS}, got {self.lp_method!r}")

    def _place_work(self, work, cluster, caps, optimized):
        fav = self._once(("favorite_children", id(work)), lambda: favorite_children(
            work, cluster.comm, float(cluster.speeds.mean()), self.sct_threshold, self.lp_method))
        return self._keep_schedule(work, cluster, _list_schedule(work, cluster, caps, self._groups(work, optimized), fav))


def _list_schedule(work: OpGraph, cluster: Cluster, caps: np.ndarray, groups: dict[str, np.ndarray],
                   fav: np.ndarray | None) -> Model:
    """m-ETF, or m-SCT when favorite children ``fav`` are given, over the execution model of
    ``work``; returns the model holding the placer's own schedule.

    §3.1 places a whole group where its first op goes. A group's sources (variables, constants:
    no inputs) are ready at time 0, so one of them would decide where the group's compute ops
    run before their inputs exist. A source of a group that a member with an input from outside
    should decide (``rlplace.coarsen.deferred_sets``) therefore waits until a member decides the
    group's device, and then joins it there, as the fused Step/UpdateStep of Baechi Fig. 6 is
    placed by its schedulable time. Should every ready op be such a source (a member can only
    start after it), the waiting sources become ready as usual."""
    n = work.num_ops
    group_of = np.full(n, -1, dtype=np.int64)
    members = [ops for ops in groups.values() if len(ops) > 1]
    group_ptr = np.zeros(len(members) + 1, dtype=np.int64)
    group_ptr[1:] = np.cumsum([len(ops) for ops in members])
    group_members = np.concatenate(members) if members else np.zeros(0, dtype=np.int64)
    for g, ops in enumerate(members):
        group_of[ops] = g
    k = len(members)
    owner = np.repeat(np.arange(k), np.diff(group_ptr))
    group_persistent = np.zeros(k, dtype=np.int64)
    np.add.at(group_persistent, owner, work.persistent_bytes[group_members])
    group_extra = np.zeros(k, dtype=np.int64)  # Baechi §4.2: largest temporary + largest output
    max_temp = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_temp, owner, work.temporary_bytes[group_members])
    np.maximum.at(group_extra, owner, work.output_total[group_members])
    group_extra += max_temp
    set_of = np.where(group_of >= 0, group_of, k + np.arange(n))  # an op outside the groups: a set of its own
    held = (np.diff(work.in_ptr) == 0) & deferred_sets(work, set_of)[set_of]
    m = new_model(work, cluster, placer=True)
    _schedule(m, group_of, group_ptr, group_members, group_persistent, group_extra, caps,
              fav if fav is not None else np.full(n, -1, dtype=np.int64), fav is not None, held)
    if np.any(m.ops.device < 0):
        raise PlacementError(f"list scheduling left op {work.names[int(np.argmax(m.ops.device < 0))]!r} unplaced")
    return m


# ------------------------------------------------------------------------------ the policy loop
# One compiled loop: split into compiled helpers that take the model's parts, the ETF choice
# alone made m-ETF 1.3x slower at 20,000 ops (numba keeps reference counting around a helper
# with a loop), so the steps are marked by section instead.
@numba.njit(cache=True)
def _schedule(m, group_of, group_ptr, group_members, group_persistent, group_extra, cap, fav, sct,
              held):  # pragma: no cover - compiled
    """Place every op of model ``m``: m-ETF (Baechi §2.3), or with ``sct`` m-SCT (§2.4). Each
    round takes, over the devices, the (op, device) pair that can start first (Eq. 1; with
    sequential transfers after those already queued, §3.4), a
    device's candidate being m-SCT's favorite child or urgent op, else the ready op that can
    start there first; admits it if the device has the memory (§2.3) and starts it there.
    Per device a heap of ready ops keyed by a lower bound of when their inputs can be there
    (raised lazily: inputs only arrive later as the schedule fills); for m-SCT a heap of ready
    ops keyed by when their inputs could be on every device (urgent ops)."""
    graph, ops, devices, channels, transfers, sent = m.graph, m.ops, m.devices, m.channels, m.transfers, m.sent
    memory, releases = m.memory, m.releases
    n = len(graph.compute)
    ndev = len(devices.avail)
    missing = graph.in_ptr[1:] - graph.in_ptr[:-1]  # per op: inputs not yet placed
    reserved = np.zeros(ndev, dtype=np.int64)  # extra bytes of groups still being placed (§4.2)
    group_device = np.full(len(group_persistent), -1, dtype=np.int64)
    group_left = group_ptr[1:] - group_ptr[:-1]
    not_before = np.zeros(n * ndev)  # (op, device): the device's next release, where op lacked memory
    dropped = np.zeros(n * ndev, dtype=np.bool_)  # (op, device): no memory and no release to come
    drop_count = np.zeros(n, dtype=np.int64)
    scratch = np.zeros(ndev)
    slot = 2 * n + 1  # per device heap: each op once when ready, once more when its group is placed
    ready_key = np.empty(ndev * slot)
    ready_op = np.empty(ndev * slot, dtype=np.int64)
    ready_size = np.zeros(ndev, dtype=np.int64)
    urgent_key = np.empty(n + 1)
    urgent_op = np.empty(n + 1, dtype=np.int64)
    urgent_size = 0
    awaiting = np.full(ndev, -1, dtype=np.int64)  # m-SCT: per device, the favorite child of its last op
    fresh = np.empty(n + 1, dtype=np.int64)  # ready ops not yet queued
    nfresh = 0
    for i in range(n):
        if missing[i] == 0:
            fresh[nfresh] = i
            nfresh += 1

    placed = 0
    now = 0.0
    while placed < n:
        while nfresh > 0:  # newly ready ops join the queues of the devices they may go to
            nfresh -= 1
            c = fresh[nfresh]
            g = group_of[c]
            if held[c] and group_device[g] < 0:
                continue  # joins its group's device when a member decides it (below, §3.1)
            pin = group_device[g] if g >= 0 else -1
            for d in range(ndev):
                if pin < 0 or d == pin:
                    ready_size[d] = push(ready_key, ready_op, d * slot, ready_size[d],
                                         input_time(graph, ops, transfers, sent, channels, not_before, c, d, scratch), c)
            if sct and pin < 0:
                urgent_size = push(urgent_key, urgent_op, 0, urgent_size, _inputs_anywhere(graph, ops, c), c)

        best_d, best_op, best_s = -1, -1, np.inf
        for d in range(ndev):  # Eq. 1: the (op, device) pair of earliest start
            op, s = -1, np.inf
            c = awaiting[d]
            g = group_of[c] if c >= 0 else -1
            pin = group_device[g] if g >= 0 else -1
            if sct and c >= 0 and ops.device[c] < 0 and missing[c] == 0 and (
                    pin == d or (pin < 0 and not dropped[c * ndev + d])):
                # §2.4: the device keeps itself for the favorite child of its last op if the child
                # can start here no later than anywhere else...
                s_c = max(devices.avail[d], input_time(graph, ops, transfers, sent, channels, not_before, c, d, scratch))
                favorite = True
                if pin < 0:
                    for d2 in range(ndev):
                        if d2 != d and not dropped[c * ndev + d2] and max(devices.avail[d2], input_time(
                                graph, ops, transfers, sent, channels, not_before, c, d2, scratch)) < s_c:
                            favorite = False
                            break
                if favorite:
                    op, s = c, s_c
                    # ...unless an urgent op (one that can begin right away on any device: every
                    # device is free and has its inputs by then) can start here first
                    while urgent_size > 0 and (ops.device[urgent_op[0]] >= 0 or (
                            group_of[urgent_op[0]] >= 0 and group_device[group_of[urgent_op[0]]] >= 0)):
                        _, _, urgent_size = pop(urgent_key, urgent_op, 0, urgent_size)
                    if urgent_size > 0 and urgent_op[0] != c and not dropped[urgent_op[0] * ndev + d]:
                        u = urgent_op[0]
                        now_d = max(devices.avail[d], urgent_key[0])
                        urgent = now_d <= s_c
                        for d2 in range(ndev):
                            if urgent and max(devices.avail[d2], input_time(
                                    graph, ops, transfers, sent, channels, not_before, u, d2, scratch)) > now_d:
                                urgent = False
                        if urgent:
                            op, s = u, now_d
            if op < 0:  # §2.3 (ETF): the ready op that can start first here
                base = d * slot
                while ready_size[d] > 0:
                    c = ready_op[base]
                    g = group_of[c]
                    pin = group_device[g] if g >= 0 else -1
                    if ops.device[c] >= 0 or not (pin == d or (pin < 0 and not dropped[c * ndev + d])):
                        _, _, ready_size[d] = pop(ready_key, ready_op, base, ready_size[d])
                        continue
                    key = input_time(graph, ops, transfers, sent, channels, not_before, c, d, scratch)
                    if key > ready_key[base]:  # its inputs arrive later than the queue said: requeue
                        _, _, ready_size[d] = pop(ready_key, ready_op, base, ready_size[d])
                        ready_size[d] = push(ready_key, ready_op, base, ready_size[d], key, c)
                        continue
                    op, s = c, max(devices.avail[d], key)
                    break
            if op >= 0 and s < best_s:
                best_d, best_op, best_s = d, op, s
        if best_op < 0:
            nfresh = _release_held(ops, group_of, group_device, held, fresh)
            if nfresh > 0:
                continue
            break  # cannot happen on a DAG; _list_schedule reports it

        op, d = best_op, best_d
        now = max(now, best_s)
        release_until(releases, memory, now)
        g = group_of[op]
        if g < 0 or group_device[g] < 0:  # §2.3 memory admission (a placed group's memory is reserved)
            persistent = group_persistent[g] if g >= 0 else graph.persistent[op]
            need = persistent + graph.alloc_at_start[op] + (group_extra[g] if g >= 0 else 0) + \
                received_bytes(graph, ops, sent, op, d)
            if not fits(memory, reserved, cap, d, need, persistent):
                if awaiting[d] == op:
                    awaiting[d] = -1
                if not defer(releases, not_before, dropped, drop_count, op, d):
                    continue
                d = least_overfilled(memory, reserved, cap, need, persistent)  # fits nowhere: best effort
                best_s = max(now, devices.avail[d], input_time(graph, ops, transfers, sent, channels, not_before, op,
                                                               d, scratch))

        received = book_inputs(graph, ops, transfers, sent, channels, op, d)
        start(ops, devices, op, d, best_s, duration(graph.compute, devices.speed, op, d))
        placed += 1
        if g < 0:
            hold_persistent(memory, d, graph.persistent[op])
        else:
            if group_device[g] < 0:  # §3.1: the whole group goes where its first op went
                group_device[g] = d
                hold_persistent(memory, d, group_persistent[g])
                reserved[d] += group_extra[g]  # §4.2, until its last member is placed
                for k in range(group_ptr[g], group_ptr[g + 1]):  # its ready members queue there (again)
                    c = group_members[k]
                    if ops.device[c] < 0 and missing[c] == 0:
                        ready_size[d] = push(ready_key, ready_op, d * slot, ready_size[d], input_time(
                            graph, ops, transfers, sent, channels, not_before, c, d, scratch), c)
            group_left[g] -= 1
            if group_left[g] == 0:
                reserved[d] -= group_extra[g]
        hold_op_memory(graph, ops, transfers, sent, memory, releases, op, received)
        nfresh = newly_ready(graph, missing, op, fresh, nfresh)
        if sct:
            awaiting[d] = fav[op]


@numba.njit(cache=True)
def _inputs_anywhere(graph, ops, op):  # pragma: no cover - compiled
    """When every input of ``op`` could be on any device: each producer's end plus one transfer."""
    t = 0.0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        t = max(t, ops.end[graph.edge_src[e]] + graph.xfer_time[graph.edge_tensor[e]])
    return t


@numba.njit(cache=True)
def _release_held(ops, group_of, group_device, held, fresh):  # pragma: no cover - compiled
    """Every ready op is a held source waiting for its group (§3.1, ``_list_schedule``): they
    become ready as usual (into ``fresh``); returns how many."""
    count = 0
    for c in range(len(held)):
        if held[c] and ops.device[c] < 0 and group_device[group_of[c]] < 0:
            held[c] = False
            fresh[count] = c
            count += 1
    return count
