"""RL algorithms (``rlplace.agents.base.Algorithm``), by name. A module listed here provides
``build(policy, **options)``; ``make_algorithm`` imports it on first use."""

from __future__ import annotations

from importlib import import_module

from rlplace.agents.base import Algorithm, Policy
from rlplace.errors import ConfigError

ALGORITHMS = {"reinforce": "rlplace.agents.algos.reinforce", "ppo": "rlplace.agents.algos.ppo"}


def make_algorithm(name: str, policy: Policy, **options) -> Algorithm:
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r} (known: {', '.join(sorted(ALGORITHMS))})")
    try:
        module = import_module(ALGORITHMS[name])
    except ModuleNotFoundError as exc:
        raise ConfigError(f"algorithm {name!r} is not available in this version ({exc})") from None
    return module.build(policy, **options)
