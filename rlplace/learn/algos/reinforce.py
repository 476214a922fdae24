"""REINFORCE with an exponential-moving-average baseline, as the Hierarchical Planner trains
(Mirhoseini et al. 2018, §2 "Training with REINFORCE" and §3 "Training Details").

One update, top to bottom:
  1. keep the samples to learn from: all of them for the first ``valid_only_after`` updates,
     then only valid placements (§3: "we update the policy only for valid placements after
     the first 500 steps"); with none left, the update is skipped;
  2. advantage A_j = R_j - B, with B the moving average of past rewards (the first batch's
     mean when nothing seeded it);
  3. loss = -mean_j A_j · log p(placement_j) - entropy_coef · mean_j H_j. For the Hierarchical
     Planner log p = log p(grouping) + log p(devices | grouping), which gives the gradients of
     Eqs. 4 and 6 for the Grouper and the Placer at once;
  4. Adam step on the gradient clipped to global norm ``max_grad_norm``, at the learning rate
     of ``learning_rate(update)``: fixed, then decayed in steps as in the authors' code;
  5. B <- decay · B + (1 - decay) · mean_j R_j over the kept samples.
"""

from __future__ import annotations

from typing import Any

import torch

from rlplace.learn.base import Batch, Policy
from rlplace.learn.configs import ReinforceConfig
from rlplace.options import checked


class Reinforce:
    """Implements ``rlplace.learn.base.Algorithm``."""

    differentiates_samples = True

    def __init__(self, policy: Policy, config: ReinforceConfig | None = None):
        self.config = config or ReinforceConfig()
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.config.lr)
        self.baseline: float | None = None
        self.updates = 0

    def seed_baseline(self, reward: float) -> None:
        """Start the baseline at a known reward (a heuristic's placement as the first sample)."""
        self.baseline = float(reward)

    def update(self, policy: Policy, batch: Batch) -> dict[str, float]:
        c = self.config
        keep = torch.ones_like(batch.valid) if c.valid_only_after is None or self.updates < c.valid_only_after \
            else batch.valid
        self.updates += 1
        if not keep.any():
            return {"loss": float("nan"), "baseline": _nan_if_none(self.baseline), "kept": 0.0}

        rewards = batch.rewards[keep].to(torch.float32)
        baseline = float(rewards.mean()) if self.baseline is None else self.baseline
        log_probs, entropy = batch.sample.log_probs, batch.sample.entropy
        keep = keep.to(log_probs.device)  # the environment's tensors are on the CPU, the policy's maybe not
        advantage = (rewards - baseline).to(log_probs.device)
        log_probs, entropy = log_probs[keep], entropy[keep]
        loss = -(advantage * log_probs).mean() - c.entropy_coef * entropy.mean()

        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(c, self.updates - 1)
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
        self.optimizer.step()

        self.baseline = c.baseline_decay * baseline + (1 - c.baseline_decay) * float(rewards.mean())
        return {"loss": loss.item(), "baseline": self.baseline, "advantage": float(advantage.mean()),
                "grad_norm": float(grad_norm), "kept": float(keep.sum()), "lr": learning_rate(c, self.updates - 1)}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "baseline": self.baseline, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline, self.updates = state["baseline"], state["updates"]


def learning_rate(config: ReinforceConfig, update: int) -> float:
    """The learning rate of update ``update`` (0-based): ``lr`` until ``lr_decay_start``, then
    ``lr · lr_decay^floor((update - lr_decay_start) / lr_decay_every)`` (TF exponential_decay,
    staircase, as the HP authors' code uses it)."""
    if update < config.lr_decay_start:
        return config.lr
    return config.lr * config.lr_decay ** ((update - config.lr_decay_start) // config.lr_decay_every)


def _nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else value


def build(policy: Policy, **options) -> Reinforce:
    return Reinforce(policy, ReinforceConfig(**checked(ReinforceConfig, options, "agent.algorithm.options")))
