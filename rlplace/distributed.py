"""Parallel evaluation of placements on a pool of Ray actors (``pip install rlplace[ray]``).

Real measurement is the bottleneck of learned placement: the Hierarchical Planner trained with
16 measuring workers (HP §3). ``RayBackend`` is a Backend whose ``evaluate_batch(graph, cluster,
placements)`` runs a batch of placements concurrently, one per worker at a time, and returns the
results in submission order. Each worker is a Ray actor that owns its own backend, built in the
actor by ``make_backend(name, **options)``: a simulator for ``sim``, its own TensorFlow process
for ``tf`` (with ``num_gpus`` GPUs when the Ray cluster has them).

Faults: a worker that dies, or whose evaluation runs longer than ``timeout`` seconds, is killed
and replaced by a fresh actor, and its placement is re-run; every placement yields exactly one
result. ``retries`` counts the re-runs and ``replaced`` the workers replaced. A placement that
fails on ``max_retries + 1`` workers raises BackendError; an error raised by the backend itself
(e.g. PlacementError) is not a fault and reaches the caller unchanged.

Ray is imported only when a RayBackend is made: ``make_parallel_backend`` with ``workers=1`` and
no ``address`` returns the plain in-process backend.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable, Sequence

from rlplace.backends import Backend, make_backend
from rlplace.cluster import Cluster
from rlplace.errors import BackendError, ConfigError, RlplaceError
from rlplace.extras import missing_extra
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import StepResult

BackendSpec = str | Callable[[], Backend]   # a registered name, or a factory (tests, benchmarks)


def make_parallel_backend(name: BackendSpec, options: dict[str, Any] | None = None, workers: int = 1,
                          address: str | None = None, **ray_options) -> Backend:
    """The backend ``name``: in-process when ``workers == 1`` and no Ray ``address`` is given
    (Ray is not imported), else a ``RayBackend`` of ``workers`` actors."""
    if workers < 1:
        raise ConfigError(f"backend.workers must be >= 1, got {workers}")
    if workers == 1 and address is None:
        return make_backend(name, **(options or {})) if isinstance(name, str) else name()
    return RayBackend(name, options, workers=workers, address=address, **ray_options)


class _Worker:
    """One Ray actor: its own backend, and the last graph it was sent (shipped once per graph)."""

    def __init__(self, backend: BackendSpec, options: dict[str, Any]):
        self.backend = make_backend(backend, **options) if isinstance(backend, str) else backend()
        self._graph_key: str | None = None
        self._graph: OpGraph | None = None

    def ready(self) -> bool:
        return self.backend.simulated

    def evaluate(self, graph_key: str, graph_ref: list, cluster: Cluster, placement: Placement) -> StepResult:
        if graph_key != self._graph_key:
            import ray

            self._graph, self._graph_key = ray.get(graph_ref[0]), graph_key
        return self.backend.evaluate(self._graph, cluster, placement)


class RayBackend(Backend):
    """A pool of ``workers`` Ray actors, each with its own backend; see the module docstring.

    ``address``: None joins the Ray cluster ``ray start`` made on this machine, else starts a
    local instance (Ray's rule); ``"auto"`` or ``"host:port"`` joins a running cluster. When Ray
    is already initialised in this process, that instance is used and ``address`` is ignored.
    ``timeout``: seconds an evaluation (or a worker's start) may take; None waits forever.
    ``num_cpus``/``num_gpus``: resources each actor reserves; ``num_cpus=None`` is Ray's actor
    default (one CPU to be scheduled, none held), ``num_gpus=None`` shares the cluster's whole
    GPUs equally among the workers (none when it has no GPU)."""

    def __init__(self, backend: BackendSpec = "sim", options: dict[str, Any] | None = None, *, workers: int = 2,
                 address: str | None = None, timeout: float | None = 600.0, max_retries: int = 3,
                 num_cpus: float | None = None, num_gpus: float | None = None):
        try:
            import ray
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, "backend.workers > 1 or ray.address") or exc from None
        if workers < 1 or max_retries < 0 or (timeout is not None and timeout <= 0):
            raise ConfigError(f"RayBackend: need workers >= 1, max_retries >= 0 and timeout > 0 "
                              f"(got {workers}, {max_retries}, {timeout})")
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, include_dashboard=False, logging_level="warning")
        if num_gpus is None:
            num_gpus = math.floor(ray.cluster_resources().get("GPU", 0) / workers)
        # with no resource named, a Ray actor needs a CPU to be placed and holds none once running
        resources = {**({"num_cpus": num_cpus} if num_cpus is not None else {}),
                     **({"num_gpus": num_gpus} if num_gpus else {})}
        actor_options = {**resources, "max_restarts": 0, "max_task_retries": 0}
        self._actor_class = ray.remote(**actor_options)(_Worker)
        self._resources = resources
        self._spec, self._options = backend, dict(options or {})
        self.timeout, self.max_retries = timeout, max_retries
        self.retries = 0      # placements re-run after their worker died or hung
        self.replaced = 0     # workers replaced
        self.simulated = False
        self._graph: tuple[OpGraph, Any] | None = None
        self.actors: list = [None] * workers
        self._starting: dict[Any, tuple[int, float]] = {}    # ready() ref -> (slot, start time)
        for slot in range(workers):
            self._start(slot)
        self._await_start()

    # ------------------------------------------------------------------------------ Backend
    def evaluate(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        return self.evaluate_batch(graph, cluster, [placement])[0]

    def evaluate_batch(self, graph: OpGraph, cluster: Cluster, placements: Sequence[Placement]) -> list[StepResult]:
        """The results of ``placements`` in submission order, evaluated concurrently."""
        ray = self._ray
        placements = [p if isinstance(p, Placement) else Placement(p) for p in placements]
        graph_key, graph_ref = self._graph_ref(graph)
        results: list[StepResult | None] = [None] * len(placements)
        attempts = [0] * len(placements)
        todo = deque(range(len(placements)))
        idle = [slot for slot in range(len(self.actors)) if slot not in self._starting_slots()]
        running: dict[Any, tuple[int, int, float]] = {}       # evaluate() ref -> (slot, index, start)
        while todo or running:
            while todo and idle:
                slot, index = idle.pop(), todo.popleft()
                ref = self.actors[slot].evaluate.remote(graph_key, [graph_ref], cluster, placements[index])
                running[ref] = (slot, index, time.monotonic())
            waiting = [*running, *self._starting]
            ready, _ = ray.wait(waiting, num_returns=1, timeout=self._wait_time(running))
            for ref in ready:
                if ref in self._starting:
                    idle.append(self._started(ref))
                    continue
                slot, index, _ = running.pop(ref)
                try:
                    results[index] = ray.get(ref)
                    idle.append(slot)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
                    self._retry(slot, index, attempts, todo, "died")
                except ray.exceptions.RayTaskError as exc:
                    raise (exc.cause if isinstance(exc.cause, RlplaceError) else exc) from None
            self._check_start_deadlines()
            now = time.monotonic()
            for ref, (slot, index, start) in list(running.items()):
                if self.timeout is not None and now - start > self.timeout:
                    del running[ref]
                    ray.kill(self.actors[slot], no_restart=True)
                    self._retry(slot, index, attempts, todo, f"hung (over {self.timeout} s)")
        return results

    def close(self) -> None:
        """Kill the workers; shut Ray down if this backend started it."""
        for actor in self.actors:
            self._ray.kill(actor, no_restart=True)
        self.actors, self._starting = [], {}
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------ pieces
    def _graph_ref(self, graph: OpGraph) -> tuple[str, Any]:
        """The graph in the object store, put there once; actors fetch it on first use."""
        if self._graph is None or self._graph[0] is not graph:
            self._graph = (graph, self._ray.put(graph))
        ref = self._graph[1]
        return ref.hex(), ref

    def _start(self, slot: int) -> None:
        self.actors[slot] = self._actor_class.remote(self._spec, self._options)
        self._starting[self.actors[slot].ready.remote()] = (slot, time.monotonic())

    def _starting_slots(self) -> set[int]:
        return {slot for slot, _ in self._starting.values()}

    def _started(self, ref) -> int:
        slot, _ = self._starting.pop(ref)
        try:
            self.simulated = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            raise BackendError(f"a Ray worker could not build backend {self._spec!r}: {exc.cause}") from None
        except self._ray.exceptions.RayActorError as exc:
            raise BackendError(f"a Ray worker died while starting backend {self._spec!r}: {exc}") from None
        return slot

    def _await_start(self) -> None:
        while self._starting:
            ready, _ = self._ray.wait(list(self._starting), num_returns=1, timeout=self._wait_time({}))
            for ref in ready:
                self._started(ref)
            self._check_start_deadlines()

    def _check_start_deadlines(self) -> None:
        now = time.monotonic()
        if self.timeout is not None and any(now - start > self.timeout for _, start in self._starting.values()):
            raise BackendError(f"a Ray worker did not start within {self.timeout} s: does the cluster have the "
                               f"resources for {len(self.actors)} workers of {self._resources or 'one CPU'} each? "
                               f"(it has {self._ray.cluster_resources()})")

    def _wait_time(self, running: dict) -> float | None:
        """Seconds until the first deadline of a running evaluation or a starting worker."""
        if self.timeout is None:
            return None
        starts = [start for _, _, start in running.values()] + [start for _, start in self._starting.values()]
        return max(0.0, min(starts) + self.timeout - time.monotonic()) + 0.01 if starts else None

    def _retry(self, slot: int, index: int, attempts: list[int], todo: deque, why: str) -> None:
        """Replace the worker in ``slot`` and put placement ``index`` first in line again."""
        attempts[index] += 1
        if attempts[index] > self.max_retries:
            raise BackendError(f"placement #{index} of the batch failed on {attempts[index]} Ray workers "
                               f"(the last {why}); max_retries={self.max_retries}")
        self.retries += 1
        self.replaced += 1
        self._start(slot)
        todo.appendleft(index)
