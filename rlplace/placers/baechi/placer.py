"""Baechi's memory-constrained placers (Baechi, SoCC'20, §2-4): ``m_topo``, ``m_etf``, ``m_sct``.

All three first run Baechi's graph optimizer (``optimizer.GraphOptimizer`` of this package:
colocation, co-placement and fusion, §3.1-3.3, each a switch) and place the groups it returns.
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
default; "paper" is §3.2's rule as written, ``optimizer.coplacement_labels``); a group's sources
wait until a member that has an input from outside decides the group's device (fused into it
where possible, ``optimizer.fuse``, held otherwise, ``_list_schedule``); and forward-only
placement leaves to follow what runs after the gradients or only feeds them (the optimizer's
updates, the learning-rate schedule, ``optimizer.backward_ops``).

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

``bounded_sets`` (on by default; not in the paper): where the whole step fits no device and a
co-placement set holds more memory than a device's budget (§2.2's measure), the placer also
places through the optimizer with no co-placement set holding more than that
(``optimizer.coplacement_labels``; TensorFlow's colocation groups stay whole) and keeps the
fastest placement, as for ``optimizer_fallback``. (Only then: on a 20,000-op layered DAG that
fits no device but whose sets are small, the extra way made m-ETF 2x slower to place for nothing.) §3.3 co-places each backward op
with its forward op when memory is short; on residual training graphs that and TensorFlow's
colocation of the gradient sums chain the whole step into one set (BERT-12: 5,647 of 5,897
ops), which cannot fit, so the optimizer's placement ran out of memory and the plain one, spread
op by op, was kept. With the bound, m-ETF on BERT-12, the Transformer 6+6 and Tensor Holography
10 layers (baechi_2080: 4 x 8 GiB) runs 2.86x -> 1.52x, 3.27x -> 1.95x and 3.23x -> 2.52x the
communication bound, m-SCT 2.95x -> 1.54x, 2.32x -> 1.86x and 3.51x -> 2.52x. On random
training steps the bounded placement alone is sometimes slower than the whole sets' (up to
1.14x: a set's bytes summed overstate what it holds at once), sometimes faster (up to 1.37x),
hence a way beside the others, not a replacement (experiments/studies.md, "m-ETF on BERT-12").

Both are policies of the list-scheduling skeleton (``rlplace.schedule.list_scheduling``) on the
execution model and return their own schedule of the graph they placed with the placement (``Placed.schedule``, ``Placed.peak_memory``). With the graph
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

import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placed
from rlplace.placers import register
from rlplace.placers.baechi.optimizer import GraphOptimizer, deferred_sets, follow_forward, forward_part
from rlplace.placers.fit import fastest_fit, known_of_one_device, whole_graph_on_one_device
from rlplace.placers.baechi.sct_lp import LP_METHODS, favorite_children
from rlplace.schedule import Model, Schedule, memory_peaks, schedule_of
from rlplace.schedule.list_scheduling import ETF, SCT, list_schedule
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
    fusion_rule: str = "lossless"  # or "degree": §3.3's rule as written (rlplace.placers.baechi.optimizer.fuse)
    coplacement_rule: str = "cost"  # §3.2's case (i) by its costs, or "paper" (rlplace.placers.baechi.optimizer.coplacement_labels)
    coplacement_ratio: float = 0.1  # "cost": an op joins its reader if its compute <= ratio x its transfer
    forward_only: bool = True
    optimizer_fallback: bool = True  # also place without co-placement and fusion; keep the faster
    memory_fraction: float = 1.0  # of each device's memory the placer may plan to use
    memory_rounds: int = 4  # placements tried until the simulator finds one that fits (rlplace.placers.fit)
    single_fallback: bool = True  # never slower than the whole graph on one device where that fits
    bounded_sets: bool = True  # where the step fits no device, also place with no co-placement set over a device

    def place(self, graph: OpGraph, cluster: Cluster) -> Placed:
        if not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"{type(self).__name__}: memory_fraction must be in (0, 1], "
                              f"got {self.memory_fraction!r}")
        if not isinstance(self.memory_rounds, int) or self.memory_rounds < 1:
            raise ConfigError(f"{type(self).__name__}: memory_rounds must be an integer >= 1, "
                              f"got {self.memory_rounds!r}")
        caps = np.floor(cluster.memory * self.memory_fraction).astype(np.int64)
        single_peak = simulate(graph, cluster, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0]
        self._memo: dict = {}
        rounds: dict[bytes, dict] = {}  # each placement tried: what the placer knew of it
        placed = whole_graph_on_one_device(graph, cluster) if self.single_fallback else []
        try:
            ways: list[tuple[bool, int | None]] = []  # (through the optimizer, the most memory of a set)
            if self.coplacement or self.fusion:
                ways.append((True, None))
                if self.bounded_sets and single_peak > caps.min() and self._sets_exceed(graph, cluster, int(caps.min())):
                    ways.append((True, int(caps.min())))
            if not ways or self.optimizer_fallback:
                ways.append((False, None))
            device, result = fastest_fit([lambda budget, way=way: self._place_within(
                graph, cluster, budget, single_peak, *way, rounds) for way in ways],
                graph, cluster, caps, self.memory_rounds, placed)
        finally:
            self._memo = {}
        known = rounds.get(device.tobytes()) or dict(zip(_KNOWN, known_of_one_device(graph, result)))
        return Placed(device, **known, fits=not result.oom)

    def _sets_exceed(self, graph: OpGraph, cluster: Cluster, limit: int) -> bool:
        """Whether a co-placement set of ``graph`` holds more than ``limit`` bytes (§2.2's
        measure): only then do sets bounded by ``limit`` differ from the whole ones. The whole
        sets are the optimizer's, which the first way places with."""
        if not self.coplacement:
            return False
        held = np.bincount(self._coarse(graph, cluster, None).coplace, weights=graph.op_memory)
        return bool(held.max(initial=0) > limit)

    def _once(self, key, make):
        """``make()``, computed once per ``place``: the forward part, the graph optimizer's
        result and m-SCT's favourite children do not depend on the memory budget that
        ``fit_to_memory`` varies between rounds."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def _place_within(self, graph: OpGraph, cluster: Cluster, caps: np.ndarray, single_peak: int,
                      optimize: bool, set_limit: int | None, rounds: dict[bytes, dict]) -> tuple[np.ndarray, np.ndarray]:
        """One device per op within ``caps`` (through the graph optimizer with ``optimize``, its
        sets of at most ``set_limit`` bytes), and the peak bytes per device the placer planned;
        ``rounds[device bytes]`` keeps what the placer knew of the placement (``_KNOWN``) the
        first way it came to it."""
        if self.forward_only and np.any(graph.forward_op >= 0) and single_peak <= caps.min():
            # §3.3: the optimizer and the placer see the forward ops only; backward ops follow
            sub, keep = self._once("forward_part", lambda: forward_part(graph))
            forward_device, known = self._optimize_and_place(sub, cluster, caps, optimize, set_limit)
            device = follow_forward(graph, keep, forward_device)
        else:
            device, known = self._optimize_and_place(graph, cluster, caps, optimize, set_limit)
        known = {"planned_peak": caps, **known}  # m-TOPO's plan is its cap; the list schedulers set their own
        rounds.setdefault(device.tobytes(), known)
        return device, known["planned_peak"]

    def _optimize_and_place(self, graph: OpGraph, cluster: Cluster, caps: np.ndarray,
                            optimize: bool, set_limit: int | None) -> tuple[np.ndarray, dict]:
        """Baechi's graph optimizer (with ``optimize``; ``set_limit``: the most memory of a
        co-placement set), then the placer on its groups: one device per op, and what the placer
        knew of it (``_KNOWN``: the nodes placed and ``_place_work``'s)."""
        if not optimize:
            device, known = self._place_work(graph, cluster, caps, False)
            return device, {"nodes_placed": graph.num_ops, **known}
        coarse = self._coarse(graph, cluster, set_limit)
        work = self._once(("work", id(graph), set_limit), coarse.quotient)
        work_device, known = self._place_work(work, cluster, caps, True)
        return coarse.expand(work_device).device_of, {"nodes_placed": work.num_ops, **known}

    def _coarse(self, graph: OpGraph, cluster: Cluster, set_limit: int | None) -> CoarseGraph:
        """Baechi's graph optimizer's grouping of ``graph`` (its co-placement sets of at most
        ``set_limit`` bytes), once per ``place``."""
        return self._once(("coarse", id(graph), set_limit), lambda: GraphOptimizer(
            self.colocation, self.coplacement, self.fusion, self.fusion_exact_check, self.fusion_rule,
            self.coplacement_rule, self.coplacement_ratio).optimize(graph, cluster.comm, set_limit))

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
        np.add.at(need, unit, work.op_memory)
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
    """m-ETF, or m-SCT when favorite children ``fav`` are given, on the list-scheduling skeleton
    (``rlplace.schedule.list_scheduling``) over the execution model of ``work``; returns the
    model holding the placer's own schedule.

    §3.1 places a whole group where its first op goes. A group's sources (variables, constants:
    no inputs) are ready at time 0, so one of them would decide where the group's compute ops
    run before their inputs exist. A source of a group that a member with an input from outside
    should decide (``rlplace.placers.baechi.optimizer.deferred_sets``) therefore waits until a member decides the
    group's device, and then joins it there, as the fused Step/UpdateStep of Baechi Fig. 6 is
    placed by its schedulable time. Should every ready op be such a source (a member can only
    start after it), the waiting sources become ready as usual."""
    n = work.num_ops
    members = [ops for ops in groups.values() if len(ops) > 1]
    set_of = len(members) + np.arange(n)  # an op outside the groups: a set of its own
    for g, ops in enumerate(members):
        set_of[ops] = g
    held = (np.diff(work.in_ptr) == 0) & deferred_sets(work, set_of)[set_of]
    m = list_schedule(work, cluster, caps, members, ETF if fav is None else SCT, favorite=fav, held=held)
    if np.any(m.ops.device < 0):
        raise PlacementError(f"list scheduling left op {work.names[int(np.argmax(m.ops.device < 0))]!r} unplaced")
    return m
