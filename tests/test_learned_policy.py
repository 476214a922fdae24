"""The ``learned`` placer's network as a policy of the training loop (``agent=learned``): its
greedy placement is the placer's, a sample's probability is scored again exactly, and it
fine-tunes, resumes and places from a checkpoint like the other agents."""

import numpy as np
import pytest
import torch

from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.errors import ConfigError
from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.configs import TrainConfig, WarmStartConfig
from rlplace.learn.env import PlacementEnv
from rlplace.learn.placer import PolicyPlacer
from rlplace.learn.policies import make_policy
from rlplace.learn.train import train
from rlplace.placers.learned import WEIGHTS, ListSchedule, best_heuristic, load_weights, scores
from rlplace.zoo import layered
from rlplace.zoo.synthetic import training_step

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["layered", "training_step"])
def problem(request):
    graph = layered(60, seed=3) if request.param == "layered" else training_step(seed=1, layers=6)
    return graph, load_preset("mars_p100")


def config(**overrides) -> TrainConfig:
    return TrainConfig(**{"agent": "learned", "algorithm": "ppo", "samples": 4, "budget_placements": 16,
                          "checkpoint_every": 1, "progress": False, "plots": False, "torch_device": "cpu",
                          **overrides})


def test_the_greedy_placement_is_the_placers(problem):
    graph, cluster = problem
    env = PlacementEnv(graph, cluster, mode="one_shot")
    policy = make_policy("learned", env)
    placed = env.units.expand(policy.greedy().numpy())
    plan = ListSchedule(graph, cluster, best_heuristic(graph, cluster))
    assert np.array_equal(placed.device_of, plan.run(load_weights(WEIGHTS), cluster.memory).ops.device)


def test_a_sample_is_a_gumbel_max_draw_and_is_scored_again_exactly(problem):
    """Each recorded decision took the allowed device with the best score plus its noise, so
    its probability is the softmax of the scores over the allowed devices; scoring the recorded
    rows again gives the sample's log probability, with gradients to every weight."""
    graph, cluster = problem
    env = PlacementEnv(graph, cluster, mode="one_shot")
    policy = make_policy("learned", env)
    sample = policy.sample(3, torch.Generator().manual_seed(0))
    assert sample.actions.shape == (3, env.num_units) and sample.unit_log_probs.shape == (3, graph.num_ops)
    e = sample.extras
    s = scores(e["features"].numpy(), policy.network())           # the placer's own scoring, in numpy
    s[~e["allowed"].numpy()] = -np.inf
    literal = s - np.logaddexp.reduce(s, axis=-1, keepdims=True)
    chosen = np.take_along_axis(literal, e["chosen"].numpy()[..., None], -1)[..., 0]
    np.testing.assert_allclose(sample.unit_log_probs.detach().numpy(), chosen, atol=1e-9)
    log_probs, entropy = policy.log_prob(sample.actions, sample.extras)
    torch.testing.assert_close(log_probs, sample.log_probs)
    log_probs.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in policy.parameters())
    assert bool((entropy >= 0).all())
    again = policy.sample(3, torch.Generator().manual_seed(0))
    assert torch.equal(again.actions, sample.actions)


def test_fine_tuning_resumes_exactly_and_places_from_its_checkpoint(problem, tmp_path):
    graph, cluster = problem
    whole = train(graph, cluster, SimBackend(), config(), tmp_path / "whole")
    train(graph, cluster, SimBackend(), config(stop_after_updates=2), tmp_path / "cut")
    resumed = train(graph, cluster, SimBackend(), config(resume=True), tmp_path / "cut")
    assert resumed["best_step_time"] == whole["best_step_time"]
    a, b = (read_checkpoint(tmp_path / d / "checkpoint.pt") for d in ("whole", "cut"))
    assert a.graph_progress()["step_times"] == b.graph_progress()["step_times"]
    assert all(torch.equal(a.policy[k], b.policy[k]) for k in a.policy)
    start = make_policy("learned", PlacementEnv(graph, cluster, mode="one_shot"))
    assert any(not torch.equal(a.policy[k], v) for k, v in start.state_dict().items())   # it trained
    placer = PolicyPlacer("learned", tmp_path / "whole" / "checkpoint.pt")
    placer.place(graph, cluster).validate(graph, cluster)
    unseen = layered(40, seed=9, name="unseen")
    placer.place(unseen, cluster).validate(unseen, cluster)   # one set of weights places any graph


def test_a_family_shares_the_network(tmp_path):
    cluster = load_preset("mars_p100")
    family = [layered(30, seed=1, name="a"), training_step(seed=2, layers=4)]
    summary = train(family, cluster, SimBackend(), config(budget_placements=16), tmp_path)
    assert [g["evaluated"] for g in summary["graphs"].values()] == [8, 8]


def test_refusals(problem, tmp_path):
    graph, cluster = problem
    with pytest.raises(ConfigError, match="behaviour_cloning"):
        config(warm_start=WarmStartConfig(placer="m_etf", behaviour_cloning=True))
    with pytest.raises(ConfigError, match="weights"):
        train(graph, cluster, SimBackend(), config(policy={"weights": str(tmp_path / "none.npz")}), tmp_path)
    with pytest.raises(ConfigError, match="colocation units"):
        make_policy("learned", PlacementEnv(graph, cluster, mode="one_shot", grouping=np.zeros(graph.num_ops, int)))
