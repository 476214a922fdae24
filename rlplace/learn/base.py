"""The contract between learned placement policies, the RL algorithms and the trainer.

A *policy* is a ``torch.nn.Module`` built for one environment (one graph, one cluster). It
proposes whole placements: one device per unit of the environment (``env.unwrapped.num_units``
units, ``env.unwrapped.num_devices`` devices), i.e. one action of the ``one_shot`` mode. An
*algorithm* (REINFORCE, PPO) turns a ``Batch`` of sampled placements and their rewards into
gradient steps on the policy. The *trainer* samples from the policy, has the environment
evaluate the placements (through the Gymnasium API), builds the Batch and calls the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import torch

from rlplace.errors import ConfigError


@dataclass
class Sample:
    """k placements drawn from a policy.

    ``actions[j, u]`` is the device of unit u in placement j. ``log_probs[j]`` is the log
    probability of the whole placement j under the policy as sampled (the sum over all its
    decisions, grouping decisions included), with its graph, so REINFORCE can differentiate it.
    ``extras`` holds what ``log_prob`` needs to score the same placements again (for example the
    Hierarchical Planner's sampled grouping), one leading dimension of size k per tensor.
    ``unit_log_probs[j, u]``, given by policies that decide unit by unit, is the log probability
    of unit u's decision in placement j (given the decisions before it); it sums to
    ``log_probs[j]``. PPO clips a ratio per decision when it is given, per placement otherwise."""

    actions: torch.Tensor
    log_probs: torch.Tensor
    entropy: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    unit_log_probs: torch.Tensor | None = None


@runtime_checkable
class Policy(Protocol):
    def sample(self, k: int, generator: torch.Generator | None = None) -> Sample:
        """Draw k placements (with gradients through ``log_probs`` and ``entropy``)."""

    def log_prob(self, actions: torch.Tensor, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log probability [k], entropy [k]) of given placements under the current weights:
        PPO's re-evaluation and behaviour cloning use it. A policy whose samples carry
        ``unit_log_probs`` also takes ``per_unit=True`` and then returns both per unit, [k, U]
        (entropy of each decision's distribution), summing over U to the default's."""

    def greedy(self) -> torch.Tensor:
        """The most likely placement, [num_units] device indices."""

    def extras_for(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """The ``extras`` with which ``log_prob`` scores placements ``actions`` [k, U] the policy
        did not sample (behaviour cloning of a heuristic's placement): a latent choice that
        produces them (the Hierarchical Planner's grouping); ``{}`` for a policy without one."""


@dataclass
class Batch:
    """Sampled placements with what the environment said about them."""

    sample: Sample
    rewards: torch.Tensor      # [k] rewards from the environment (penalty when invalid)
    step_times: torch.Tensor   # [k] seconds
    valid: torch.Tensor        # [k] bool: neither out of memory nor over the time limit


@runtime_checkable
class Algorithm(Protocol):
    differentiates_samples: bool
    """Whether ``update`` differentiates ``batch.sample.log_probs`` (REINFORCE); if not (PPO
    re-scores the actions), the trainer samples without autograd."""

    def update(self, policy: Policy, batch: Batch) -> dict[str, float]:
        """One update from samples to gradient step(s); returns statistics to log (loss,
        entropy, baseline, ...)."""

    def seed_baseline(self, reward: float) -> None:
        """Start the reward baseline at ``reward`` (a warm start's first sample)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (optimizer, baseline, counters)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def registered_module(registry: dict[str, str], name: str, what: str) -> ModuleType:
    """The module ``registry[name]`` (imported on first use, so heavy dependencies load only
    when asked for); ConfigError naming the known names when ``name`` is not registered."""
    if name not in registry:
        raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(sorted(registry))})")
    return import_module(registry[name])
