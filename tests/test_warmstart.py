"""Warm starts shared by the learned placers: the first sample seeds PPO's baseline as it does
REINFORCE's, and ``warm_start.placer=best`` picks the heuristic that simulates fastest."""

import numpy as np
import pytest
import torch

import rlplace.learn.env  # noqa: F401
from rlplace.learn.algos import make_algorithm
from rlplace.learn.policies.mars import MarsConfig, MarsPolicy
from rlplace.learn.warmstart import heuristic_start, seed_with_first_sample
from rlplace.learn.env import PlacementEnv
from rlplace.errors import ConfigError
from rlplace.placers.search import HEURISTICS
from rlplace.sim import simulate
from rlplace.zoo import fork_join, layered


@pytest.fixture(scope="module")
def env():
    return PlacementEnv(layered(19, width=3, seed=3), "mars_p100")


@pytest.mark.parametrize("algorithm", ["ppo", "reinforce"])
def test_first_sample_seeds_the_baseline(env, algorithm):
    policy = MarsPolicy.from_env(env, MarsConfig(encoder_hidden=16, placer_hidden=24, transformer_heads=2,
                                                 transformer_layers=1, pretrain=False, segment_size=8))
    algo = make_algorithm(algorithm, policy)
    placement = heuristic_start(env, "heft").placement
    _, reward = seed_with_first_sample(env, algo, placement)
    baseline = algo.baseline.value if algorithm == "ppo" else algo.baseline
    assert baseline == pytest.approx(reward)
    if algorithm == "ppo":  # the next advantage is measured against it (Mars Eq. 7)
        later = torch.tensor([reward + 1.0])
        assert algo.baseline.advantages(later).item() == pytest.approx(1.0 - (1 - algo.config.baseline_decay))


def test_best_warm_start_is_the_fastest_heuristic():
    env = PlacementEnv(fork_join(4, 3, compute_time=5e-3, output_bytes=1000), "mars_p100")
    steps = {h: simulate(env.graph, env.cluster, heuristic_start(env, h).placement).step_time for h in HEURISTICS}
    start = heuristic_start(env, "best")
    placement, actions = start.placement, start.actions
    assert simulate(env.graph, env.cluster, placement).step_time == min(steps.values())
    assert min(steps.values()) < steps["single"]  # the choice matters here
    np.testing.assert_array_equal(env.units.expand(actions.numpy()).device_of, placement.device_of)
    with pytest.raises(ConfigError, match="placer=best"):
        heuristic_start(env, "best", device=1)
