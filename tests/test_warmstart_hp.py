"""The Hierarchical Planner's warm-start options (issue 16 item 3): sampling temperatures for the
Placer and the Grouper, and the Grouper cloned to runs of one device (``clone_grouping="runs"``)."""

import numpy as np
import pytest
import torch

from rlplace.agents.checkpoint import read_checkpoint
from rlplace.agents.configs import HierarchicalConfig, WarmStartConfig
from rlplace.agents.policies import make_policy
from rlplace.agents.policies.hierarchical import run_groups
from rlplace.agents.policies.seq2seq import AttentionDecoder
from rlplace.agents.trainer import TrainConfig, train
from rlplace.agents.warmstart import behaviour_clone, heuristic_start
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.envs import PlacementEnv
from rlplace.errors import ConfigError
from rlplace.zoo import layered

torch.set_num_threads(1)
TINY = {"num_groups": 8, "placer_hidden": 16, "unit_embedding": 8}


@pytest.fixture(scope="module")
def env():
    return PlacementEnv(layered(40, seed=0), load_preset("baechi_2080"))


def test_the_sampling_temperature_divides_the_capped_logits():
    """τ divides C·tanh(l/T) (the cap becomes C/τ), in the teacher-forced pass and in the
    sampling loop alike: log p_τ = log_softmax(log p_1 / τ)."""
    torch.manual_seed(0)
    dec = AttentionDecoder(3, 8, 6, temperature=2.0, tanh_constant=3.0)
    with torch.no_grad():
        dec.out.weight.mul_(20.0)   # logits near the cap, where dividing inside the tanh would differ
    memory, state = torch.randn(4, 5, 6), (torch.randn(4, 8), torch.randn(4, 8))
    actions = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain, _ = dec.teacher_forced(dec.w_memory(memory), state, actions)
        dec.sampling_temperature = 0.25
        cold, _ = dec.teacher_forced(dec.w_memory(memory), state, actions)
    torch.testing.assert_close(cold, torch.log_softmax(plain / 0.25, dim=2))
    decoded = dec(memory, state, steps=6, generator=torch.Generator().manual_seed(7))
    uniform = torch.rand(4, 6, 3, generator=torch.Generator().manual_seed(7)).clamp_min(1e-20)
    with torch.no_grad():
        log_p, _ = dec.teacher_forced(dec.w_memory(memory), state, decoded.actions)
    assert torch.equal(decoded.actions, (log_p - torch.log(-torch.log(uniform))).argmax(2))


@pytest.mark.parametrize("grouping", ["learned", "none"])
def test_planner_samples_are_scored_at_their_temperatures(env, grouping):
    policy = make_policy("hierarchical", env, seed=0, grouping=grouping, noise_steps=0, grouper_temperature=0.5,
                         sampling_temperature=3.0, **TINY)
    assert policy.temperature == 3.0
    if grouping == "learned":
        assert policy.decoder.sampling_temperature == 3.0
    sample = policy.sample(4, torch.Generator().manual_seed(0))
    log_prob, entropy = policy.log_prob(sample.actions, sample.extras)
    torch.testing.assert_close(log_prob, sample.log_probs)
    policy.temperature = 1.0   # the trainer steers it
    assert not torch.allclose(policy.log_prob(sample.actions, sample.extras)[0], log_prob)


def cloned(env, **options):
    policy = make_policy("hierarchical", env, seed=0, noise_steps=0, **{**TINY, **options})
    actions = heuristic_start(env, "heft").actions
    stats = behaviour_clone(policy, actions, WarmStartConfig(bc_lr=0.05, bc_steps=300))
    assert stats["bc_accuracy"] == 1.0
    return policy, actions


def test_colder_planner_samples_stray_less_from_the_cloned_placement(env):
    policy, actions = cloned(env)
    changed = {}
    for temperature, grouper in ((0.05, 1.0), (1.0, 0.05), (0.05, 20.0)):   # the Grouper's is their product
        policy.temperature = temperature
        policy.config.grouper_temperature = grouper
        sample = policy.sample(50, torch.Generator().manual_seed(2))
        changed[temperature, grouper] = float((sample.actions != actions).sum(dim=1).float().mean())
    assert changed[0.05, 1.0] == 0.0
    assert changed[1.0, 0.05] > 0.0 and changed[0.05, 20.0] > 0.0


def test_run_groups_are_contiguous_runs_of_one_device():
    """Group g holds runs of device g mod D only; a group is one contiguous run while the
    device has groups to spare; long runs are split until it has G/D groups."""
    rng = np.random.default_rng(0)
    actions = torch.as_tensor(rng.integers(0, 3, 60) * np.repeat([0, 1, 1, 0, 1], 12))
    for groups in (6, 30, 60, 300):
        g = run_groups(actions, groups, 3)
        for k in g.unique().tolist():
            units = torch.nonzero(g == k)[:, 0]
            assert torch.all(actions[units] == k % 3)                       # one device, g mod D
            per_device = int((actions[1:] != actions[:-1])[actions[1:] == k % 3].sum()) + 1
            if per_device <= groups // 3:                                   # runs to spare: contiguous
                assert int(units[-1] - units[0]) + 1 == len(units)
    assert run_groups(torch.tensor([0, 0, 0, 0, 1, 1, 0, 0]), 6, 2).tolist() == [0, 0, 2, 2, 1, 3, 4, 4]
    assert run_groups(torch.tensor([0, 0, 0, 0, 1, 1, 0, 0]), 4, 2).tolist() == [0, 0, 0, 0, 1, 3, 2, 2]
    assert run_groups(torch.tensor([0, 1, 0, 1, 0, 1]), 4, 2).tolist() == [0, 1, 2, 3, 2, 3]


def test_the_grouper_clones_to_runs_of_the_warm_start_and_keeps_them(env):
    """The first placement cloned fixes the runs; a later placement (one run moved) keeps them
    and moves that run's group, so the Placer's decision, not the Grouper, reproduces it."""
    policy, actions = cloned(env, clone_grouping="runs", num_groups=32)
    runs = run_groups(actions, 32, env.num_devices)
    assert torch.equal(policy.run_grouping, runs)
    assert torch.equal(policy.extras_for(actions.unsqueeze(0))["grouping"][0], runs)
    moved = actions.clone()
    run = runs == 3
    moved[run] = (actions[run] + 1) % env.num_devices
    extras = policy.extras_for(moved.unsqueeze(0))
    assert torch.equal(extras["grouping"][0], runs)
    assert torch.equal(extras["group_devices"][0].gather(0, extras["grouping"][0]), moved)
    moved[0] = (moved[0] + 1) % env.num_devices                       # a lone unit elsewhere changes group
    extras = policy.extras_for(moved.unsqueeze(0))
    assert extras["grouping"][0, 0] != runs[0]
    assert torch.equal(extras["group_devices"][0].gather(0, extras["grouping"][0]), moved)
    assert torch.equal(policy.run_grouping, runs)


def test_bad_options():
    with pytest.raises(ConfigError, match="clone_grouping"):
        HierarchicalConfig(clone_grouping="metis")
    with pytest.raises(ConfigError, match="temperature"):
        HierarchicalConfig(grouper_temperature=0.0)


def test_hp_self_imitation_with_steered_temperature_is_seeded_and_resumes_exactly(tmp_path):
    graph, cluster = layered(30, seed=1), load_preset("baechi_2080")

    def run(out, **options):
        warm = WarmStartConfig(placer="heft", behaviour_cloning=True, first_sample=True, bc_steps=5,
                               self_imitation_every=1, self_imitation_steps=3, self_imitation_changed_units=2.0)
        config = TrainConfig(policy={**TINY, "noise_steps": 3, "clone_grouping": "runs", "grouper_temperature": 0.5},
                             budget_placements=40, checkpoint_every=4, progress=False, plots=False, seed=3,
                             warm_start=warm, algorithm_options={"valid_only_after": 5}, **options)
        train(graph, cluster, SimBackend(), config, tmp_path / out)
        return read_checkpoint(tmp_path / out / "checkpoint.pt")

    full = run("full")
    run("cut", stop_after_updates=5)
    resumed = run("cut", resume=True)
    assert resumed.progress["step_times"] == full.progress["step_times"]
    assert resumed.progress["temperature"] == full.progress["temperature"] != 1.0
    assert torch.all(full.policy["run_grouping"] >= 0)
    for key, value in full.policy.items():
        assert torch.equal(value, resumed.policy[key]), key
    assert run("again").progress["step_times"] == full.progress["step_times"]
