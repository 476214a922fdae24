"""The ``learned`` placer's network as a policy of the training loop (``agent=learned``), so that
it is fine-tuned by PPO or REINFORCE on one graph or a family like the other agents.

The placer (``rlplace.placers.learned``) runs the step as the simulator does and decides each op's
device by the best score of a small network over per-device feature rows. As a policy, a sample
adds Gumbel noise to the scores (Gumbel-max: each decision is a draw from the softmax of the
scores over the devices the op may take), and the pass records what each decision saw (its
feature rows, the devices allowed, the device drawn). Those rows depend on the earlier decisions
only, not on the weights, so scoring them again under new weights gives the exact probability of
the same placement: a sample's ``extras`` hold them, PPO clips a ratio per decision, and
REINFORCE differentiates the same sum. The greedy placement is the placer's own (no noise).

Decisions are per op (a colocation group's later ops have one device allowed, and a probability
of 1), so the environment's units must be the colocation units (its default grouping). The weights
start from the shipped ``learned.npz`` (or ``weights=``), so training fine-tunes the pretrained
placer; a checkpoint of this agent places as ``learned:<run>/checkpoint.pt``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlplace.errors import ConfigError
from rlplace.learn.base import Sample
from rlplace.learn.configs import LearnedConfig
from rlplace.learn.device import uniform
from rlplace.options import checked
from rlplace.placers.learned import WEIGHTS, ListSchedule, best_heuristic, load_weights


class LearnedPolicy(nn.Module):
    """The list scheduler with a sampled device choice; implements ``rlplace.learn.base.Policy``."""

    def __init__(self, env, network: tuple[np.ndarray, ...]):
        super().__init__()
        base = env.unwrapped
        self.plan = ListSchedule(base.graph, base.cluster, best_heuristic(base.graph, base.cluster))
        if base.units.num_groups != self.plan.units.num_groups:
            raise ConfigError(f"agent=learned decides one op at a time: the environment's units must be the "
                              f"colocation units ({self.plan.units.num_groups}), not a grouping of "
                              f"{base.units.num_groups}")
        self.budget = base.cluster.memory.astype(np.int64)
        self.num_units, self.num_devices = base.units.num_groups, base.num_devices
        self.unit_ops = base.units.first_ops()   # the op whose device is each unit's
        w1, b1, w2, b2, w3, b3 = network
        self.layers = nn.ModuleList([nn.Linear(*w1.shape), nn.Linear(*w2.shape), nn.Linear(w3.shape[0], 1)])
        self.double()
        with torch.no_grad():
            for layer, (w, b) in zip(self.layers, ((w1, b1), (w2, b2), (w3[:, None], b3))):
                layer.weight.copy_(torch.as_tensor(w.T))
                layer.bias.copy_(torch.as_tensor(b))

    def network(self) -> tuple[np.ndarray, ...]:
        """The weights as ``rlplace.placers.learned`` reads them (w1 b1 w2 b2 w3 b3)."""
        arrays = [a.detach().cpu().numpy() for layer in self.layers for a in (layer.weight.T, layer.bias)]
        arrays[4] = np.ascontiguousarray(arrays[4][:, 0])
        return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in arrays)

    def scores(self, rows: torch.Tensor) -> torch.Tensor:
        """The network's score of every feature row [..., NUM_FEATURES] -> [...]
        (``rlplace.placers.learned.score``)."""
        h = torch.tanh(self.layers[0](rows))
        h = torch.tanh(self.layers[1](h))
        return self.layers[2](h)[..., 0]

    def _pass(self, network: tuple[np.ndarray, ...], noise: np.ndarray | None) -> tuple[np.ndarray, object]:
        """One pass of the list scheduler with ``network``: unit devices and the recorded decisions."""
        m = self.plan.run(network, self.budget, noise=noise, record=True)
        return m.ops.device[self.unit_ops].copy(), self.plan.decisions

    def _decision_log_probs(self, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per decision [k, n]: the log probability of the device drawn, and the entropy of the
        softmax over the devices allowed."""
        allowed = extras["allowed"]
        logits = self.scores(extras["features"]).masked_fill(~allowed, float("-inf"))
        log_p = torch.log_softmax(logits, dim=-1)
        chosen = log_p.gather(-1, extras["chosen"][..., None])[..., 0]
        entropy = -(log_p.exp() * log_p.masked_fill(~allowed, 0.0)).sum(dim=-1)
        return chosen, entropy

    # ------------------------------------------------------------------------ Policy protocol
    def sample(self, k: int, generator: torch.Generator | None = None) -> Sample:
        n, D = self.plan.graph.num_ops, self.num_devices
        device = self.layers[0].weight.device
        u = uniform((k, n, D), generator, device).double().clamp_min(1e-20)
        gumbel = (-torch.log(-torch.log(u))).cpu().numpy()
        network = self.network()
        actions, features, allowed, chosen = [], [], [], []
        for j in range(k):
            devices, decisions = self._pass(network, gumbel[j])
            actions.append(devices)
            features.append(decisions.features)
            allowed.append(decisions.allowed)
            chosen.append(decisions.chosen)
        extras = {"features": torch.as_tensor(np.stack(features), device=device),
                  "allowed": torch.as_tensor(np.stack(allowed), device=device),
                  "chosen": torch.as_tensor(np.stack(chosen), device=device)}
        log_probs, entropy = self._decision_log_probs(extras)
        return Sample(torch.as_tensor(np.stack(actions), device=device), log_probs.sum(dim=1), entropy.sum(dim=1),
                      extras, unit_log_probs=log_probs)

    def log_prob(self, actions: torch.Tensor, extras: dict[str, torch.Tensor],
                 per_unit: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if "features" not in extras:
            raise ConfigError("agent=learned scores only placements it sampled (behaviour cloning is for "
                              "hierarchical and mars; this agent starts from the pretrained weights)")
        log_probs, entropy = self._decision_log_probs(extras)
        return (log_probs, entropy) if per_unit else (log_probs.sum(dim=1), entropy.sum(dim=1))

    @torch.no_grad()
    def greedy(self) -> torch.Tensor:
        return torch.as_tensor(self._pass(self.network(), None)[0], device=self.layers[0].weight.device)

    def extras_for(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}  # log_prob needs the feature rows a sample recorded, so it refuses to clone


def build(env, device: torch.device, **options) -> LearnedPolicy:
    """The policy for a PlacementEnv on ``device``, its weights read from ``weights`` (the shipped
    ones by default)."""
    config = LearnedConfig(**checked(LearnedConfig, options, "agent.policy"))
    return LearnedPolicy(env, load_weights(config.weights or str(WEIGHTS))).to(device)
