"""RL algorithms (``rlplace.learn.base.Algorithm``), by name. A module listed here provides
``build(policy, **options)``; ``make_algorithm`` imports it on first use."""

from __future__ import annotations

from rlplace.learn.base import Algorithm, Policy, registered_module

ALGORITHMS = {"reinforce": "rlplace.learn.algos.reinforce", "ppo": "rlplace.learn.algos.ppo"}


def make_algorithm(name: str, policy: Policy, **options) -> Algorithm:
    return registered_module(ALGORITHMS, name, "algorithm").build(policy, **options)
