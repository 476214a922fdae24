"""Options that keep a warm-started learned placer exploring around good placements: the
trainer's self-imitation (``warm_start.self_imitation_every``) and Mars' sampling temperature
(the Hierarchical Planner's: ``test_warmstart_hp.py``)."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rlplace.agents.configs import WarmStartConfig
from rlplace.agents.policies.mars import MarsConfig, MarsPolicy, TrustRegion
from rlplace.agents.base import Batch
from rlplace.agents.checkpoint import read_checkpoint
from rlplace.agents.warmstart import behaviour_clone
from rlplace.agents.trainer import (Progress, TrainConfig, changed_units, expected_moves, self_imitate,
                                    steer_exploration, train, trust_region, trust_temperature)
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.envs import PlacementEnv
from rlplace.errors import ConfigError
from rlplace.zoo import layered

torch.set_num_threads(1)
SMALL = dict(encoder_hidden=16, placer_hidden=24, pretrain=False, segment_size=8)


@pytest.fixture(scope="module")
def env():
    return PlacementEnv(layered(19, width=3, seed=3), "mars_p100")


def policy_for(env, **options) -> MarsPolicy:
    torch.manual_seed(0)
    return MarsPolicy.from_env(env, MarsConfig(**{**SMALL, **options}))


def test_self_imitation_clones_the_best_placement_so_far_when_due(env):
    policy = policy_for(env)
    rng = np.random.default_rng(0)
    first, best, latest = (rng.integers(0, env.num_devices, env.num_units) for _ in range(3))
    progress = Progress()
    progress.record(first, 0.030, True)
    progress.record(best, 0.010, True)
    progress.record(latest, 0.020, True)     # sampled later, but slower
    ws = WarmStartConfig(self_imitation_every=2, self_imitation_steps=300, self_imitation_lr=0.02)

    progress.updates = 1                     # not due
    assert self_imitate(policy, progress, ws) == {"self_imitation_steps": 0.0}
    progress.updates = 2
    assert self_imitate(policy, progress, ws)["self_imitation_steps"] > 0
    assert policy.greedy().tolist() == best.tolist()
    assert progress.imitated_step_time == 0.010

    before = [p.clone() for p in policy.parameters()]
    progress.updates = 4                     # due, but the best has not improved since
    assert self_imitate(policy, progress, ws) == {"self_imitation_steps": 0.0}
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert self_imitate(policy, progress, WarmStartConfig()) == {}   # off


def test_an_anchored_self_imitation_pulls_a_drifted_policy_back_without_an_improvement(env):
    policy = policy_for(env)
    rng = np.random.default_rng(1)
    best, elsewhere = (rng.integers(0, env.num_devices, env.num_units) for _ in range(2))
    progress = Progress()
    progress.record(best, 0.010, True)
    anchored = WarmStartConfig(self_imitation_every=1, self_imitation_steps=300, self_imitation_lr=0.02,
                               self_imitation_anchor=True)
    progress.updates = 1
    assert self_imitate(policy, progress, anchored)["self_imitation_steps"] > 0
    assert policy.greedy().tolist() == best.tolist()
    progress.updates = 2                     # the greedy placement is still the best: no step
    assert self_imitate(policy, progress, anchored) == {"self_imitation_steps": 0.0}

    behaviour_clone(policy, torch.as_tensor(elsewhere), WarmStartConfig(bc_steps=300, bc_lr=0.02))  # a drift
    assert policy.greedy().tolist() != best.tolist()
    progress.updates = 3                     # nothing better was found since the last clone
    unanchored = replace(anchored, self_imitation_anchor=False)
    assert self_imitate(policy, progress, unanchored) == {"self_imitation_steps": 0.0}
    assert self_imitate(policy, progress, anchored)["self_imitation_steps"] > 0
    assert policy.greedy().tolist() == best.tolist()


def test_self_imitation_in_training_is_seeded_and_resumes_exactly(tmp_path):
    graph, cluster = layered(30, seed=1), load_preset("baechi_2080")

    def run(out, every=2, **options):
        warm = WarmStartConfig(placer="heft", behaviour_cloning=True, first_sample=True, bc_steps=5,
                               self_imitation_every=every, self_imitation_steps=3)
        config = TrainConfig(policy={"num_groups": 8, "placer_hidden": 16, "noise_steps": 3}, budget_placements=40,
                             checkpoint_every=4, progress=False, plots=False, seed=3, warm_start=warm,
                             algorithm_options={"valid_only_after": 5}, **options)
        train(graph, cluster, SimBackend(), config, tmp_path / out)
        return read_checkpoint(tmp_path / out / "checkpoint.pt")

    full = run("full")
    assert run("cut", stop_after_updates=5).progress["evaluated"] == 17   # the checkpoint of update 4
    resumed = run("cut", resume=True)
    assert resumed.progress["step_times"] == full.progress["step_times"]
    assert resumed.progress["imitated_step_time"] == full.progress["imitated_step_time"]
    assert full.progress["best_step_time"] <= full.progress["imitated_step_time"] < float("inf")
    for key, value in full.policy.items():
        assert torch.equal(value, resumed.policy[key]), key
    assert run("off", every=0).progress["step_times"] != full.progress["step_times"]  # it does something


@pytest.mark.parametrize("temperature", [0.3, 3.0])
def test_mars_samples_follow_the_softmax_at_its_temperature(env, temperature):
    """Sampled devices of the first unit are distributed as the log probabilities the sample
    reports (softmax of logits / temperature), which PPO's ratios rely on."""
    policy = policy_for(env, temperature=temperature)
    with torch.no_grad():
        policy.placer.out.weight.mul_(30.0)  # logits far from uniform, so the temperature matters
        policy.placer.out.bias.copy_(torch.arange(env.num_devices, dtype=torch.float32))
        sample = policy.sample(4000, torch.Generator().manual_seed(1))
    first = sample.actions[:, 0]
    reported = torch.zeros(env.num_devices)
    reported[first] = sample.unit_log_probs[:, 0].exp()
    frequency = torch.bincount(first, minlength=env.num_devices).float() / len(first)
    assert torch.allclose(frequency, reported, atol=0.03)
    rescored, _ = policy.log_prob(sample.actions, per_unit=True)
    assert torch.allclose(rescored, sample.unit_log_probs, atol=1e-5)


@pytest.mark.parametrize("rate", [0.0, 0.3, 1.0])
def test_mars_samples_in_a_trust_region_follow_its_mixture(env, rate):
    """A unit keeps the trust region's device with probability 1 - rate and is drawn from the
    policy otherwise: sampled frequencies match the reported probabilities, and re-scoring the
    samples (PPO) gives the same log-probabilities."""
    policy = policy_for(env)
    anchor = torch.as_tensor(np.random.default_rng(4).integers(0, env.num_devices, env.num_units))
    with torch.no_grad():
        policy.placer.out.weight.mul_(30.0)
        policy.placer.out.bias.copy_(torch.arange(env.num_devices, dtype=torch.float32))
        policy.trust_region = TrustRegion(anchor, rate)
        sample = policy.sample(4000, torch.Generator().manual_seed(1))
        rescored, _ = policy.log_prob(sample.actions, per_unit=True)
    first = sample.actions[:, 0]
    frequency = torch.bincount(first, minlength=env.num_devices).float() / len(first)
    reported = torch.zeros(env.num_devices)
    reported[first] = sample.unit_log_probs[:, 0].exp()
    assert torch.allclose(frequency, reported, atol=0.03)
    assert torch.allclose(rescored, sample.unit_log_probs, atol=1e-5)
    kept = float((sample.actions == anchor).float().mean())
    assert kept >= 1 - rate - 0.02                          # at least the kept share
    if rate == 0.0:
        assert kept == 1.0
    if rate == 1.0:                                         # the policy itself
        policy.trust_region = None
        with torch.no_grad():
            assert torch.allclose(policy.log_prob(sample.actions, per_unit=True)[0], rescored, atol=1e-5)


def test_colder_mars_samples_stray_less_from_the_greedy_placement(env):
    changed = {}
    for temperature in (0.2, 1.0):
        policy = policy_for(env, temperature=temperature)
        with torch.no_grad():
            policy.placer.out.weight.mul_(30.0)
            sample = policy.sample(200, torch.Generator().manual_seed(2))
        changed[temperature] = float((sample.actions != policy.greedy()).sum(dim=1).float().mean())
    assert changed[0.2] < 0.5 * changed[1.0]


def test_the_temperature_is_steered_towards_the_target_and_resumes(tmp_path):
    """Samples far from the best placement cool the policy, samples on it warm it; a resumed
    run continues with the temperature it had."""
    env = PlacementEnv(layered(19, width=3, seed=3), "mars_p100")
    policy = policy_for(env)
    progress = Progress()
    progress.record(np.zeros(env.num_units, dtype=int), 0.01, True)
    far = torch.ones(4, env.num_units, dtype=torch.long)

    def batch(actions):
        sample = policy.sample(4)
        sample.actions = actions
        return Batch(sample, torch.zeros(4), torch.zeros(4), torch.ones(4, dtype=bool))

    moved = batch(far)                                   # every unit off the best
    steered = WarmStartConfig(self_imitation_changed_units=2.0)
    assert steer_exploration(policy, moved, progress, steered)["temperature"] < 1.0
    cooled = policy.temperature
    on_best = batch(torch.zeros_like(far))               # nothing off the best
    assert steer_exploration(policy, on_best, progress, steered)["temperature"] > cooled
    assert progress.temperature == policy.temperature
    assert steer_exploration(policy, on_best, progress, WarmStartConfig()) == {}

    graph, cluster = layered(30, seed=1), load_preset("mars_p100")
    mars = {"encoder_hidden": 8, "placer_hidden": 16, "segment_size": 4, "pretrain": False}

    def run(out, agent="mars", **options):
        warm = WarmStartConfig(placer="heft", first_sample=True, self_imitation_every=1, self_imitation_steps=2,
                               self_imitation_changed_units=3.0)
        config = TrainConfig(agent=agent, algorithm="ppo" if agent == "mars" else "reinforce", samples=4,
                             policy=mars if agent == "mars" else {}, budget_placements=25, checkpoint_every=2,
                             progress=False, plots=False, seed=1, warm_start=warm, **options)
        return train(graph, cluster, SimBackend(), config, tmp_path / out)

    full = run("full")
    run("cut", stop_after_updates=3)
    run("cut", resume=True)
    a, b = (read_checkpoint(tmp_path / d / "checkpoint.pt").progress for d in ("full", "cut"))
    assert a["step_times"] == b["step_times"] and a["temperature"] == b["temperature"] != 1.0
    assert full["evaluated"] == 25


def test_a_trust_region_samples_the_target_number_of_moves_off_the_best_placement(env):
    progress = Progress()
    progress.record(np.random.default_rng(5).integers(0, env.num_devices, env.num_units), 0.01, True)
    ws = WarmStartConfig(self_imitation_changed_units=2.0, self_imitation_trust_region=True)
    policy = policy_for(env)
    with torch.no_grad(), trust_region(policy, progress, ws) as stats:
        sample = policy.sample(400, torch.Generator().manual_seed(3))
    assert 0 < stats["trust_rate"] < 1 and stats["policy_moves"] > 2.0
    assert 1.5 < changed_units(sample.actions, progress.best_actions) < 2.5
    assert policy.trust_region is None                      # outside, the policy is its own
    with trust_region(policy, progress, WarmStartConfig(self_imitation_changed_units=2.0)) as stats:
        assert stats == {} and policy.trust_region is None


def test_a_sharp_policy_in_a_trust_region_is_sampled_hotter_when_asked(env):
    """A policy cloned to the best placement would move under the target even at rate 1; with
    ``self_imitation_trust_temperature`` the region raises the temperature until the policy's
    expected moves are the target (a moved unit changes the decoder's next inputs, so samples
    move more), and gives the policy its own temperature back outside."""
    best = np.random.default_rng(6).integers(0, env.num_devices, env.num_units)
    progress = Progress()
    progress.record(best, 0.01, True)
    policy = policy_for(env)
    behaviour_clone(policy, torch.as_tensor(best), WarmStartConfig(bc_steps=300, bc_lr=0.02))
    moved = {}
    for hotter in (False, True):
        ws = WarmStartConfig(self_imitation_changed_units=5.0, self_imitation_trust_region=True,
                             self_imitation_trust_temperature=hotter)
        with torch.no_grad(), trust_region(policy, progress, ws) as stats:
            sample = policy.sample(400, torch.Generator().manual_seed(3))
            rescored, _ = policy.log_prob(sample.actions)
        assert stats["trust_rate"] == 1.0 and stats["policy_moves"] < 2.0
        assert torch.allclose(rescored, sample.log_probs, atol=1e-4)   # PPO re-scores what was sampled
        assert policy.temperature == 1.0 and policy.trust_region is None
        moved[hotter] = changed_units(sample.actions, progress.best_actions)
    logits, anchor = policy.teacher_forced_logits(torch.as_tensor(best)), torch.as_tensor(best)
    assert expected_moves(logits, anchor, stats["trust_temperature"]) == pytest.approx(5.0, rel=1e-3)
    assert moved[True] > 1.5 * moved[False]
    with pytest.raises(ConfigError, match="trust_temperature"):
        TrainConfig(agent="mars", warm_start=WarmStartConfig(self_imitation_trust_temperature=True))


def test_trust_temperature_gives_the_wanted_moves():
    logits = torch.tensor([[4.0, 0.0, 0.0], [0.0, 6.0, 1.0], [2.0, 0.0, 0.0]])
    actions = torch.tensor([0, 1, 0])
    slow = [sum(1 - math.exp(row[a] / t) / sum(math.exp(v / t) for v in row) for row, a in
                zip(logits.tolist(), actions.tolist())) for t in (1.0, 20.0)]
    assert expected_moves(logits, actions, 1.0) == pytest.approx(slow[0], rel=1e-6)
    t = trust_temperature(logits, actions, 1.0, 1.0)
    assert 1.0 < t < 20.0 and expected_moves(logits, actions, t) == pytest.approx(1.0, rel=1e-3)
    assert trust_temperature(logits, actions, 5.0, 1.0) == 20.0 and slow[1] < 5.0   # out of reach


def test_a_trust_region_run_is_seeded_and_resumes_exactly(tmp_path):
    graph, cluster = layered(40, seed=2), load_preset("mars_p100")
    mars = {"encoder_hidden": 8, "placer_hidden": 16, "segment_size": 4, "pretrain": False}

    def run(out, trust=True, **options):
        warm = WarmStartConfig(placer="heft", first_sample=True, self_imitation_every=1, self_imitation_steps=2,
                               self_imitation_changed_units=2.0, self_imitation_trust_region=trust)
        config = TrainConfig(agent="mars", algorithm="ppo", samples=4, policy=mars, budget_placements=29,
                             checkpoint_every=2, progress=False, plots=False, seed=2, warm_start=warm, **options)
        train(graph, cluster, SimBackend(), config, tmp_path / out)
        return read_checkpoint(tmp_path / out / "checkpoint.pt").progress

    full = run("full")
    run("cut", stop_after_updates=3)
    resumed = run("cut", resume=True)
    assert resumed["step_times"] == full["step_times"] and resumed["trust_scale"] == full["trust_scale"] != 1.0
    assert run("untrusted", trust=False)["step_times"] != full["step_times"]   # it does something
    with pytest.raises(ConfigError, match="trust_region"):
        TrainConfig(agent="hierarchical", warm_start=WarmStartConfig(self_imitation_trust_region=True,
                                                                     self_imitation_changed_units=2.0))


def test_a_factorised_trust_region_draws_each_unit_given_the_best_placement(env):
    """``self_imitation_trust_factorised``: unit u is kept with probability 1 - rate and else drawn
    from the policy given the best placement's earlier units, whatever the sample moved before it,
    so a sample moves rate x expected_moves units on average, each unit independently, and PPO
    re-scores exactly what was sampled."""
    best = np.random.default_rng(7).integers(0, env.num_devices, env.num_units)
    progress = Progress()
    progress.record(best, 0.01, True)
    policy = policy_for(env)
    ws = WarmStartConfig(self_imitation_changed_units=3.0, self_imitation_trust_region=True,
                         self_imitation_trust_factorised=True)
    with torch.no_grad(), trust_region(policy, progress, ws) as stats:
        sample = policy.sample(3000, torch.Generator().manual_seed(4))
        rescored, _ = policy.log_prob(sample.actions)
    assert torch.allclose(rescored, sample.log_probs, atol=1e-4)
    # the literal mixture, unit by unit, from the logits teacher-forced on the best placement
    anchor = torch.as_tensor(best)
    probs = torch.softmax(policy.teacher_forced_logits(anchor), dim=-1).tolist()
    rate = stats["trust_rate"]
    for actions, log_prob in zip(sample.actions[:5].tolist(), sample.log_probs[:5].tolist()):
        literal = sum(math.log(rate * probs[u][d] + (1 - rate) * (d == best[u])) for u, d in enumerate(actions))
        assert log_prob == pytest.approx(literal, abs=1e-3)
    moved = (sample.actions != anchor).double()
    wanted = torch.tensor([rate * (1 - probs[u][best[u]]) for u in range(env.num_units)], dtype=torch.double)
    assert torch.allclose(moved.mean(dim=0), wanted, atol=0.04)     # each unit's own rate
    assert moved.sum(dim=1).mean().item() == pytest.approx(3.0, rel=0.08)
    with pytest.raises(ConfigError, match="trust_factorised"):
        TrainConfig(agent="mars", warm_start=WarmStartConfig(self_imitation_trust_factorised=True))
