"""Place, time, evaluate, record: one placer on one graph, as ``rlplace-compare`` and the paper
tables run it (``rlplace.apps.compare``, ``rlplace.apps.tables.common``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rlplace.backends import Backend, SimBackend
from rlplace.cluster import Cluster
from rlplace.graph import OpGraph
from rlplace.placement import Placed, ops_placed
from rlplace.sim import StepResult


@dataclass
class PlacerRun:
    """A placer's placement (with what it knows of it), the seconds it took to place, and the
    backend's result for it."""

    name: str
    placement: Placed
    seconds: float
    result: StepResult

    def record(self, graph: OpGraph) -> dict[str, Any]:
        """The run as a results.json record: the result, ``placement_time``, ``ops_placed``, and
        a curve (best step time after each evaluation: a search's or a trained policy's) and a
        search's record where the placement has them."""
        record = {"placer": self.name, **self.result.as_dict(), "placement_time": self.seconds,
                  "ops_placed": ops_placed(self.placement, graph)}
        if self.placement.curve:
            record["curve"] = list(self.placement.curve)
        if self.placement.search is not None:
            search = self.placement.search.as_dict()
            search.pop("curve")
            record["search"] = search
        return record


def run_placer(name: str, placer, graph: OpGraph, cluster: Cluster, backend: Backend | None = None) -> PlacerRun:
    """Place ``graph`` with ``placer``, timing the placement, and evaluate it on ``backend``
    (the simulator by default; a backend refuses a placement that does not fit the graph)."""
    start = time.perf_counter()
    placement = Placed.of(placer.place(graph, cluster))
    seconds = time.perf_counter() - start
    return PlacerRun(name, placement, seconds, (backend or SimBackend()).evaluate(graph, cluster, placement))
