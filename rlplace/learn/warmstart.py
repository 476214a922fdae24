"""Warm starts of a learned placer from an algorithmic one (``warm_start.placer=heft``, or
m_etf, m_sct, celeritas, ..., or ``best``: the heuristic whose placement simulates fastest on
the problem), written against the ``Policy`` and ``Algorithm`` protocols so
they serve every agent:

(a) behaviour cloning: before RL, maximise the policy's log probability of the heuristic's
    placement (supervised pre-training) until its greedy placement reproduces it; for a family
    of graphs with shared weights, of every graph's placement at once (``behaviour_clone_jointly``);
(b) first sample: the heuristic's placement is evaluated first, so the best-so-far starts there
    and the algorithm's reward baseline starts at its reward.

A policy with latent choices (the Hierarchical Planner's grouping) scores a placement it did not
sample through the extras ``Policy.extras_for(actions)`` gives; a policy without one gives none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from rlplace.learn.base import Algorithm, Policy
from rlplace.learn.configs import WarmStartConfig
from rlplace.learn.device import device_of
from rlplace.errors import ConfigError
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS, evaluate_rows


@dataclass
class HeuristicStart:
    """The heuristic a run warm-starts from: its name, its placement of the problem, that
    placement as an action (one device per unit) and its simulated step time and OOM."""

    placer: str
    placement: Placement
    actions: torch.Tensor
    step_time: float
    oom: bool

    def as_dict(self) -> dict[str, Any]:
        return {"warm_start_placer": self.placer, "warm_start_step_time": self.step_time,
                "warm_start_oom": self.oom}


def heuristic_start(problem, placer: str, seed: int = 0, **options) -> HeuristicStart:
    """The heuristic's placement of ``problem`` (a PlacementEnv) as an action: one device per
    unit (the device of the unit's first op), and the op placement that action stands for,
    simulated. ``placer="best"``: of the placers in ``HEURISTICS``, the one whose action has
    the best simulated (memory overflow, step time), ties to the earlier one."""
    if placer == "best" and options:
        raise ConfigError(f"warm_start.placer=best takes no placer_options, got {sorted(options)}")
    names = list(HEURISTICS) if placer == "best" else [placer]
    found = []
    for name in names:
        placement = make_placer(name, seed=seed, **options).place(problem.graph, problem.cluster)
        actions = np.asarray(placement.device_of)[problem.units.first_ops()]
        found.append((problem.units.expand(actions), torch.as_tensor(actions, dtype=torch.long)))
    overflow, step = evaluate_rows(problem.graph, problem.cluster, np.stack([p.device_of for p, _ in found]))
    j = int(np.lexsort((step, overflow))[0])
    return HeuristicStart(names[j], *found[j], float(step[j]), bool(overflow[j] > 0))


def behaviour_clone(policy: Policy, actions: torch.Tensor, config: WarmStartConfig) -> dict[str, float]:
    """Supervised pre-training on one placement ``actions`` [U]: Adam on -log p(actions)/U with
    the gradient clipped to norm 1, until the greedy placement agrees on
    ``bc_target_accuracy`` of the units or ``bc_steps`` steps are done (on the policy's device)."""
    return behaviour_clone_jointly([(policy, actions)], config)


def behaviour_clone_jointly(targets: Sequence[tuple[Policy, torch.Tensor]],
                            config: WarmStartConfig) -> dict[str, float]:
    """``behaviour_clone`` of several problems' policies that share their weights (a family of
    graphs, ``rlplace.learn.train``), each towards its own placement: every Adam step is on the
    sum over the problems of -log p(actions)/U, so no problem's clone undoes another's (as
    cloning them one after another would); it stops once every greedy placement agrees on
    ``bc_target_accuracy`` of its units. Returns the loss summed over the problems and the least
    accuracy among them."""
    targets = [(policy, actions.to(device_of(policy))) for policy, actions in targets]
    extras = [policy.extras_for(actions.unsqueeze(0)) for policy, actions in targets]
    parameters = list({id(p): p for policy, _ in targets for p in policy.parameters()}.values())
    optimizer = torch.optim.Adam(parameters, lr=config.bc_lr)
    accuracy, loss, step = least_agreement(targets), float("nan"), 0
    while step < config.bc_steps and accuracy < config.bc_target_accuracy:
        loss_t = sum(-policy.log_prob(actions.unsqueeze(0), e)[0].mean() / actions.numel()
                     for (policy, actions), e in zip(targets, extras))
        optimizer.zero_grad()
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        step, loss = step + 1, loss_t.item()
        if step % config.bc_check_every == 0 or step == config.bc_steps:
            accuracy = least_agreement(targets)
    return {"bc_steps": step, "bc_loss": loss, "bc_accuracy": accuracy}


def least_agreement(targets: Sequence[tuple[Policy, torch.Tensor]]) -> float:
    return min(agreement(policy, actions) for policy, actions in targets)


def agreement(policy: Policy, actions: torch.Tensor) -> float:
    """Share of units on which the policy's greedy placement equals ``actions``."""
    greedy = policy.greedy()
    return float((greedy == actions.to(greedy.device)).float().mean())


def seed_with_first_sample(problem, algorithm: Algorithm, placement: Placement):
    """Evaluate the heuristic placement as the first sample; the algorithm's baseline starts at
    its reward (every ``Algorithm`` has ``seed_baseline``). Returns the backend's result and the
    reward."""
    result = problem.evaluate(placement)
    reward = problem.reward_of(result)
    algorithm.seed_baseline(reward)
    return result, reward
