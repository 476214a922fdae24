"""Placement policies (``rlplace.learn.base.Policy``), by agent name. A module listed here
provides ``build(env, device, **options)``, the policy for one environment on a torch device;
``make_policy`` imports it on first use and seeds the weight initialisation (made on the CPU, so
a seed gives the same initial weights on every device)."""

from __future__ import annotations

import torch

from rlplace.learn.base import Policy, registered_module

POLICIES = {"hierarchical": "rlplace.learn.policies.hierarchical", "mars": "rlplace.learn.policies.mars",
            "learned": "rlplace.learn.policies.learned"}


def make_policy(name: str, env, seed: int = 0, device: str | torch.device = "cpu", **options) -> Policy:
    module = registered_module(POLICIES, name, "agent")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return module.build(env, torch.device(device), **options)
