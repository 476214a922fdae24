"""Search placers: improve a start placement by evaluating candidate moves through a Backend.
They are the baseline every learned placer is compared with at equal evaluations (issue 16;
GiPH and Tarnawski et al., NeurIPS'20, ship local search as theirs).

- ``local_search``: hill-climbing. Each round evaluates ``batch`` candidate moves from the
  current placement and keeps the best of them if it is not worse than the current one.
- ``annealing``: simulated annealing (Kirkpatrick, Gelatt & Vecchi, Science 1983). Each round
  evaluates ``batch`` candidates and takes the best; it is kept if not worse, and otherwise
  with probability ``exp(-Δ / T)``, Δ its slowdown as a fraction of the start's step time. The
  temperature falls geometrically from ``t_start`` to ``t_end`` over the budget:
  ``T = t_start * (t_end / t_start) ** f``, ``f`` the fraction of the budget spent
  (evaluations, or seconds, whichever is further along).

Both search over **colocation units** (a colocation group, or a lone op; units are numbered in
topological order, ``CoarseGraph.colocation``), so every candidate respects colocation. A move
(``Moves.propose``) puts one unit on another device, or a contiguous run of 2 to
``run_fraction`` of the units onto one device, with equal odds; a move that changes nothing is
drawn again without being evaluated.

Placements are compared by (memory overflow, step time) in that order, the overflow being the
bytes above each device's memory summed over the devices: from a start that fits, an OOM
candidate is never kept; from an OOM start, the search first shrinks the overflow. The placer
returns the best placement it evaluated, never one worse than its start.

The start is a registered placer's placement (``start="m_etf"``), the best of several
(``start=["m_etf", "metis"]``) or ``start="best"``, the best of ``HEURISTICS``. Every start is
evaluated through the backend and counts against the budget. The budget is ``evaluations``
and/or ``seconds``; with an evaluation budget the same seed gives the same placement.
Evaluation goes through ``backend`` (anything with ``evaluate``; one with ``evaluate_many``
gets a whole round in one call); without one, through the simulator's batched entry point
``rlplace.sim.simulate_many``. After ``place``, ``result`` holds the search's record and
``curve`` the best step time after each evaluation.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from rlplace.backends import SimBackend, as_backend
from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placed, Placement
from rlplace.placers import available_placers, make_placer, register
from rlplace.progress import progress_bar
from rlplace.sim import simulate_many
from rlplace.verify import VerifyingBackend

# The algorithmic placers ``start="best"`` chooses from.
HEURISTICS = ("single", "expert", "metis", "heft", "m_topo", "m_etf", "m_sct", "order_place", "celeritas")
SEARCH_PLACERS = ("local_search", "annealing")   # registered below; they evaluate candidates on a backend


# ------------------------------------------------------------------------------ evaluation
def evaluate_rows(graph: OpGraph, cluster: Cluster, rows: np.ndarray, backend=None) -> tuple[np.ndarray, np.ndarray]:
    """(memory overflow in bytes, step time in s) of every row of ``rows`` (placements × ops),
    through ``backend`` (None: ``simulate_many``). A backend that reports OOM without a peak
    above the memory (a real run that failed) gets an infinite overflow."""
    if backend is None or isinstance(backend, SimBackend):  # the batched simulator
        batch = (simulate_many if backend is None else backend.evaluate_many)(graph, cluster, rows)
        step, oom, peak = batch.step_time, batch.oom, batch.peak_memory
    else:
        results = [backend.evaluate(graph, cluster, Placement(row)) for row in rows]
        step = np.array([r.step_time for r in results], dtype=float)
        oom = np.array([r.oom for r in results], dtype=bool)
        peak = np.array([r.peak_memory for r in results], dtype=float).reshape(len(rows), cluster.num_devices)
    overflow = np.maximum(np.asarray(peak, dtype=float) - cluster.memory, 0.0).sum(axis=1)
    return np.where(oom & (overflow == 0), np.inf, overflow), np.asarray(step, dtype=float)


def best_of(graph: OpGraph, cluster: Cluster, names: Sequence[str], seed: int = 0, backend=None
            ) -> tuple[str, Placement, float, float]:
    """The placement of the placer in ``names`` that evaluates best by (overflow, step time),
    ties to the earlier name: (name, placement, overflow, step time)."""
    placements = [make_placer(name, seed=seed).place(graph, cluster) for name in names]
    overflow, step = evaluate_rows(graph, cluster, np.stack([p.device_of for p in placements]), backend)
    j = int(np.lexsort((step, overflow))[0])
    return names[j], placements[j], float(overflow[j]), float(step[j])


# ------------------------------------------------------------------------------ moves
class Moves:
    """Candidate moves over the colocation units of a graph. A placement is held as one
    device per unit; ``expand`` turns rows of those into op placements."""

    def __init__(self, graph: OpGraph, num_devices: int, run_fraction: float):
        self.units = CoarseGraph.colocation(graph)
        self.num_units, self.num_devices = self.units.num_groups, num_devices
        self.max_run = min(self.num_units, max(2, int(run_fraction * self.num_units)))

    def of_placement(self, placement: Placement) -> np.ndarray:
        return np.asarray(placement.device_of)[self.units.first_ops()]

    def expand(self, unit_devices: np.ndarray) -> np.ndarray:
        return unit_devices[..., self.units.group_of]

    def propose(self, current: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A copy of ``current`` with one unit, or a contiguous run of units, on one device;
        never ``current`` itself (needs at least two devices)."""
        while True:
            if self.max_run >= 2 and rng.random() < 0.5:
                length = int(rng.integers(2, self.max_run + 1))
                first = int(rng.integers(0, self.num_units - length + 1))
            else:
                length, first = 1, int(rng.integers(self.num_units))
            to = int(rng.integers(self.num_devices))
            if np.any(current[first:first + length] != to):
                candidate = current.copy()
                candidate[first:first + length] = to
                return candidate


# ------------------------------------------------------------------------------ the search
@dataclass
class SearchResult:
    """The record of one search: the best placement and its score, the start, and ``curve``,
    the best step time after each evaluation (the starts' evaluations first)."""

    placement: Placement
    step_time: float
    overflow_bytes: float
    start: str
    start_step_time: float
    start_overflow_bytes: float
    evaluations: int
    accepted: int
    last_improvement_at: int
    seconds: float
    curve: list[float]
    verified: dict[str, Any] | None = None   # a VerifyingBackend's record (VerifyingBackend.record)

    @property
    def oom(self) -> bool:
        return self.overflow_bytes > 0

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "start_step_time": self.start_step_time, "start_oom": self.start_overflow_bytes > 0,
                "step_time": self.step_time, "oom": self.oom, "overflow_bytes": self.overflow_bytes,
                "evaluations": self.evaluations, "accepted": self.accepted,
                "last_improvement_at": self.last_improvement_at, "seconds": self.seconds, "curve": self.curve,
                **({} if self.verified is None else {"verified": self.verified})}


@dataclass
class SearchPlacer:
    """What both search placers share (see the module docstring); they differ in ``accept``."""

    start: str | Sequence[str] = "best"
    evaluations: int | None = 2000
    seconds: float | None = None
    seed: int = 0
    batch: int = 4                 # candidates evaluated per round
    run_fraction: float = 0.05     # a run moves up to this fraction of the units
    backend: Any = None            # a Backend; None: the simulator (simulate_many)
    progress: bool | None = None   # a bar (in a log, a line every few seconds: rlplace.progress); False: none
    result: SearchResult | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.evaluations is None and self.seconds is None:
            raise ConfigError(f"{type(self).__name__}: give a budget (evaluations and/or seconds)")
        if (self.evaluations is not None and self.evaluations < 1) or (self.seconds is not None and self.seconds <= 0):
            raise ConfigError(f"{type(self).__name__}: evaluations must be >= 1 and seconds > 0, "
                              f"got {self.evaluations} and {self.seconds}")
        if self.batch < 1:
            raise ConfigError(f"{type(self).__name__}: batch must be >= 1, got {self.batch}")
        if self.backend is not None:
            as_backend(self.backend, f"{type(self).__name__}: backend")
        if not (isinstance(self.start, str) or (isinstance(self.start, (list, tuple)) and self.start
                                                  and all(isinstance(n, str) for n in self.start))):
            raise ConfigError(f"{type(self).__name__}: start must be a placer's name, best, or a non-empty list of "
                              f"names, got {self.start!r:.60}")
        if not 0 < self.run_fraction <= 1:
            raise ConfigError(f"{type(self).__name__}: run_fraction must be in (0, 1], got {self.run_fraction}")
        unknown = [name for name in self.start_names if name not in available_placers()]
        if unknown:
            raise ConfigError(f"{type(self).__name__}: unknown start placer {unknown[0]!r} "
                              f"(known: {', '.join(available_placers())})")

    @property
    def start_names(self) -> list[str]:
        if self.start == "best":
            return list(HEURISTICS)
        return [self.start] if isinstance(self.start, str) else list(self.start)

    @property
    def curve(self) -> list[float]:
        return [] if self.result is None else self.result.curve

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        """The best placement evaluated; with a VerifyingBackend, the best *measured* of the
        top-k it kept (``result.verified`` records them)."""
        clock = time.perf_counter()
        names = self.start_names
        name, placement, overflow, step = best_of(graph, cluster, names, self.seed, self.backend)
        result = self.search(graph, cluster, placement, name, (overflow, step), spent=len(names), clock=clock)
        if isinstance(self.backend, VerifyingBackend):
            best = self.backend.finish(graph, cluster)
            result.verified = {**self.backend.record(), "final": None if best is None else best.as_dict()}
            if best is not None:
                result.placement = Placement(best.placement)
        return Placed(result.placement.device_of, curve=result.curve, search=result)

    def search(self, graph: OpGraph, cluster: Cluster, start: Placement, start_name: str = "given",
               score: tuple[float, float] | None = None, spent: int = 0, clock: float | None = None) -> SearchResult:
        """Improve ``start`` (its (overflow, step time) ``score``, evaluated here if not given);
        ``spent`` evaluations and the time since ``clock`` already count against the budget."""
        clock = time.perf_counter() if clock is None else clock
        start.validate(graph, cluster)
        rng = np.random.default_rng(self.seed)
        moves = Moves(graph, cluster.num_devices, self.run_fraction)
        current = moves.of_placement(start)
        if score is None:
            overflow, step = evaluate_rows(graph, cluster, moves.expand(current)[None], self.backend)
            score, spent = (float(overflow[0]), float(step[0])), spent + 1
        start_score = score
        best, best_score = current, score
        curve, accepted, last_gain = [score[1]] * spent, 0, spent
        bar = progress_bar(total=self.evaluations, initial=spent, unit="placement", leave=False,
                           show=self.progress is not False, desc=f"{type(self).__name__} on {graph.name}")
        while cluster.num_devices > 1 and (left := self._left(len(curve), clock)) > 0:
            candidates = np.stack([moves.propose(current, rng) for _ in range(min(self.batch, left))])
            overflow, step = evaluate_rows(graph, cluster, moves.expand(candidates), self.backend)
            j = int(np.lexsort((step, overflow))[0])
            for k in range(len(candidates)):  # the curve runs over the candidates in order
                if (overflow[k], step[k]) < best_score:
                    best, best_score, last_gain = candidates[k], (float(overflow[k]), float(step[k])), len(curve) + 1
                curve.append(best_score[1])
            if self.accept((float(overflow[j]), float(step[j])), score, start_score[1],
                           self._fraction(len(curve), clock), rng):
                current, score, accepted = candidates[j], (float(overflow[j]), float(step[j])), accepted + 1
            bar.update(len(candidates))
        bar.close()
        self.result = SearchResult(
            placement=Placement(moves.expand(best)), step_time=best_score[1], overflow_bytes=best_score[0],
            start=start_name, start_step_time=start_score[1], start_overflow_bytes=start_score[0],
            evaluations=len(curve), accepted=accepted, last_improvement_at=last_gain,
            seconds=time.perf_counter() - clock, curve=curve)
        return self.result

    def accept(self, candidate: tuple[float, float], current: tuple[float, float], reference: float,
               fraction: float, rng: np.random.Generator) -> bool:
        raise NotImplementedError

    def _left(self, spent: int, clock: float) -> int:
        """Evaluations left (a large number when only seconds bound the search)."""
        if self.seconds is not None and time.perf_counter() - clock >= self.seconds:
            return 0
        return self.batch if self.evaluations is None else self.evaluations - spent

    def _fraction(self, spent: int, clock: float) -> float:
        """The fraction of the budget spent, by evaluations or seconds, whichever is further."""
        by_count = 0.0 if self.evaluations is None else spent / self.evaluations
        by_time = 0.0 if self.seconds is None else (time.perf_counter() - clock) / self.seconds
        return min(1.0, max(by_count, by_time))


@register("local_search")
@dataclass
class LocalSearch(SearchPlacer):
    """Hill-climbing: keep the round's best candidate if it is not worse than the current
    placement (ties are kept, so the search walks across plateaus)."""

    def accept(self, candidate, current, reference, fraction, rng) -> bool:
        return candidate <= current


@register("annealing")
@dataclass
class Annealing(SearchPlacer):
    """Simulated annealing with the geometric schedule of the module docstring; ``t_start`` and
    ``t_end`` are fractions of the start's step time."""

    t_start: float = 1e-3
    t_end: float = 1e-5

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.t_end <= self.t_start:
            raise ConfigError(f"annealing: need 0 < t_end <= t_start, got {self.t_end} and {self.t_start}")

    def temperature(self, fraction: float) -> float:
        return self.t_start * (self.t_end / self.t_start) ** fraction

    def accept(self, candidate, current, reference, fraction, rng) -> bool:
        if candidate[0] != current[0]:
            return candidate[0] < current[0]
        slowdown = (candidate[1] - current[1]) / reference if reference > 0 else 0.0
        return slowdown <= 0 or rng.random() < math.exp(-slowdown / self.temperature(fraction))


def algorithmic_references(graph: OpGraph, cluster: Cluster, evaluations: int = 2000, seed: int = 0,
                           names: Sequence[str] = HEURISTICS) -> list[dict[str, Any]]:
    """What a learned placer is measured against, simulated: the step time and OOM of each
    placer in ``names`` and of a local search and an annealing of ``evaluations`` each (their
    start's included) from the best of them, as records ``{"placer", "step_time", "oom"}``; the
    searches' also carry their ``curve`` (best step time after each evaluation)."""
    placements = [make_placer(name, seed=seed).place(graph, cluster) for name in names]
    overflow, step = evaluate_rows(graph, cluster, np.stack([p.device_of for p in placements]))
    records = [{"placer": name, "step_time": float(s), "oom": bool(o > 0)} for name, s, o in zip(names, step, overflow)]
    j = int(np.lexsort((step, overflow))[0])
    start_score = (float(overflow[j]), float(step[j]))
    for name in SEARCH_PLACERS:
        search = make_placer(name, seed=seed, evaluations=max(evaluations, len(names)), progress=False).search(
            graph, cluster, placements[j], names[j], start_score, spent=len(names))
        records.append({"placer": f"{name} from {names[j]} ({search.evaluations} evaluations)",
                        "step_time": search.step_time, "oom": search.oom, "curve": search.curve})
    return records
