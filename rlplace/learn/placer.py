"""A trained policy as a placer, so that learned and algorithmic placers are compared the same
way: ``rlplace-compare placers=[m_etf,mars:outputs/run/checkpoint.pt]``.

The placer rebuilds the policy that ``rlplace-train`` saved in its ``checkpoint.pt`` (agent,
policy options and environment options are stored there), for the graph and cluster it is
asked to place, loads the trained parameters, and returns the policy's most likely placement
(``Policy.greedy``). Placing the graph and cluster it was trained on, it also keeps what its
training did there: ``training_curve`` (the best valid step time after each evaluated
placement) and ``first_placement`` (the first placement evaluated; where a search beside it
starts). Every parameter must fit: a policy trained on another graph fits only when
none of its parameters depend on the graph (fine-tune it there with ``init_checkpoint``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rlplace.learn.checkpoint import check_fits, problem_identity, read_checkpoint
from rlplace.learn.policies import POLICIES, make_policy
from rlplace.learn.train import copy_parameters
from rlplace.backends import SimBackend
from rlplace.cluster import Cluster
from rlplace.errors import CheckpointError, ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placed, Placement


class PolicyPlacer:
    """``agent:checkpoint`` as a placer; ``place`` is deterministic (the greedy placement)."""

    def __init__(self, agent: str, checkpoint: str | Path):
        if agent not in POLICIES:
            raise ConfigError(f"placer {agent}:{checkpoint}: unknown agent {agent!r} (known: {', '.join(POLICIES)})")
        self.agent, self.checkpoint = agent, Path(checkpoint).expanduser()
        self.state = read_checkpoint(self.checkpoint)
        if self.state.agent != agent:
            raise CheckpointError(f"placer {agent}:{checkpoint}: the checkpoint holds a "
                                  f"{self.state.agent!r} policy, not {agent!r}")
        self.training_curve: list[float] | None = None
        self.first_placement: Placement | None = None

    @classmethod
    def from_spec(cls, spec: str) -> PolicyPlacer:
        agent, _, path = spec.partition(":")
        return cls(agent, path)

    def trained_on(self, graph: OpGraph, cluster: Cluster) -> bool:
        return self.state.problem == problem_identity(graph, cluster)

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        from rlplace.learn.env import PlacementEnv

        env = PlacementEnv(graph, cluster, SimBackend(), **self.state.env)
        options = dict(self.state.policy_options)
        if "pretrain" in options:
            options["pretrain"] = False  # the trained encoder weights are loaded below
        policy = make_policy(self.agent, env, **options)
        check_fits(self.checkpoint, self.state.policy, dict(policy.named_parameters()),
                   f"a {self.agent} policy for graph {graph.name}: trained on another graph or cluster?",
                   extra_ok=True)
        copy_parameters(policy, self.state.policy)
        if self.trained_on(graph, cluster):
            progress = self.state.graph_progress()
            self.training_curve = np.minimum.accumulate(
                [t if ok else math.inf for t, ok in zip(progress["step_times"], progress["valid"])]).tolist()
            first = progress.get("first_actions")
            self.first_placement = None if first is None else env.units.expand(np.asarray(first))
        return Placed(env.units.expand(policy.greedy().cpu().numpy()), curve=self.training_curve)
