"""The Gymnasium environment: API conformance, rewards, modes, accounting, wrappers."""

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import rlplace.learn.env  # noqa: F401  (registers rlplace/Placement-v0)
from rlplace.cluster import load_preset
from rlplace.coarsen import CoarseGraph
from rlplace.learn.env import DeviceMask, PlacementEnv, RelativeReward, observation_to_data
from rlplace.learn.env.partial import PartialSchedule
from rlplace.errors import ConfigError, PlacementError, RlplaceError
from rlplace.placers import make_placer
from rlplace.sim import simulate
from rlplace.zoo import chain, layered, linear_regression

ENV_ID = "rlplace/Placement-v0"


def make(**kwargs):
    kwargs.setdefault("graph", linear_regression())
    return gym.make(ENV_ID, **kwargs)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("mode", ["one_shot", "sequential"])
@pytest.mark.parametrize("grouping", [None, "blocks"])
def test_check_env(mode, grouping):
    g = layered(120, seed=1)
    groups = np.arange(g.num_ops) // 9 if grouping else None
    check_env(make(graph=g, mode=mode, grouping=groups, render_mode="ansi").unwrapped)
    check_env(make(mode=mode, grouping=None if grouping is None else np.arange(12) % 5).unwrapped)


def test_names_or_objects():
    by_name = gym.make(ENV_ID, graph="layered", cluster="mars_p100", backend="sim",
                       graph_options={"num_ops": 64, "seed": 2})
    base = by_name.unwrapped
    assert base.graph.num_ops == 64 and base.cluster.name == "mars_p100"
    by_object = gym.make(ENV_ID, graph=base.graph, cluster=base.cluster)
    assert by_object.unwrapped.num_units == base.num_units


def test_reward_is_minus_sqrt_of_the_simulated_step_time():
    env = make(cluster="baechi_2080")
    base = env.unwrapped
    env.reset(seed=0)
    action = np.arange(base.num_units) % base.num_devices
    _, reward, terminated, truncated, info = env.step(action)
    expected = simulate(base.graph, base.cluster, base.units.expand(action)).step_time
    assert terminated and not truncated
    assert info["step_time"] == pytest.approx(expected)
    assert reward == pytest.approx(-math.sqrt(expected))
    for kind, f in (("linear", lambda t: -t), ("log", math.log)):
        env2 = make(cluster="baechi_2080", reward=kind)
        env2.reset()
        _, r2, *_ = env2.step(action)
        assert r2 == pytest.approx(f(expected) if kind == "linear" else -math.log(expected))


def test_oom_gives_the_penalty_and_never_raises():
    tiny = load_preset("baechi_2080").with_memory(64)
    for penalty, expected in (("hierarchical_planner", -10.0), ("mars", -math.sqrt(100.0)), (-3.5, -3.5)):
        env = make(cluster=tiny, oom_penalty=penalty)
        env.reset()
        _, reward, terminated, _, info = env.step(env.action_space.sample())
        assert info["oom"] and terminated and reward == expected


def test_a_placement_the_backend_stopped_is_penalised():
    from dataclasses import replace

    from rlplace.backends import SimBackend

    class StoppingBackend(SimBackend):
        def evaluate(self, graph, cluster, placement):
            return replace(super().evaluate(graph, cluster, placement), timed_out=True)

    env = make(backend=StoppingBackend())
    env.reset()
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert info["slow"] and reward == -10.0


def test_slow_placements_are_penalised():
    env = make(step_time_limit=1e-9)
    env.reset()
    _, reward, _, _, info = env.step(env.action_space.sample())
    assert info["slow"] and reward == -10.0
    assert env.unwrapped.accounting.best_step_time == math.inf  # a slow placement is never the best


@pytest.mark.parametrize("action,message", [
    (np.zeros(3, dtype=int), "action has shape"),
    (np.full(10, 7), "out of range"),
    (np.full(10, 0.5), "integers"),
])
def test_bad_actions_raise_clear_errors(action, message):
    env = make()
    env.reset()
    with pytest.raises(PlacementError, match=message):
        env.step(action)


ACTIONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
                       lambda inner: st.lists(inner, max_size=12), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(action=ACTIONS, mode=st.sampled_from(["one_shot", "sequential"]))
def test_any_action_is_taken_or_refused_with_a_project_error(action, mode):
    """Ragged lists, strings, NaN, huge integers: a step or an RlplaceError, nothing else."""
    env = make(mode=mode)
    env.reset(seed=0)
    try:
        env.step(action)
    except RlplaceError:
        pass


@pytest.mark.parametrize("reference", [-1.0, 0.0, math.nan, math.inf, True, 10**400, [1.0], None])
def test_relative_reward_refuses_a_reference_that_is_no_step_time(reference):
    with pytest.raises(ConfigError, match="RelativeReward: the reference"):
        RelativeReward(make(), reference)


def test_a_log_reward_of_a_zero_second_step_is_a_config_error():
    env = make(graph=chain(3, compute_time=0.0, output_bytes=0), reward="log")
    env.reset()
    with pytest.raises(ConfigError, match="reward='log' needs a step time > 0"):
        env.step(np.zeros(env.unwrapped.num_units, dtype=int))  # one device: no transfer, 0 s


def test_step_after_the_end_needs_a_reset():
    env = make()
    env.reset()
    env.step(env.action_space.sample())
    with pytest.raises(gym.error.ResetNeeded):
        env.step(env.action_space.sample())


def test_sequential_final_reward_equals_one_shot_reward():
    g = layered(150, seed=3)
    rng = np.random.default_rng(0)
    one_shot, sequential = make(graph=g), make(graph=g, mode="sequential")
    action = rng.integers(0, 4, one_shot.unwrapped.num_units)
    one_shot.reset()
    _, r1, *_ = one_shot.step(action)
    obs, _ = sequential.reset()
    rewards = []
    while True:
        unit = int(obs["current_unit"])
        obs, r, terminated, _, info = sequential.step(int(action[unit]))
        rewards.append(r)
        if terminated:
            break
    assert rewards[-1] == pytest.approx(r1) and not any(rewards[:-1])
    np.testing.assert_array_equal(obs["placement"], action)


def test_shaped_rewards_add_up_to_the_final_reward_in_a_given_order():
    g = layered(60, seed=4)
    units = CoarseGraph.colocation(g).num_groups
    order = np.random.default_rng(1).permutation(units)
    env = make(graph=g, mode="sequential", shaping=True, order=order)
    plain = make(graph=g)
    action = np.random.default_rng(2).integers(0, 4, units)
    obs, _ = env.reset()
    total, seen = 0.0, []
    for _ in range(units):
        unit = int(obs["current_unit"])
        seen.append(unit)
        obs, r, terminated, _, _ = env.step(int(action[unit]))
        total += r
    assert seen == order.tolist() and terminated
    plain.reset()
    _, final, *_ = plain.step(action)
    assert total == pytest.approx(final)


def test_cpd_topo_order_places_every_unit_once():
    g = layered(90, seed=10)
    env = make(graph=g, mode="sequential", order="cpd_topo")
    order = env.unwrapped.order
    assert sorted(order.tolist()) == list(range(env.unwrapped.num_units))
    obs, _ = env.reset()
    seen, terminated = [], False
    while not terminated:
        seen.append(int(obs["current_unit"]))
        obs, _, terminated, _, _ = env.step(0)
    assert seen == order.tolist()
    with pytest.raises(ConfigError, match="order must be"):
        make(graph=g, mode="sequential", order="bfs")


@pytest.mark.parametrize("kwargs, needle", [(dict(graph=3), "graph must be an OpGraph, a preset name or a graph file, got int 3"),
                                            (dict(cluster=4.5), "cluster must be a Cluster or a preset name, got float"),
                                            (dict(backend=object()), "backend must be a Backend, 'sim', 'tf' or 'torch'"),
                                            (dict(step_time_limit=-1), "step_time_limit must be None or a number of seconds > 0"),
                                            (dict(cache_size=-1), "cache_size must be an integer >= 0")])
def test_gym_make_with_a_bad_argument_is_a_config_error(kwargs, needle):
    """(before: an AttributeError deep in the constructor or at the first step; a negative limit or
    cache size was taken)"""
    with pytest.raises(ConfigError) as error:
        gym.make("rlplace/Placement-v0", **kwargs)
    assert needle in str(error.value)


def test_same_seed_same_observations_and_rewards():
    def rollout(seed):
        env = make(graph=layered(80, seed=5), mode="sequential")
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        terminated = False
        while not terminated:
            obs, r, terminated, _, _ = env.step(env.action_space.sample())
            out.append((obs, r))
        return out

    a, b = rollout(7), rollout(7)
    assert len(a) == len(b)
    for x, y in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(x[0]["placement"], y[0]["placement"])
        assert x[1] == y[1]


def test_grouping_never_splits_colocation_and_units_follow_it():
    g = linear_regression()
    env = make(graph=g, grouping=np.arange(g.num_ops))  # one group per op, merged with colocation
    units = env.unwrapped.units
    assert units.num_groups == g.num_ops - 2
    for ops in g.colocation_groups.values():
        assert len(set(units.group_of[ops])) == 1
    with pytest.raises(ConfigError, match="another graph"):
        make(graph=g, grouping=CoarseGraph.colocation(linear_regression()))


def test_accounting_and_cache():
    env = make()
    base = env.unwrapped
    action = np.zeros(base.num_units, dtype=int)
    for _ in range(3):
        env.reset()
        _, _, _, _, info = env.step(action)
    acc = base.accounting
    assert (acc.evaluations, acc.cache_hits) == (1, 2)
    assert acc.simulate_time > 0 and acc.measure_time == 0
    assert info["evaluations"] == 1 and info["best_step_time"] == acc.best_step_time
    assert acc.best_placement == base.units.expand(action)
    env.reset()
    _, _, _, _, info = env.step(np.arange(base.num_units) % 2)
    assert acc.evaluations == 2 and acc.best_step_time == min(info["step_time"], info["best_step_time"])


def test_observation_contents_and_pyg():
    g = layered(100, seed=6)
    env = make(graph=g, mode="sequential")
    obs, _ = env.reset()
    assert env.observation_space.contains(obs)
    assert np.all(obs["placement"] == -1) and int(obs["current_unit"]) == 0
    assert obs["edge_index"].size // 2 == len({(int(s), int(d)) for s, d in zip(g.edge_src, g.edge_dst)})
    np.testing.assert_allclose(obs["device_free_memory"], 1.0)
    obs, *_ = env.step(2)
    assert obs["placement"][0] == 2 and obs["device_busy"][2] > 0
    data = observation_to_data(obs, num_op_types=int(env.observation_space["op_type"].high.max()) + 1)
    assert data.x.shape[0] == env.unwrapped.num_units and data.edge_index.shape[0] == 2
    assert int(data.placement[0]) == 2


def test_relative_reward_scores_the_reference_at_minus_one():
    g = layered(200, seed=7)
    env = RelativeReward(make(graph=g), "round_robin")
    env.reset()
    placement = make_placer("round_robin").place(g, env.unwrapped.cluster)
    units = env.unwrapped.units
    action = placement.device_of[np.unique(units.group_of, return_index=True)[1]]
    _, reward, *_ = env.step(action)
    assert reward == pytest.approx(-1.0)


def test_device_mask_hides_devices_that_surely_run_out_of_memory():
    g = linear_regression(features=1 << 20)  # Weight: 4 MiB persistent
    cluster = load_preset("baechi_2080").with_memory([1 << 40, 3 << 20, 1 << 40, 1 << 40])
    env = DeviceMask(make(graph=g, cluster=cluster, mode="sequential"))
    obs, _ = env.reset()
    weight_unit = env.unwrapped.units.group_of[g.index["Weight"]]
    masked = []
    terminated = False
    while not terminated:
        assert env.observation_space.contains(obs)
        if int(obs["current_unit"]) == weight_unit:
            masked = list(obs["action_mask"])
        obs, _, terminated, _, _ = env.step(0)
    assert masked == [1, 0, 1, 1]
    with pytest.raises(ConfigError, match="sequential"):
        DeviceMask(make())


def test_render_modes():
    env = make(graph=layered(50, seed=8), render_mode="rgb_array")
    env.reset()
    blank = env.render()
    env.step(env.action_space.sample())
    image = env.render()
    assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
    assert not np.array_equal(blank, image)
    text_env = make(render_mode="ansi")
    text_env.reset()
    text_env.step(np.zeros(text_env.unwrapped.num_units, dtype=int))
    text = text_env.render()
    assert "/device:GPU:0" in text and "last step time" in text


@pytest.mark.parametrize("vector", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs_step_two_copies(vector):
    g = layered(60, seed=9)
    envs = vector([lambda: gym.make(ENV_ID, graph=g) for _ in range(2)])
    try:
        envs.reset(seed=0)
        single = make(graph=g)
        units = single.unwrapped.num_units
        actions = np.stack([np.zeros(units, dtype=np.int64), np.arange(units) % 4])
        _, rewards, terminated, _, infos = envs.step(actions)
        for k in range(2):
            single.reset()
            _, expected, *_ = single.step(actions[k])
            assert rewards[k] == pytest.approx(expected)
        assert terminated.all()
    finally:
        envs.close()


@pytest.mark.parametrize("reward", ["sqrt", "linear", "log"])
def test_schedule_shaping_adds_up_to_the_final_reward(reward):
    g = layered(60, seed=4)
    units = CoarseGraph.colocation(g).num_groups
    order = np.random.default_rng(1).permutation(units)
    env = make(graph=g, mode="sequential", shaping="schedule", schedule_features=True, order=order, reward=reward)
    plain = make(graph=g, reward=reward)
    action = np.random.default_rng(2).integers(0, 4, units)
    obs, _ = env.reset()
    rewards = []
    for _ in range(units):
        obs, r, terminated, _, info = env.step(int(action[int(obs["current_unit"])]))
        rewards.append(r)
    plain.reset()
    _, final, *_ = plain.step(action)
    assert terminated and sum(rewards) == pytest.approx(final)
    assert sum(r != 0 for r in rewards[:-1]) > 10  # paid along the way, not all at the end
    partial = env.unwrapped._partial
    assert partial.estimate == info["step_time"]


def test_partial_schedule_is_the_simulators_once_every_unit_is_placed():
    g = layered(150, seed=3)
    cluster = load_preset("baechi_2080")
    units = CoarseGraph.from_labels(g, np.arange(g.num_ops) // 3).merged_with_colocation()
    partial = PartialSchedule(units, cluster)
    unit_device = np.random.default_rng(0).integers(0, cluster.num_devices, units.num_groups)
    estimates = [partial.place(u, unit_device[u]) for u in range(units.num_groups)]
    schedule = simulate(g, cluster, units.expand(unit_device), trace=True).schedule
    np.testing.assert_array_equal(partial.start, schedule.op_start)
    np.testing.assert_array_equal(partial.end, schedule.op_end)
    assert estimates[-1] == schedule.step_time
    assert 0 < estimates[0] < estimates[-1]
    partial.reset()
    assert partial.place(np.arange(units.num_groups), unit_device) == schedule.step_time


def test_schedule_features_by_hand():
    """a -> b on two devices: once a is placed on the slow device, b could start there at a's
    end, or one transfer later on the fast one, and end at the same time either way."""
    from conftest import op
    from rlplace.cluster import Cluster, CommModel, Device
    from rlplace.graph import OpGraph

    g = OpGraph.from_records([op("a", 2.0, out=[10]), op("b", 4.0, out=[1])], [("a", "b", 10)])
    cluster = Cluster((Device("d0", 10**6, 1.0), Device("d1", 10**6, 2.0)), CommModel(1.0, 0.1, "parallel"))
    env = PlacementEnv(g, cluster, mode="sequential", schedule_features=True)
    obs, _ = env.reset()
    assert env._partial.scale == pytest.approx(3.0) and env._partial.choice_scale == pytest.approx(1.5)
    np.testing.assert_allclose(obs["unit_schedule"].reshape(2, 3), [[0, 0, 2 / 3], [0, 0, 0]])
    obs, *_ = env.step(0)  # a on d0: [0, 2]; estimate 2 + b on the fastest device (2) = 4
    assert obs["partial_step_time"][0] == pytest.approx(4 / 3)
    np.testing.assert_allclose(obs["unit_schedule"].reshape(2, 3), [[0, 2 / 3, 2 / 3], [0, 0, 0]], rtol=1e-6)
    # b on d0: starts at 2, ends at 6 (estimate +2); on d1: starts at 2 + 2 (transfer), ends at 6 (+2)
    np.testing.assert_allclose(obs["device_schedule"].reshape(2, 3), [[2 / 3, 0, 2 / 1.5], [0, 2 / 1.5, 2 / 1.5]],
                               rtol=1e-6)


def test_shaping_and_schedule_features_are_checked():
    with pytest.raises(ConfigError, match="shaping"):
        PlacementEnv(linear_regression(), mode="sequential", shaping="partial")
    with pytest.raises(ConfigError, match="sequential"):
        PlacementEnv(linear_regression(), schedule_features=True)
