"""Backends: what turns a placement into a StepResult. ``Backend`` is the contract every caller
relies on; a backend subclasses it and implements ``evaluate``.

``sim`` is the embedded execution simulator (``rlplace.sim``); ``tf`` measures on real
TensorFlow (``rlplace.tf.backend.TFBackend``) and ``torch`` on real PyTorch
(``rlplace.torch_backend.TorchBackend``), each imported only when asked for, so the core never
loads TensorFlow or PyTorch otherwise. ``make_backend(name, **options)`` builds one by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np
from cachetools import LRUCache

from rlplace.cluster import Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import checked
from rlplace.placement import Placement
from rlplace.sim import BatchResult, StepResult, simulate, simulate_many


class Backend:
    """What callers of a backend use: the placers, the environment, the training loop, the apps.
    ``evaluate`` is the backend's own; the others have defaults that a backend replaces where it
    can do better (concurrent batches, a cache, workers to stop)."""

    simulated: ClassVar[bool] = False  # accounting: time spent here is simulation, not measurement

    def evaluate(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        raise NotImplementedError

    def evaluate_batch(self, graph: OpGraph, cluster: Cluster, placements: Sequence[Placement]) -> list[StepResult]:
        """The results of several placements, in order (``RayBackend`` runs them concurrently)."""
        return [self.evaluate(graph, cluster, p) for p in placements]

    def clear_cache(self) -> None:
        """Forget remembered results, so that the next evaluation measures again."""

    def close(self) -> None:
        """Stop the workers or processes the backend started (a later evaluation starts them again)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class MeasuringBackend(Backend):
    """A backend that runs each placement for real (``tf``, ``torch``): its options ``warmup``,
    ``steps``, ``step_time_limit`` and ``cache_size`` checked alike (``check_measuring``), and
    ``evaluate`` answering a placement already measured on a cluster of the same memory from an
    LRU cache (``cache_hits``), measuring the others with ``measure`` (``measurements``)."""

    name: ClassVar[str]
    warmup: int
    steps: int
    step_time_limit: float | None
    cache_size: int
    measurements: int
    cache_hits: int

    def check_measuring(self) -> None:
        """ConfigError for a bad ``warmup``, ``steps`` or ``step_time_limit``; starts the cache."""
        if self.warmup < 0 or self.steps < 1:
            raise ConfigError(f"backend {self.name}: need warmup >= 0 and steps >= 1, got {self.warmup} and {self.steps}")
        if self.step_time_limit is not None and not self.step_time_limit > 0:
            raise ConfigError(f"backend {self.name}: step_time_limit must be > 0 or null, got {self.step_time_limit!r}")
        self._cache: LRUCache[tuple, StepResult] = LRUCache(maxsize=max(self.cache_size, 1))

    def evaluate(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        placement = placement if isinstance(placement, Placement) else Placement(placement)
        placement.validate(graph, cluster)
        key = (placement, tuple(cluster.memory.tolist()))
        if key in self._cache:
            self.cache_hits += 1
            return self._cache[key]
        result = self.measure(graph, cluster, placement)
        self.measurements += 1
        self._cache[key] = result
        return result

    def measure(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        """Run ``placement`` (valid for ``graph`` and ``cluster``) and say what happened."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Forget measured placements (to measure them again)."""
        self._cache.clear()


def as_backend(backend, key: str = "backend") -> Backend:
    """``backend`` if it is a Backend; a ConfigError naming ``key`` otherwise."""
    if not isinstance(backend, Backend):
        raise ConfigError(f"{key} must be a Backend (a subclass of rlplace.backends.Backend), "
                          f"got {type(backend).__name__}")
    return backend


@dataclass
class SimBackend(Backend):
    """The execution simulator. Like TensorFlow, it refuses a placement that splits a
    colocation group (PlacementError). ``trace=True`` keeps the schedule in every result."""

    trace: bool = False
    simulated: ClassVar[bool] = True  # accounting: time spent here is simulation, not measurement

    def evaluate(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        placement = placement if isinstance(placement, Placement) else Placement(placement)
        placement.validate(graph, cluster)
        return simulate(graph, cluster, placement, trace=self.trace)

    def evaluate_many(self, graph: OpGraph, cluster: Cluster, placements) -> BatchResult:
        """Every row of ``placements`` (placements × ops) in one ``simulate_many`` call, with
        the checks of ``evaluate`` (no schedules); what the search placers use."""
        rows = np.asarray(placements)
        groups = list(graph.colocation_groups.values())
        if groups and rows.ndim == 2 and len(rows):
            members = np.concatenate(groups)
            leaders = np.repeat([ops[0] for ops in groups], [len(ops) for ops in groups])
            split = np.flatnonzero(np.any(rows[:, members] != rows[:, leaders], axis=1))
            if len(split):
                Placement(rows[split[0]]).validate(graph, cluster)
        return simulate_many(graph, cluster, rows)


def _tf_backend() -> type:
    from rlplace.tf.backend import TFBackend  # imports no TensorFlow

    return TFBackend


def _torch_backend() -> type:
    from rlplace.torch_backend import TorchBackend

    return TorchBackend


_BACKENDS: dict[str, Callable[[], type]] = {"sim": lambda: SimBackend, "tf": _tf_backend, "torch": _torch_backend}


def backend_class(name: str) -> type:
    """The class of backend ``name``; its constructor's keywords are its options."""
    if name not in _BACKENDS:
        raise ConfigError(f"unknown backend {name!r} (known: {', '.join(sorted(_BACKENDS))})")
    return _BACKENDS[name]()


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def make_backend(name: str, **options) -> Backend:
    cls = backend_class(name)
    return cls(**checked(cls, options, f"backend {name!r}"))
