"""Training one Mars policy on a family of graphs (rlplace.learn.train): shared weights that
learn, joint behaviour cloning, a checkpoint that resumes exactly and places an unseen graph,
and the refusals."""

import json

import numpy as np
import pytest
import torch
from conftest import gpu_written

from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.configs import PPOConfig, TrainConfig, WarmStartConfig
from rlplace.learn.placer import PolicyPlacer
from rlplace.learn.policies import make_policy
from rlplace.learn.train import CHECKPOINT, share_parameters, train
from rlplace.learn.warmstart import agreement, behaviour_clone_jointly, heuristic_start
from rlplace.backends import SimBackend
from rlplace.learn.env import PlacementEnv
from rlplace.errors import CheckpointError, ConfigError
from rlplace.presets import load_preset
from rlplace.zoo import chain, layered

POLICY = dict(encoder_hidden=8, placer_hidden=16, segment_size=4, type_buckets=8, pretrain=False)


def config(**overrides) -> TrainConfig:
    return TrainConfig(**{"agent": "mars", "algorithm": "ppo", "samples": 4, "policy": POLICY,
                          "budget_placements": 16, "progress": False, "plots": False, **overrides})


@pytest.fixture(scope="module")
def cluster():
    return load_preset("cluster", "mars_p100")


@pytest.fixture(scope="module")
def family():
    return [layered(14, width=3, seed=1, name="a"), layered(10, width=2, seed=2, name="b")]


@pytest.fixture(scope="module")
def trained(family, cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("family")
    return out, train(family, cluster, SimBackend(), config(), out)


def fresh_parameters(graph, cluster) -> dict[str, torch.Tensor]:
    env = PlacementEnv(graph, cluster, mode="one_shot")
    return dict(make_policy("mars", env, seed=0, **POLICY).named_parameters())


def test_training_goes_round_the_family_and_changes_the_shared_weights(trained, family, cluster):
    out, summary = trained
    assert summary["evaluated"] == 16 and summary["updates"] == 4
    assert {name: g["updates"] for name, g in summary["graphs"].items()} == {"a": 2, "b": 2}
    assert all(g["evaluated"] == 8 and np.isfinite(g["best_step_time"]) for g in summary["graphs"].values())
    assert json.loads((out / "results.json").read_text())["graphs"]["b"]["greedy_evaluation"]["step_time"] > 0
    saved = read_checkpoint(out / CHECKPOINT)
    assert saved.problem["family"][1]["graph"] == "b"
    initial = fresh_parameters(family[0], cluster)
    changed = [name for name, p in initial.items() if not torch.equal(p, saved.policy[name])]
    assert len(changed) == len(initial)   # every weight was trained, the encoder's included


def test_shared_parameters_drive_every_graphs_policy(family, cluster):
    """After sharing, a policy built with other weights places like its owner (the LSTM's flat
    weights follow the shared tensors), and a step on the owner moves both."""
    env = PlacementEnv(family[0], cluster, mode="one_shot")
    owner, other = (make_policy("mars", env, seed=s, **POLICY) for s in (0, 1))
    before = other.log_prob(owner.greedy()[None], {})[0]
    share_parameters(other, owner)
    torch.testing.assert_close(other.log_prob(owner.greedy()[None], {})[0], owner.log_prob(owner.greedy()[None], {})[0])
    assert not torch.allclose(before, owner.log_prob(owner.greedy()[None], {})[0])
    with torch.no_grad():
        next(owner.parameters()).add_(1.0)
    assert torch.equal(next(other.parameters()), next(owner.parameters()))


def test_checkpoint_places_an_unseen_graph_and_fine_tunes_there(trained, family, cluster, tmp_path):
    out, _ = trained
    unseen = chain(9, name="unseen")
    placer = PolicyPlacer("mars", out / CHECKPOINT)
    assert not placer.trained_on(family[0], cluster)
    placement = placer.place(unseen, cluster)
    placement.validate(unseen, cluster)
    env = PlacementEnv(unseen, cluster, mode="one_shot")
    fresh = make_policy("mars", env, seed=0, **POLICY)
    fresh.load_state_dict({**fresh.state_dict(), **{k: v for k, v in read_checkpoint(out / CHECKPOINT).policy.items()
                                                     if k not in ("x", "edge_index")}})
    assert np.array_equal(placement.device_of, env.units.expand(fresh.greedy().numpy()))
    tuned = train(unseen, cluster, SimBackend(), config(budget_placements=4, init_checkpoint=str(out / CHECKPOINT)),
                  tmp_path)
    assert tuned["init_tensors_skipped"] == 0 and tuned["init_tensors_copied"] > 0


def test_resume_continues_exactly(family, cluster, tmp_path):
    whole = train(family, cluster, SimBackend(), config(budget_placements=24, order="sample"), tmp_path / "whole")
    stopped = train(family, cluster, SimBackend(),
                    config(budget_placements=24, stop_after_updates=2, checkpoint_every=1, order="sample"),
                    tmp_path / "parts")
    assert stopped["stopped"] and stopped["evaluated"] == 8
    resumed = train(family, cluster, SimBackend(), config(budget_placements=24, resume=True, order="sample"),
                    tmp_path / "parts")
    assert resumed["graphs"] == whole["graphs"]
    a, b = (read_checkpoint(d / CHECKPOINT).policy for d in (tmp_path / "whole", tmp_path / "parts"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(CheckpointError, match="not for graph 'a'"):
        train(family[:1], cluster, SimBackend(), config(resume=True), tmp_path / "parts")


def test_resume_across_devices_reseeds_the_generator(family, cluster, tmp_path):
    """A family's run written on a GPU continues on the CPU with resume_across_devices=true only."""
    train(family, cluster, SimBackend(),
          config(budget_placements=24, stop_after_updates=2, checkpoint_every=1, order="sample"), tmp_path)
    gpu_written(tmp_path / CHECKPOINT)
    with pytest.raises(CheckpointError, match="not a cpu generator"):
        train(family, cluster, SimBackend(), config(budget_placements=24, resume=True, order="sample"), tmp_path)
    resumed = train(family, cluster, SimBackend(),
                    config(budget_placements=24, resume=True, resume_across_devices=True, order="sample"), tmp_path)
    assert resumed["generator_reseeded_at"] == [8] and resumed["evaluated"] == 24
    assert read_checkpoint(tmp_path / CHECKPOINT).progress["generator_reseeded_at"] == [8]


def test_warm_start_seeds_each_graph(family, cluster, tmp_path):
    ws = WarmStartConfig(placer="m_etf", first_sample=True)
    summary = train(family, cluster, SimBackend(), config(budget_placements=10, warm_start=ws), tmp_path)
    for graph in summary["graphs"].values():
        assert graph["warm_start_placer"] and graph["evaluated"] == 1 + 4 * graph["updates"]
        assert graph["best_step_time"] <= graph["heuristic_step_time"]


def test_refusals(family, cluster, tmp_path):
    other_types = layered(12, width=3, seed=3, name="c")
    other_types.op_type = ["Other" if i % 2 else t for i, t in enumerate(other_types.op_type)]
    with pytest.raises(ConfigError, match="encoder.* depends on the graph"):
        train([family[0], other_types], cluster, SimBackend(),
                     config(policy={**POLICY, "type_buckets": 0}), tmp_path)
    with pytest.raises(ConfigError, match="distinct names"):
        train([family[0], family[0]], cluster, SimBackend(), config(), tmp_path)
    with pytest.raises(ConfigError, match="order"):
        config(order="random")


def test_an_update_on_the_second_graph_trains_the_shared_weights(family, cluster, tmp_path):
    """Update 1 is on graph a, update 2 on graph b: the checkpoint's weights move at both."""
    weights = []
    for resume in (False, True):
        train(family, cluster, SimBackend(), config(stop_after_updates=1, checkpoint_every=1, resume=resume),
                     tmp_path)
        weights.append(read_checkpoint(tmp_path / CHECKPOINT).policy)
    trained = [k for k in weights[0] if k not in ("x", "edge_index")]
    assert all(not torch.equal(weights[0][k], weights[1][k]) for k in trained)
    saved = read_checkpoint(tmp_path / CHECKPOINT)
    assert saved.progress["graphs"]["b"]["updates"] == 1
    steps = PPOConfig().epochs * PPOConfig().num_minibatches   # Adam steps per update (4 samples: 4 mini-batches)
    assert saved.algorithm["graphs"][1]["optimizer"]["state"][0]["step"] == 2 * steps   # one optimizer for both


def cloning_loss(policy, actions: torch.Tensor) -> float:
    with torch.no_grad():
        return float(-policy.log_prob(actions[None], {})[0].mean() / actions.numel())


def test_joint_cloning_lowers_every_graphs_loss(family, cluster):
    """Each graph's own target (random devices, so no graph's clone is another's): after the
    joint clone every graph's loss is lower and its greedy placement is its target."""
    envs = [PlacementEnv(g, cluster, mode="one_shot") for g in family]
    policies = [make_policy("mars", env, seed=0, **POLICY) for env in envs]
    share_parameters(policies[1], policies[0])
    rng = torch.Generator().manual_seed(3)
    targets = [torch.randint(cluster.num_devices, (env.num_units,), generator=rng) for env in envs]
    before = [cloning_loss(p, a) for p, a in zip(policies, targets)]
    stats = behaviour_clone_jointly(list(zip(policies, targets)), WarmStartConfig(bc_lr=0.05, bc_steps=300))
    after = [cloning_loss(p, a) for p, a in zip(policies, targets)]
    assert all(a < 0.5 * b for a, b in zip(after, before)), (before, after)
    assert [agreement(p, a) for p, a in zip(policies, targets)] == [1.0, 1.0] and stats["bc_accuracy"] == 1.0
    assert stats["bc_steps"] < 300   # stopped at full agreement


def test_family_clone_places_every_graph_as_its_heuristic_and_is_deterministic(family, cluster, tmp_path):
    """A family run that only warm-starts (the budget is the warm-start placements): the
    checkpoint's policy, reloaded, places every family graph as its heuristic does; the same
    seed gives the same weights."""
    ws = WarmStartConfig(placer="round_robin", first_sample=True, behaviour_cloning=True, bc_lr=0.05)
    runs = [train(family, cluster, SimBackend(), config(budget_placements=2, warm_start=ws), tmp_path / d)
            for d in ("a", "b")]
    assert runs[0]["updates"] == 0 and all(g["bc_accuracy"] == 1.0 for g in runs[0]["graphs"].values())
    placer = PolicyPlacer("mars", tmp_path / "a" / CHECKPOINT)
    for graph in family:
        start = heuristic_start(PlacementEnv(graph, cluster, mode="one_shot"), "round_robin")
        assert np.array_equal(placer.place(graph, cluster).device_of, start.placement.device_of)
    a, b = (read_checkpoint(tmp_path / d / CHECKPOINT).policy for d in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)
