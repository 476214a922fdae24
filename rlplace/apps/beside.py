"""Search beside a learned placer (issue 16): every learned run is reported with a local search
(``rlplace.placers.search.LocalSearch``, hill-climbing) from the same start, at equal
evaluations and at equal wall time, so that what learning buys over the search a practitioner
would run first is visible (GiPH and Tarnawski et al., NeurIPS'20, compare with local search).

- **the start**: the first placement the learned run evaluated (``first_placement.json`` of an
  ``rlplace-train`` run): the warm-start heuristic's with ``warm_start.first_sample``, else the
  policy's first sample. A run recorded before that file existed starts from ``single``, and
  its records say so;
- **equal evaluations**: as many placements as the learned run evaluated, the start's included;
- **equal wall time**: the learned run's seconds of training (its loop: behaviour cloning and
  Mars' encoder pre-training are not counted, which favours the learned run), capped at
  ``max_seconds`` (``MAX_SECONDS``, 60 s, by default) so that a table of learned runs taking
  minutes to hours does not double in length; a capped record says so (``capped``).

Both searches take the learned run's seed and evaluate through the given backend (None: the
simulator). Each becomes one record like a search placer's in ``rlplace-compare``: ``placer``
(``local_search beside <run> (<budget>)``), ``step_time``, ``oom``, ``curve`` (the best step
time's change points, ``[placements evaluated, best step time]``, drawn by
``rlplace.report.draw_curves``) and ``search`` (the search's record and the learned run's
budget).
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlplace.cluster import Cluster
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placed, Placement
from rlplace.placers import make_placer
from rlplace.placers.search import LocalSearch, SearchResult

MAX_SECONDS = 60.0
BUDGETS = ("equal evaluations", "equal wall time")


@dataclass
class LearnedRun:
    """What a search beside a learned run needs of it."""

    label: str              # the run's name in tables and plots, e.g. "mars_warm"
    start: Placement        # its first evaluated placement
    start_name: str         # where that placement came from, as the records state it
    evaluations: int        # placements it evaluated, the start's included
    seconds: float          # seconds of training

    @classmethod
    def from_run_dir(cls, run_dir: str | Path, graph: OpGraph, cluster: Cluster, label: str, evaluations: int,
                     seconds: float) -> LearnedRun:
        """The run in ``run_dir`` (an rlplace-train output directory) starts from its
        ``first_placement.json``; without one (recorded before it existed), from ``single``."""
        from rlplace.learn.train import FIRST_PLACEMENT

        path = Path(run_dir) / FIRST_PLACEMENT
        if path.is_file():
            return cls(label, Placement.load(path, graph, cluster), "the learned run's first placement",
                       evaluations, seconds)
        return cls(label, make_placer("single").place(graph, cluster),
                   f"single ({run_dir} has no {FIRST_PLACEMENT})", evaluations, seconds)


def limits(run: LearnedRun, budget: str, max_seconds: float | None = MAX_SECONDS) -> dict[str, Any]:
    """The search budget (``LocalSearch``'s ``evaluations`` and ``seconds``) beside ``run``."""
    if budget == "equal evaluations":
        return {"evaluations": max(1, run.evaluations), "seconds": None}
    if budget == "equal wall time":
        seconds = run.seconds if max_seconds is None else min(run.seconds, max_seconds)
        return {"evaluations": None, "seconds": max(seconds, 1e-3)}
    raise ConfigError(f"search beside: unknown budget {budget!r} (known: {', '.join(BUDGETS)})")


@dataclass
class BesideResult:
    """A search beside ``run`` at ``budget``: ``as_dict`` is its record's ``search`` entry with
    ``curve`` (``change_points``), as a search placer's ``result`` in ``rlplace-compare``."""

    run: LearnedRun
    budget: str
    search: SearchResult
    max_seconds: float | None

    @property
    def curve(self) -> list[list[float]]:
        return change_points(self.search.curve)

    @property
    def capped(self) -> bool:
        return self.budget == "equal wall time" and self.max_seconds is not None and self.run.seconds > self.max_seconds

    def as_dict(self) -> dict[str, Any]:
        return {**self.search.as_dict(), "curve": self.curve, "beside": self.run.label,
                "budget": self.budget, "learned_evaluations": self.run.evaluations,
                "learned_seconds": self.run.seconds, "max_seconds": self.max_seconds, "capped": self.capped}

    def record(self) -> dict[str, Any]:
        summary = self.as_dict()
        return {"placer": f"local_search beside {self.run.label} ({self.budget})", "beside": self.run.label,
                "budget": self.budget, "step_time": self.search.step_time, "oom": self.search.oom,
                "curve": summary.pop("curve"), "search": summary}


def search_at(graph: OpGraph, cluster: Cluster, run: LearnedRun, budget: str, seed: int = 0, backend=None,
           max_seconds: float | None = MAX_SECONDS) -> BesideResult:
    """A local search from ``run.start`` at ``budget`` (module docstring)."""
    searcher = LocalSearch(**limits(run, budget, max_seconds), seed=seed, backend=backend, progress=False)
    return BesideResult(run, budget, searcher.search(graph, cluster, run.start, run.start_name), max_seconds)


def search_beside(graph: OpGraph, cluster: Cluster, run: LearnedRun, seed: int = 0, backend=None,
                  max_seconds: float | None = MAX_SECONDS) -> list[dict[str, Any]]:
    """The records of the searches beside ``run``, at equal evaluations and at equal wall time."""
    return [search_at(graph, cluster, run, budget, seed, backend, max_seconds).record() for budget in BUDGETS]


def change_points(curve: Sequence[float]) -> list[list[float]]:
    """A best-so-far curve (one value per evaluation) as ``[evaluations, value]`` at each change
    and at its end: the same step plot in a few points (an equal-time search evaluates tens of
    thousands of placements)."""
    values = np.asarray(curve, dtype=float)
    if not len(values):
        return []
    keep = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    keep = np.union1d(keep, [len(values) - 1])
    return [[int(i) + 1, float(values[i])] for i in keep]


@dataclass
class SearchBeside:
    """A placer for ``rlplace-compare``: the local search beside a trained policy of the same
    comparison (``rlplace.learn.placer.PolicyPlacer``) at one of ``BUDGETS``. It places after
    the policy has (it starts from the policy's first training placement, which the policy
    finds when it places), so it goes after it in the placer list (``beside_placers``)."""

    policy: Any                   # a PolicyPlacer
    label: str
    budget: str
    seed: int = 0
    backend: Any = None
    max_seconds: float | None = MAX_SECONDS
    result: BesideResult | None = field(default=None, init=False, repr=False)

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        progress = self.policy.state.progress
        start, start_name = self.policy.first_placement, "the policy's first training placement"
        if start is None:
            raise PlacementError(f"{self.label} did not place, so there is no start to search beside it from")
        run = LearnedRun(self.label, start, start_name, int(progress["evaluated"]), float(progress["elapsed"]))
        self.result = search_at(graph, cluster, run, self.budget, self.seed, self.backend, self.max_seconds)
        return Placed(self.result.search.placement.device_of, curve=self.result.curve, search=self.result)


def beside_placers(placers: Sequence[tuple[str, Any]], graph: OpGraph, cluster: Cluster, seed: int = 0,
                   backend=None, max_seconds: float | None = MAX_SECONDS) -> list[tuple[str, SearchBeside]]:
    """``(name, placer)`` of the searches beside each trained policy among ``placers`` that was
    trained on this graph and cluster (a policy placing another graph evaluated nothing here)."""
    policy_placers = sys.modules.get("rlplace.learn.placer")  # none exists before its module loads
    if policy_placers is None:  # (and the module needs torch, which the core install leaves out)
        return []
    out = []
    for name, placer in placers:
        if isinstance(placer, policy_placers.PolicyPlacer) and placer.trained_on(graph, cluster):
            for budget in BUDGETS:
                beside = SearchBeside(placer, name, budget, seed, backend, max_seconds)
                out.append((f"local_search beside {name} ({budget})", beside))
    return out
