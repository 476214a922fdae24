"""Placement policies (``rlplace.agents.base.Policy``), by agent name. A module listed here
provides ``build(env, **options)``, the policy for one environment; ``make_policy`` imports it
on first use and seeds the weight initialisation."""

from __future__ import annotations

from importlib import import_module

import torch

from rlplace.agents.base import Policy
from rlplace.errors import ConfigError

POLICIES = {"hierarchical": "rlplace.agents.policies.hierarchical", "mars": "rlplace.agents.policies.mars"}


def make_policy(name: str, env, seed: int = 0, **options) -> Policy:
    if name not in POLICIES:
        raise ConfigError(f"unknown agent {name!r} (known: {', '.join(sorted(POLICIES))})")
    try:
        module = import_module(POLICIES[name])
    except ModuleNotFoundError as exc:
        raise ConfigError(f"agent {name!r} is not available in this version ({exc})") from None
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return module.build(env, **options)
