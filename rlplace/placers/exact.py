"""``exact``: placement and schedule as a constraint model, solved by OR-Tools CP-SAT (issue 42
item 1): the best placement found in ``seconds``, and a proven lower bound on every placement's
step time, so a table can say how far any placer is from the optimum.

The model (times in integer ticks of ``tick`` seconds, each duration rounded down, so the
model's optimum is never above the true one):

* ``x[i, d]``: op ``i`` on device ``d``, one device per op, a colocation group on one device;
* op ``i`` starts at ``s[i]`` and, on ``d``, runs ``compute_time / speed[d]``: one optional
  interval per (op, device), and on each device the intervals do not overlap (each device runs
  one op at a time);
* an input made on another device arrives one transfer after its producer ends: with
  ``parallel`` links the reader starts at least the longest transfer between the two ops after
  the producer's end when they are apart; with ``sequential`` links a tensor sent to device ``b``
  is one transfer, started after its producer ends, that every reader on ``b`` waits for and
  that holds the sender's send channel and ``b``'s receive channel (no two transfers overlap on
  a channel), as in the simulator;
* memory: the persistent bytes on a device fit its memory;
* the simulator's device queues, where the graph has at most ``QUEUE_PAIRS`` pairs of ops
  neither of which leads to the other (about 60 ops of a layered DAG): an op is ready when its
  last input is there; two ops on one device run in the order they became ready (two that read
  the same tensors, ready at one instant, by index), and an op starts when it is ready or when
  the op before it on its device ends (first come, first served, never idle while an op waits);
* minimize the step: the latest end.

Every schedule the simulator runs is a solution, with each time rounded down to ticks (its
transfers start when their producer ends or later, its devices and channels serve one at a
time; rounding moves a ready time by at most ``SLACK`` ticks, so the queue order holds between
ready times further apart than that; tests/test_exact.py fixes the model to simulated schedules
and finds each a solution). So the solver's bound is a lower bound on the simulated step time of
every placement that fits. Where the model leaves something out it is a relaxation: it checks
only persistent memory, lets sequential channels serve transfers in any order (the simulator's
channels are first come, first served), orders ops whose ready times lie within ``SLACK`` ticks
as it likes, and, past ``QUEUE_PAIRS``, orders each device's ops as it likes. So each placement
the solver finds is run by the simulator (``rlplace.sim``), and the fastest that fits is the
answer; its step time is the simulator's. ``optimal`` is said when that step time is within
``1e-4`` of the bound (the model's ticks are a 1e-7 part of the starting step time, so rounding
costs at most about 2e-7 per op of a path).

The queues are quadratic in the ops: on a 50-op layered DAG with parallel links they closed the
gap from 9.5% to 0.3% (the simulator had run the model's optimal placement 9.5% slower than the
model's free order), and on 100 and 200 ops (2,700 and 13,700 pairs) the search found nothing
better within 60 s with them than without (on 200 ops with sequential links, no solution at
all), hence ``QUEUE_PAIRS`` (measured on ``layered(n, width=n // 10, seed=1)``, 4 devices, 60 s).

The solver starts from the fastest of the placements of ``single``, ``m_etf``, ``critical_path``
and a 2,000-evaluation ``local_search`` from the best heuristic (its schedule as the simulator runs
it, a hint that is the solver's first solution), so it is never worse than they are: before it
started from the local search, the search's placement was 1.4-6.3% faster than the solver's best
after 60 s from m-ETF's on the 100- and 200-op layered DAGs of experiments/exact_reference.py. Its bound is never below
``rlplace.bounds.communication_bound``.

``coarsen=True`` solves the quotient of Baechi's graph optimizer (co-placement and fusion,
``rlplace.placers.baechi.optimizer.GraphOptimizer``) and expands its placement to the ops: far fewer variables on
large graphs, but the quotient runs a group's ops back to back, so its optimum bounds only the
coarse problem; the bound reported is then ``communication_bound`` of the graph itself.

With several workers and a time limit the search is not deterministic; ``workers=1`` with a
fixed ``seed`` is, up to the time limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from rlplace.bounds import communication_bound, heads_and_tails
from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.placers.baechi.optimizer import GraphOptimizer
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers import make_placer, register
from rlplace.placers.search import LocalSearch
from rlplace.sim import StepResult, simulate

TICKS = 10**7        # the starting step time in model ticks
OPTIMAL_GAP = 1e-4   # step time over bound, less one, at which the answer is called optimal
SLACK = 2            # ticks: rounding each time down may move a ready time by this much
QUEUE_PAIRS = 2_000  # the device queues are modelled up to this many pairs of unrelated ops (see the module docstring)
STARTS = ("single", "m_etf", "critical_path")
SEARCH = 2000  # evaluations of the local search the solver also starts from


@dataclass(frozen=True)
class ExactResult:
    """What ``ExactPlacer.solve`` found: the fastest placement (simulated, fitting where any
    does), its step time, a lower bound on every placement's step time, and how the search went."""

    placement: Placement
    step_time: float
    oom: bool
    bound: float
    optimal: bool
    status: str           # CP-SAT's: OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    solutions: int        # placements the solver found (each simulated)
    model_bound: float    # the solver's own bound, s (of the coarse problem with ``coarsen``)
    seconds: float        # wall time of the whole solve

    @property
    def gap(self) -> float:
        """Step time over the bound, less one: how far from optimal it can be at most."""
        return self.step_time / self.bound - 1 if self.bound > 0 else (0.0 if self.step_time == 0 else math.inf)


@register("exact")
@dataclass
class ExactPlacer:
    """The CP-SAT placement model (module docstring): ``seconds`` of search, ``workers`` solver
    threads (0: one per core), ``seed``; ``coarsen``: solve Baechi's optimized quotient."""

    seconds: float = 60.0
    workers: int = 0
    seed: int = 0
    coarsen: bool = False

    def __post_init__(self):
        if not (isinstance(self.seconds, (int, float)) and math.isfinite(self.seconds) and self.seconds > 0):
            raise ConfigError(f"exact: seconds must be a number > 0, got {self.seconds!r}")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise ConfigError(f"exact: workers must be an integer >= 0, got {self.workers!r}")

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        return self.solve(graph, cluster).placement

    def solve(self, graph: OpGraph, cluster: Cluster) -> ExactResult:
        began = time.perf_counter()
        coarse = GraphOptimizer().optimize(graph, cluster.comm) if self.coarsen else None
        work = coarse.quotient() if coarse is not None else graph
        expand = (lambda device: coarse.expand(device).device_of) if coarse is not None else (lambda device: device)
        best: list = []  # [(oom, step time), device per op of graph]

        def consider(device: np.ndarray) -> None:
            result = simulate(graph, cluster, expand(device))
            key = (result.oom, result.step_time)
            if not best or key < best[0]:
                best[:] = [key, expand(device).copy()]

        starts = [make_placer(name).place(work, cluster).device_of for name in STARTS]
        starts.append(LocalSearch(start="best", evaluations=SEARCH, seed=self.seed,
                                  progress=False).place(work, cluster).device_of)
        for device in starts:
            consider(device)
        hint = min((simulate(work, cluster, device, trace=True) for device in starts),
                   key=lambda result: (result.oom, result.step_time))
        model = _Model(work, cluster, hint)
        status, solutions, model_bound = model.solve(self.seconds, self.workers, self.seed, consider)
        floor = communication_bound(graph, cluster)
        bound = floor if coarse is not None else max(floor, model_bound)
        (oom, step), device = best
        optimal = not oom and step <= bound * (1 + OPTIMAL_GAP)
        return ExactResult(Placement(device), step, oom, bound, optimal, status, solutions, model_bound,
                           time.perf_counter() - began)


class _Model:
    """The CP-SAT model of one graph on one cluster, with the ``hint`` schedule (a simulated
    StepResult with its schedule) as the solver's first solution."""

    def __init__(self, graph: OpGraph, cluster: Cluster, hint: StepResult):
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.graph, self.cluster = graph, cluster
        n, D = graph.num_ops, cluster.num_devices
        self.tick = max(hint.step_time, 1e-12) / TICKS
        schedule = hint.schedule
        hint_device = self.hint_device = schedule.op_device
        self._apart_of: dict = {}
        m = self.model = cp_model.CpModel()
        horizon = int(hint.step_time / self.tick) + 1
        hint_start = np.floor(schedule.op_start / self.tick).astype(np.int64)
        duration = np.floor(graph.compute_time[:, None] / cluster.speeds[None, :] / self.tick).astype(np.int64)

        units = CoarseGraph.colocation(graph)
        unit_x = [[m.NewBoolVar(f"x{u}_{d}") for d in range(D)] for u in range(units.num_groups)]
        for u, row in enumerate(unit_x):
            m.AddExactlyOne(row)
        self.x = [unit_x[u] for u in units.group_of]
        self.start = [m.NewIntVar(0, horizon, f"s{i}") for i in range(n)]
        end = [m.NewIntVar(0, horizon, f"e{i}") for i in range(n)]
        on_device: list[list] = [[] for _ in range(D)]
        for i in range(n):
            for d in range(D):
                on_device[d].append(m.NewOptionalFixedSizeIntervalVar(self.start[i], int(duration[i, d]), self.x[i][d],
                                                                      f"op{i}_{d}"))
                m.Add(end[i] == self.start[i] + int(duration[i, d])).OnlyEnforceIf(self.x[i][d])
        for d in range(D):
            m.AddNoOverlap(on_device[d])
            persistent = [(int(graph.persistent_bytes[i]), self.x[i][d]) for i in range(n) if graph.persistent_bytes[i]]
            if persistent:
                m.Add(sum(b * v for b, v in persistent) <= int(cluster.memory[d]))
        step = m.NewIntVar(0, horizon, "step")
        m.AddMaxEquality(step, end)
        m.Minimize(step)
        # Redundant, for the solver's bound: rlplace.bounds' heads and tails (rounded down; a
        # tail ends on some op's end, rounded down once more), and each device's load.
        head, tail = heads_and_tails(graph, cluster)
        for i in range(n):
            m.Add(self.start[i] >= int(head[i] / self.tick))
            m.Add(step >= end[i] + int(tail[i] / self.tick) - 1)
        for d in range(D):
            m.Add(sum(int(duration[i, d]) * self.x[i][d] for i in range(n) if duration[i, d]) <= step)

        xfer = np.floor(np.asarray(cluster.comm.transfer_time(graph.tensor_bytes), dtype=np.float64).reshape(-1)
                        / self.tick).astype(np.int64)
        for e in range(graph.num_edges):
            m.Add(self.start[graph.edge_dst[e]] >= end[graph.edge_src[e]])
        self.end, self.horizon = end, horizon
        self.hints: dict = {}  # variable -> value, from the simulator's schedule
        for i in range(n):
            self.hints[self.start[i]] = int(hint_start[i])
            self.hints[end[i]] = int(hint_start[i] + duration[i, hint_device[i]])
        for u, first in enumerate(units.first_ops()):
            for d in range(D):
                self.hints[unit_x[u][d]] = int(hint_device[first] == d)
        self.hints[step] = max((self.hints[e] for e in end), default=0)
        # arrival[e]: when edge e's tensor is on its reader's device
        arrival = [end[graph.edge_src[e]] for e in range(graph.num_edges)]
        self.arrival_hint = [self.hints[a] for a in arrival]
        if D > 1:
            self.device = [m.NewIntVar(0, D - 1, f"dev{i}") for i in range(n)]
            for i in range(n):
                m.Add(self.device[i] == sum(d * self.x[i][d] for d in range(1, D)))
            if cluster.comm.mode == "sequential":
                self._sequential_transfers(xfer, schedule, arrival)
            else:
                self._parallel_transfers(xfer, arrival)
            pairs = _unrelated_pairs(graph)
            if len(pairs) <= QUEUE_PAIRS:
                self._queues(arrival, pairs)

        for var, value in self.hints.items():
            m.AddHint(var, value)

    def _apart(self, p: int, r: int):
        """A literal: ops ``p`` and ``r`` are on different devices (exactly)."""
        key = (p, r)
        if key not in self._apart_of:
            m, D = self.model, self.cluster.num_devices
            apart = m.NewBoolVar(f"apart{p}_{r}")
            for d in range(D):
                m.Add(apart >= self.x[p][d] - self.x[r][d])
                m.Add(apart <= 2 - self.x[p][d] - self.x[r][d])
            self._apart_of[key] = apart
            self.hints[apart] = int(self.hint_device[p] != self.hint_device[r])
        return self._apart_of[key]

    def _parallel_transfers(self, xfer, arrival) -> None:
        """A tensor read on another device than its producer's arrives one transfer after the
        producer's end."""
        g, end = self.graph, self.end
        for e in range(g.num_edges):
            p, r, c = int(g.edge_src[e]), int(g.edge_dst[e]), int(xfer[g.edge_tensor[e]])
            if c > 0 and self.x[p] is not self.x[r]:
                apart = self._apart(p, r)
                arrival[e] = end[p] + c * apart
                self.arrival_hint[e] += c * self.hints[apart]
                self.model.Add(self.start[r] >= arrival[e])

    def _sequential_transfers(self, xfer, schedule, arrival) -> None:
        """Per tensor and destination device one transfer, after its producer ends, that its
        readers there wait for, holding the sender's send and the receiver's receive channel."""
        m, g, D, end, horizon = self.model, self.graph, self.cluster.num_devices, self.end, self.horizon
        sent = {(int(t), int(b)): int(s / self.tick) for t, b, s in
                zip(schedule.transfer_tensor, schedule.transfer_dst_device, schedule.transfer_start)}
        hint_device = self.hint_device
        send: list[list] = [[] for _ in range(D)]
        receive: list[list] = [[] for _ in range(D)]
        for t in range(len(g.tensor_src)):
            c = int(xfer[t])
            p = int(g.tensor_src[t])
            edges = [e for e in range(g.tensor_ptr[t], g.tensor_ptr[t + 1]) if self.x[int(g.edge_dst[e])] is not self.x[p]]
            if c <= 0 or not edges:
                continue
            begins = []
            for b in range(D):
                to_b = m.NewBoolVar(f"z{t}_{b}")
                begin = m.NewIntVar(0, horizon, f"ts{t}_{b}")
                begins.append(begin)
                m.Add(begin >= end[p])
                for r in {int(g.edge_dst[e]) for e in edges}:
                    m.Add(to_b >= self.x[r][b] - self.x[p][b])
                    m.Add(self.start[r] >= begin + c).OnlyEnforceIf([self.x[r][b], to_b])
                was = (t, b) in sent
                self.hints[to_b] = int(was)
                self.hints[begin] = sent[(t, b)] if was else int(np.floor(schedule.op_end[p] / self.tick))
                for a in range(D):
                    if a == b:
                        continue
                    used = m.NewBoolVar(f"y{t}_{a}_{b}")
                    m.Add(used >= self.x[p][a] + to_b - 1)
                    self.hints[used] = int(was and hint_device[p] == a)
                    interval = m.NewOptionalFixedSizeIntervalVar(begin, c, used, f"tr{t}_{a}_{b}")
                    send[a].append(interval)
                    receive[b].append(interval)
            for e in edges:  # when the tensor is on the reader's device
                r = int(g.edge_dst[e])
                apart = self._apart(p, r)
                here = m.NewIntVar(0, horizon, f"arrive{e}")
                m.Add(here == end[p]).OnlyEnforceIf(apart.Not())
                for b in range(D):
                    m.Add(here == begins[b] + c).OnlyEnforceIf([apart, self.x[r][b]])
                arrival[e] = here
                self.hints[here] = self.arrival_hint[e] = (
                    self.hints[begins[int(hint_device[r])]] + c if hint_device[p] != hint_device[r] else self.hints[end[p]])
        for d in range(D):
            m.AddNoOverlap(send[d])
            m.AddNoOverlap(receive[d])

    def _queues(self, arrival, pairs) -> None:
        """The simulator's device queues, within ``SLACK`` ticks: each op is ready when its last
        input arrives; two ops on one device run in the order they became ready (two that read
        the same tensors, so ready at one instant, by index), and an op starts when it is ready or
        when the op before it on its device ends."""
        m, g, n, hints = self.model, self.graph, self.graph.num_ops, self.hints
        start = np.array([hints[self.start[i]] for i in range(n)])
        end = np.array([hints[self.end[i]] for i in range(n)])
        device = self.hint_device
        ready, ready_hint, inputs = [], np.zeros(n, dtype=np.int64), []
        for j in range(n):
            edges = g.in_edges[g.in_ptr[j]:g.in_ptr[j + 1]]
            inputs.append(frozenset(zip(g.edge_src[edges].tolist(), g.edge_tensor[edges].tolist())))
            r = m.NewIntVar(0, self.horizon, f"ready{j}")
            if len(edges):
                m.AddMaxEquality(r, [arrival[e] for e in edges])
                ready_hint[j] = max(self.arrival_hint[e] for e in edges)
            else:
                m.Add(r == 0)
            ready.append(r)
            hints[r] = int(ready_hint[j])
            hints[self.device[j]] = int(device[j])
        ran_first = lambda a, b: (start[a], end[a], a) < (start[b], end[b], b)  # noqa: E731 - in the hint
        after: list[list] = [[] for _ in range(n)]  # per op j: literals "j starts as op k before it ends"
        for k, j in pairs:
            same = m.NewBoolVar(f"same{k}_{j}")
            m.Add(self.device[k] == self.device[j]).OnlyEnforceIf(same)
            m.Add(self.device[k] != self.device[j]).OnlyEnforceIf(same.Not())
            first = m.NewBoolVar(f"first{k}_{j}")  # k before j, where they share a device
            m.Add(self.end[k] <= self.start[j]).OnlyEnforceIf([same, first])
            m.Add(self.end[j] <= self.start[k]).OnlyEnforceIf([same, first.Not()])
            m.Add(ready[k] <= ready[j] + SLACK).OnlyEnforceIf([same, first])
            m.Add(ready[j] <= ready[k] + SLACK).OnlyEnforceIf([same, first.Not()])
            if inputs[k] == inputs[j]:  # ready at the same instant wherever they are: by index
                m.Add(first == 1).OnlyEnforceIf(same)
            hints[same] = int(device[k] == device[j])
            hints[first] = int(ran_first(k, j))
            for a, b, order in ((k, j, first), (j, k, first.Not())):
                behind = m.NewBoolVar(f"behind{a}_{b}")  # b starts as a ends
                m.AddImplication(behind, same)
                m.AddImplication(behind, order)
                m.Add(self.start[b] <= self.end[a] + 1).OnlyEnforceIf(behind)
                after[b].append(behind)
                hints[behind] = int(device[a] == device[b] and ran_first(a, b) and end[a] <= start[b] <= end[a] + 1)
        for j in range(n):
            on_time = m.NewBoolVar(f"on_time{j}")
            m.Add(self.start[j] <= ready[j] + SLACK).OnlyEnforceIf(on_time)
            m.AddBoolOr([on_time, *after[j]])
            hints[on_time] = int(start[j] <= ready_hint[j] + SLACK)

    def solve(self, seconds: float, workers: int, seed: int, consider) -> tuple[str, int, float]:
        """Search for ``seconds``; ``consider(device per op)`` sees every placement found.
        Returns CP-SAT's status, the number of placements found and its bound in seconds."""
        cp, D = self.cp, self.cluster.num_devices
        x = self.x

        class Found(cp.CpSolverSolutionCallback):
            def __init__(self):
                super().__init__()
                self.count = 0

            def on_solution_callback(self):
                self.count += 1
                consider(np.array([next(d for d in range(D) if self.BooleanValue(row[d])) for row in x],
                                  dtype=np.int64))

        solver = cp.CpSolver()
        solver.parameters.max_time_in_seconds = float(seconds)
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        found = Found()
        status = solver.Solve(self.model, found)
        # INFEASIBLE: no placement's persistent bytes fit, so none fits; the bound says nothing then
        bound = solver.BestObjectiveBound() * self.tick if status in (cp.OPTIMAL, cp.FEASIBLE) else 0.0
        return solver.StatusName(status), found.count, max(bound, 0.0)


def _unrelated_pairs(graph: OpGraph) -> list[tuple[int, int]]:
    """The pairs (k, j), k < j, of ops neither of which is an ancestor of the other (ancestors
    as bit sets; ops are in topological order), or more than ``QUEUE_PAIRS`` + 1 of them."""
    n = graph.num_ops
    ancestors = [0] * n
    for j in range(n):
        for e in graph.in_edges[graph.in_ptr[j]:graph.in_ptr[j + 1]]:
            p = int(graph.edge_src[e])
            ancestors[j] |= ancestors[p] | (1 << p)
    pairs = []
    for j in range(n):
        for k in range(j):
            if not (ancestors[j] >> k) & 1:
                pairs.append((k, j))
                if len(pairs) > QUEUE_PAIRS:
                    return pairs
    return pairs
