"""RL algorithms (``rlplace.agents.base.Algorithm``), by name. A module listed here provides
``build(policy, **options)``; ``make_algorithm`` imports it on first use."""

from __future__ import annotations

from rlplace.agents.base import Algorithm, Policy, registered_module

ALGORITHMS = {"reinforce": "rlplace.agents.algos.reinforce", "ppo": "rlplace.agents.algos.ppo"}


def make_algorithm(name: str, policy: Policy, **options) -> Algorithm:
    return registered_module(ALGORITHMS, name, "algorithm").build(policy, **options)
