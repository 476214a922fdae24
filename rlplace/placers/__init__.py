"""Placers: anything with ``place(graph, cluster) -> Placement``, registered by name.

``make_placer("random", seed=3)`` builds one; ``available_placers()`` lists the names. A placer
that knows more about its placement than the devices returns a ``Placed`` (a Placement with
``nodes_placed``, its own ``schedule`` and peaks, ``fits``, a search's ``curve`` and record:
``rlplace.placement.Placed``); callers read those there, never from the placer.
"""

from __future__ import annotations

import inspect
from typing import Callable, Protocol, runtime_checkable

from rlplace.cluster import Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import SEED, checked
from rlplace.placement import Placement


@runtime_checkable
class Placer(Protocol):
    def place(self, graph: OpGraph, cluster: Cluster) -> Placement: ...


_REGISTRY: dict[str, Callable[..., Placer]] = {}


def register(name: str):
    """Class decorator: make a placer available under ``name``."""

    def deco(factory):
        if name in _REGISTRY:
            raise ValueError(f"placer {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def available_placers() -> list[str]:
    return sorted(_REGISTRY)


def make_placer(name: str, seed: int | None = None, backend=None, **options) -> Placer:
    """The placer registered as ``name``, built with ``options``. ``seed`` and ``backend`` (a
    Backend, for the search placers that evaluate candidates) go to placers that take them
    (unless ``options`` sets them) and are ignored by the others."""
    if name not in _REGISTRY:
        raise ConfigError(f"unknown placer {name!r} (known: {', '.join(available_placers())})")
    factory = _REGISTRY[name]
    parameters = inspect.signature(factory).parameters
    for key, value in (("seed", seed), ("backend", backend)):
        if value is not None and key in parameters:
            options.setdefault(key, value)
    options = checked(factory, options, f"placer {name!r}")
    if "seed" in options and not SEED.admits(options["seed"]):
        raise SEED.error(f"placer {name!r}: seed", options["seed"])
    return factory(**options)


from rlplace.placers import baselines  # noqa: E402,F401  (registers the baselines)
from rlplace.placers import baechi  # noqa: E402,F401  (registers m_topo, m_etf, m_sct)
from rlplace.placers import celeritas  # noqa: E402,F401  (registers order_place and celeritas)
from rlplace.placers import search  # noqa: E402,F401  (registers local_search and annealing)
from rlplace.placers import learned  # noqa: E402,F401  (registers learned)
from rlplace.placers import critical_path  # noqa: E402,F401  (registers critical_path)
from rlplace.placers import exact  # noqa: E402,F401  (registers exact)

__all__ = ["Placer", "available_placers", "make_placer", "register"]
