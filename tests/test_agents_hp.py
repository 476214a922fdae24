"""The Hierarchical Planner, its seq2seq pieces, REINFORCE and behaviour cloning."""

import itertools

import numpy as np
import pytest
import torch

from rlplace.learn.algos import make_algorithm
from rlplace.learn.base import Batch, Policy
from rlplace.learn.policies import make_policy
from rlplace.learn.policies.seq2seq import AttentionDecoder, BiLSTMEncoder
from rlplace.learn.train import TrainConfig, train
from rlplace.learn.warmstart import WarmStartConfig, behaviour_clone, heuristic_start
from rlplace.backends import SimBackend
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.learn.env import PlacementEnv
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import simulate
from rlplace.zoo import layered

torch.set_num_threads(1)
TINY = {"num_groups": 8, "placer_hidden": 16}


def toy_problem():
    """Two chains s-a-b-t and s-c-d-t on a fast and a slow device: the optimum (a, b on the
    fast device, c, d on the slow one) beats putting everything on the fast device."""
    op = lambda name, t: {"name": name, "compute_time": t, "persistent_bytes": 0,  # noqa: E731
                          "temporary_bytes": 0, "output_bytes": [1000]}
    ops = [op("s", 1e-4), op("a", 2e-3), op("b", 2e-3), op("c", 1e-3), op("d", 1e-3), op("t", 1e-4)]
    edges = [("s", "a", 1000), ("a", "b", 1000), ("b", "t", 1000),
             ("s", "c", 1000), ("c", "d", 1000), ("d", "t", 1000)]
    graph = OpGraph.from_records(ops, edges, name="toy6")
    cluster = Cluster([Device("fast", 2**30, 2.0), Device("slow", 2**30, 1.0)],
                      CommModel(latency=1e-4, seconds_per_byte=1e-9))
    return graph, cluster


@pytest.fixture(scope="module")
def env():
    from rlplace.cluster import load_preset
    return PlacementEnv(layered(40, seed=0), load_preset("baechi_2080"))


# ------------------------------------------------------------------------------ seq2seq
def test_encoder_shapes_and_mask():
    torch.manual_seed(0)
    enc = BiLSTMEncoder(5, 8)
    x = torch.randn(3, 6, 5)
    memory, (h, c) = enc(x)
    assert memory.shape == (3, 6, 8) and h.shape == c.shape == (3, 8)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 2 + [False] * 4])
    masked, (hm, _) = enc(x, mask)
    assert torch.all(masked[1, 4:] == 0) and torch.all(masked[2, 2:] == 0)
    # a padded row encodes like the unpadded sequence alone
    alone, (ha, _) = enc(x[1:2, :4])
    torch.testing.assert_close(masked[1:2, :4], alone)
    torch.testing.assert_close(hm[1:2], ha)
    with pytest.raises(ValueError):
        BiLSTMEncoder(5, 7)


def test_decoder_shapes_masks_and_teacher_forcing():
    torch.manual_seed(0)
    dec = AttentionDecoder(4, 8, 8, temperature=10.0, tanh_constant=5.0)
    memory, state = torch.randn(2, 5, 8), (torch.zeros(2, 8), torch.zeros(2, 8))
    gen = torch.Generator().manual_seed(1)
    out = dec(memory, state, generator=gen)
    assert out.actions.shape == out.log_probs.shape == out.entropy.shape == (2, 5)
    assert torch.all(out.log_probs <= 0) and torch.all(out.log_probs >= -10.0 - np.log(4))  # |logits| <= C
    scored = dec(memory, state, actions=out.actions)
    torch.testing.assert_close(scored.log_probs, out.log_probs)
    allowed = torch.zeros(5, 4, dtype=torch.bool)
    allowed[:, 2] = True
    only = dec(memory, state, action_mask=allowed, generator=gen)
    assert torch.all(only.actions == 2) and torch.allclose(only.log_probs, torch.zeros(2, 5))
    memory_mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    changed = memory.clone()
    changed[1, 2:] = 100.0  # hidden slots must not matter
    a = dec(memory, state, memory_mask=memory_mask, greedy=True)
    b = dec(changed, state, memory_mask=memory_mask, greedy=True)
    torch.testing.assert_close(a.log_probs[1], b.log_probs[1])
    assert dec(memory, state, steps=3, greedy=True).actions.shape == (2, 3)


# ------------------------------------------------------------------------------ the planner
@pytest.mark.parametrize("grouping", ["learned", "random", "none"])
def test_planner_sample_shapes_and_log_prob(env, grouping):
    policy = make_policy("hierarchical", env, seed=0, grouping=grouping, noise_steps=0, **TINY)
    assert isinstance(policy, Policy)
    sample = policy.sample(4, torch.Generator().manual_seed(0))
    U, D = env.num_units, env.num_devices
    assert sample.actions.shape == (4, U) and sample.log_probs.shape == sample.entropy.shape == (4,)
    assert sample.actions.min() >= 0 and sample.actions.max() < D
    assert sample.log_probs.requires_grad
    log_prob, entropy = policy.log_prob(sample.actions, sample.extras)
    torch.testing.assert_close(log_prob, sample.log_probs)
    torch.testing.assert_close(entropy, sample.entropy)
    if grouping != "none":
        g, devices = sample.extras["grouping"], sample.extras["group_devices"]
        assert g.shape == (4, U) and devices.shape == (4, TINY["num_groups"])
        assert torch.equal(sample.actions, devices.gather(1, g))  # a unit sits on its group's device
        assert torch.all(g == g[0])  # m = 1 grouping for the k placements
    assert policy.greedy().shape == (U,)
    if grouping == "random":
        assert torch.equal(sample.extras["grouping"][0], policy.fixed_grouping)


def test_group_embeddings(env):
    policy = make_policy("hierarchical", env, seed=0, **TINY)
    grouping = torch.zeros(2, env.num_units, dtype=torch.long)
    grouping[1, 10:] = 3
    emb = policy.group_embeddings(grouping)
    G, T = TINY["num_groups"], policy.config.num_types + 1
    assert emb.shape == (2, G, T + policy.unit_shapes.shape[1] + G)
    assert torch.all(emb[0, 1:] == 0) and torch.all(emb[0, 0, -G:] == 0)  # one group, no edges
    assert emb[1, 0, -G + 3] > 0  # units 0..9 feed the units of group 3
    assert torch.all(emb < 1)


def test_logit_noise_only_for_the_first_steps(env):
    policy = make_policy("hierarchical", env, seed=0, noise_steps=1, **TINY)
    first = policy.sample(2, torch.Generator().manual_seed(0))
    lp_first, _ = policy.log_prob(first.actions, first.extras)
    assert not torch.allclose(lp_first, first.log_probs)  # sampled with noise, scored without
    second = policy.sample(2, torch.Generator().manual_seed(0))
    torch.testing.assert_close(policy.log_prob(second.actions, second.extras)[0], second.log_probs)
    assert int(policy.samples_drawn) == 2


def test_bad_options(env):
    with pytest.raises(ConfigError, match="grouping"):
        make_policy("hierarchical", env, grouping="bogus")
    with pytest.raises(ConfigError, match="agent.policy"):
        make_policy("hierarchical", env, no_such_option=1)
    with pytest.raises(ConfigError, match="unknown agent"):
        make_policy("nope", env)


# ------------------------------------------------------------------------------ REINFORCE
def test_one_reinforce_update_lowers_the_loss_on_a_fixed_batch(env):
    policy = make_policy("hierarchical", env, seed=0, noise_steps=0, **TINY)
    algorithm = make_algorithm("reinforce", policy)
    sample = policy.sample(4, torch.Generator().manual_seed(0))
    rewards = torch.tensor([-1.0, -2.0, -1.5, -3.0])
    advantage = rewards - rewards.mean()  # first update: the baseline is the batch mean

    def loss():
        return (-(advantage * policy.log_prob(sample.actions, sample.extras)[0]).mean()).item()

    before = loss()
    stats = algorithm.update(policy, Batch(sample, rewards, -rewards, torch.ones(4, dtype=torch.bool)))
    assert stats["loss"] == pytest.approx(before, rel=1e-5)
    assert loss() < before
    assert algorithm.baseline == pytest.approx(float(rewards.mean()))


def test_reinforce_learns_only_from_valid_placements_after_the_warm_up(env):
    policy = make_policy("hierarchical", env, seed=0, **TINY)
    algorithm = make_algorithm("reinforce", policy, valid_only_after=1)
    gen = torch.Generator().manual_seed(0)
    invalid = torch.zeros(4, dtype=torch.bool)
    assert algorithm.update(policy, Batch(policy.sample(4, gen), -torch.ones(4) * 10, torch.ones(4), invalid))["kept"] == 4
    weights = [p.detach().clone() for p in policy.parameters()]
    stats = algorithm.update(policy, Batch(policy.sample(4, gen), -torch.ones(4) * 10, torch.ones(4), invalid))
    assert stats["kept"] == 0 and algorithm.updates == 2
    assert all(torch.equal(a, b) for a, b in zip(weights, policy.parameters()))
    state = algorithm.state_dict()
    other = make_algorithm("reinforce", policy)
    other.load_state_dict(state)
    assert other.baseline == algorithm.baseline and other.updates == 2


# ------------------------------------------------------------------------------ learning
def test_planner_finds_the_optimum_of_a_toy_graph(tmp_path):
    graph, cluster = toy_problem()
    times = {p: simulate(graph, cluster, Placement(np.array(p))).step_time
             for p in itertools.product(range(2), repeat=graph.num_ops)}
    optimum = min(times.values())
    result = train(graph, cluster, SimBackend(),
                   TrainConfig(policy=TINY, algorithm_options={"lr": 0.01}, budget_placements=200, seed=0,
                               progress=False, plots=False), tmp_path)
    assert result["best_step_time"] == pytest.approx(optimum)
    # and the policy learnt: its greedy placement beats the average placement
    assert result["greedy_evaluation"]["step_time"] < np.mean(list(times.values()))


def test_behaviour_cloning_reproduces_a_heuristic_placement(env):
    actions = heuristic_start(env, "heft").actions
    assert len(set(actions.tolist())) > 1
    for grouping in ("learned", "none"):
        policy = make_policy("hierarchical", env, seed=0, grouping=grouping, unit_embedding=16, **TINY)
        stats = behaviour_clone(policy, actions, WarmStartConfig(bc_lr=0.05, bc_steps=200))
        assert stats["bc_accuracy"] >= 0.95
        assert float((policy.greedy() == actions).float().mean()) >= 0.95


def test_learning_rate_schedule_of_the_authors_code(env):
    from rlplace.learn.algos.reinforce import ReinforceConfig, learning_rate
    c = ReinforceConfig()
    assert [learning_rate(c, u) for u in (0, 399, 400, 449)] == [0.1] * 4
    assert learning_rate(c, 450) == pytest.approx(0.095)
    assert learning_rate(c, 499) == pytest.approx(0.095)
    assert learning_rate(c, 550) == pytest.approx(0.1 * 0.95 ** 3)
    assert learning_rate(ReinforceConfig(lr_decay=1.0), 10_000) == 0.1
    policy = make_policy("hierarchical", env, seed=0, **TINY)
    algorithm = make_algorithm("reinforce", policy, lr_decay_start=1, lr_decay_every=1, lr_decay=0.5)
    gen = torch.Generator().manual_seed(0)
    lrs = [algorithm.update(policy, Batch(policy.sample(2, gen), -torch.rand(2), torch.ones(2),
                                          torch.ones(2, dtype=torch.bool)))["lr"] for _ in range(3)]
    assert lrs == [0.1, 0.1, 0.05]  # TF staircase: decay^0 at the start step itself
    assert algorithm.optimizer.param_groups[0]["lr"] == 0.05


def test_additive_attention_scores_match_the_formula_and_its_gradient(monkeypatch):
    from rlplace.learn.policies.seq2seq import AdditiveScores
    monkeypatch.setattr(AdditiveScores, "CHUNK", 2 * 5 * 3 * 2)  # two steps per block: several blocks
    gen = torch.Generator().manual_seed(0)
    keys, queries, v = (torch.randn(*shape, generator=gen, dtype=torch.double, requires_grad=True)
                        for shape in ((2, 5, 3), (2, 7, 3), (3,)))
    torch.testing.assert_close(AdditiveScores.apply(keys, queries, v),
                               torch.tanh(keys.unsqueeze(1) + queries.unsqueeze(2)) @ v)
    assert torch.autograd.gradcheck(AdditiveScores.apply, (keys, queries, v))


def test_sampling_loop_matches_the_teacher_forced_pass():
    """The fused step loop that samples must draw from the distributions the teacher-forced
    pass (which gives the gradients) computes: every sampled action is the argmax of the
    teacher-forced log probabilities plus the same Gumbel noise, under both masks."""
    torch.manual_seed(0)
    dec = AttentionDecoder(3, 8, 6, temperature=2.0, tanh_constant=3.0)
    memory, state = torch.randn(4, 5, 6), (torch.randn(4, 8), torch.randn(4, 8))
    memory_mask = torch.ones(4, 5, dtype=torch.bool)
    memory_mask[1, 3:] = False
    action_mask = torch.ones(6, 3, dtype=torch.bool)
    action_mask[1, 0] = action_mask[4, 2] = False
    decoded = dec(memory, state, steps=6, memory_mask=memory_mask, action_mask=action_mask,
                  generator=torch.Generator().manual_seed(7))
    uniform = torch.rand(4, 6, 3, generator=torch.Generator().manual_seed(7)).clamp_min(1e-20)
    with torch.no_grad():
        log_p, _ = dec.teacher_forced(dec.w_memory(memory), state, decoded.actions, memory_mask, action_mask)
    assert torch.equal(decoded.actions, (log_p - torch.log(-torch.log(uniform))).argmax(2))
    assert not (decoded.actions[:, 1] == 0).any() and not (decoded.actions[:, 4] == 2).any()
    greedy = dec(memory, state, steps=6, memory_mask=memory_mask, action_mask=action_mask, greedy=True)
    with torch.no_grad():
        log_p, _ = dec.teacher_forced(dec.w_memory(memory), state, greedy.actions, memory_mask, action_mask)
    assert torch.equal(greedy.actions, log_p.argmax(2))
