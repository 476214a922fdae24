"""Gymnasium agents unmodified: Stable-Baselines3 and sb3-contrib on PlacementEnv, Gymnasium's
checker on every wrapper, pickling."""

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from sb3_contrib import MaskablePPO  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402
from stable_baselines3.common.preprocessing import preprocess_obs  # noqa: E402

import rlplace.learn.env  # noqa: E402,F401  (registers rlplace/Placement-v0)
from rlplace.cluster import load_preset  # noqa: E402
from rlplace.learn.env import DeviceMask, PlacementEnv, RelativeReward  # noqa: E402
from rlplace.learn.env.placement import NUM_FEATURES  # noqa: E402
from rlplace.errors import ConfigError  # noqa: E402
from rlplace.learn.env.sb3 import GraphExtractor  # noqa: E402
from rlplace.zoo import layered, linear_regression  # noqa: E402

EXTRACTOR = {"features_extractor_class": GraphExtractor, "features_extractor_kwargs": {"hidden": 8}}
TINY_PPO = dict(n_steps=16, batch_size=8, n_epochs=1, seed=0)


def graph():
    return layered(40, seed=1)


SCHEDULE = {"shaping": "schedule", "schedule_features": True}


@pytest.mark.parametrize(("mode", "wrap", "options"), [("one_shot", None, {}), ("sequential", None, {}),
                                                       ("sequential", DeviceMask, {}), ("sequential", None, SCHEDULE),
                                                       ("sequential", DeviceMask, SCHEDULE)])
def test_sb3_check_env_passes_without_warnings(mode, wrap, options):
    env = PlacementEnv(graph(), mode=mode, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check_env(wrap(env) if wrap else env)


def test_observation_entries_are_flat():
    env = PlacementEnv(graph(), mode="sequential")
    obs, _ = env.reset()
    for key, space in env.observation_space.spaces.items():
        assert isinstance(space, gym.spaces.Discrete) or len(space.shape) == 1, key
        assert space.contains(obs[key]), key
    U = env.num_units
    assert obs["features"].reshape(U, -1).shape[1] == NUM_FEATURES
    edges = obs["edge_index"].reshape(2, -1)
    assert edges.shape[1] == obs["edge_features"].shape[0] and edges.max() < U


@pytest.mark.parametrize(("mode", "options"), [("one_shot", {}), ("sequential", {}), ("sequential", SCHEDULE)])
@pytest.mark.parametrize("extractor", [None, EXTRACTOR])
def test_one_ppo_update(mode, options, extractor):
    env = PlacementEnv(graph(), mode=mode, **options)
    model = PPO("MultiInputPolicy", env, policy_kwargs=extractor, **TINY_PPO)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(TINY_PPO["n_steps"])
    assert model._n_updates == 1
    assert any(not np.allclose(a, b.detach()) for a, b in zip(before, model.policy.parameters()))
    if extractor:
        assert isinstance(model.policy.features_extractor, GraphExtractor)


@pytest.mark.parametrize("options", [{}, SCHEDULE])
def test_graph_extractor_reads_the_placement_and_the_current_unit(options):
    env = PlacementEnv(graph(), mode="sequential", **options)
    model = PPO("MultiInputPolicy", env, policy_kwargs=EXTRACTOR, **TINY_PPO)
    first, _ = env.reset()
    second, *_ = env.step(1)
    features = [model.policy.extract_features(model.policy.obs_to_tensor(o)[0]) for o in (first, second)]
    assert features[0].shape == (1, model.policy.features_extractor.features_dim)
    assert not np.allclose(features[0].detach(), features[1].detach())


@pytest.mark.parametrize(("wrap", "options"), [(False, {}), (True, {}), (False, SCHEDULE)])
def test_maskable_ppo_honours_the_masks(wrap, options):
    cluster = load_preset("baechi_2080").with_memory([1 << 40, 1, 1 << 40, 1 << 40])  # device 1 takes nothing
    env = PlacementEnv(linear_regression(), cluster, mode="sequential", **options)
    model = MaskablePPO("MultiInputPolicy", DeviceMask(env) if wrap else env, policy_kwargs=EXTRACTOR, **TINY_PPO)
    model.learn(TINY_PPO["n_steps"])
    assert model._n_updates == 1
    buffer = model.rollout_buffer
    masks = buffer.action_masks.reshape(len(buffer.actions), -1).astype(bool)
    actions = buffer.actions.reshape(-1).astype(int)
    assert not masks[:, 1].any() and masks[:, [0, 2, 3]].all()
    assert masks[np.arange(len(actions)), actions].all()


def test_action_masks_need_the_sequential_mode():
    with pytest.raises(ConfigError, match="sequential"):
        PlacementEnv(graph()).action_masks()


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
@pytest.mark.parametrize("wrap", [lambda env: DeviceMask(env), lambda env: RelativeReward(env, "m_etf"),
                                  lambda env: RelativeReward(DeviceMask(env), 0.01)])
def test_gymnasium_check_env_passes_on_every_wrapper(wrap):
    env = wrap(gym.make("rlplace/Placement-v0", graph=graph(), mode="sequential", render_mode="ansi"))
    gym_check_env(env)
    again = env.spec.make()
    assert type(again) is type(env) and again.spec.additional_wrappers == env.spec.additional_wrappers


@pytest.mark.parametrize("reward", ["sqrt", "linear", "log"])
@pytest.mark.parametrize("options", [{"shaping": True}, SCHEDULE])
def test_env_pickles(reward, options):
    env = RelativeReward(PlacementEnv(graph(), mode="sequential", reward=reward, **options), 0.01)
    env.reset(seed=0)
    env.step(2)
    copy = pickle.loads(pickle.dumps(env))
    action = 3
    a, b = env.step(action), copy.step(action)
    assert a[1] == b[1]
    np.testing.assert_array_equal(a[0]["placement"], b[0]["placement"])


def test_graph_extractor_builds_the_adjacency_once_per_batch_size():
    env = PlacementEnv(graph(), mode="sequential", **SCHEDULE)
    extractor = GraphExtractor(env.observation_space, hidden=8)
    obs, _ = env.reset()
    model = PPO("MultiInputPolicy", env, policy_kwargs=EXTRACTOR, **TINY_PPO)
    one = preprocess_obs(model.policy.obs_to_tensor(obs)[0], env.observation_space)
    two = {key: value.repeat(2, *[1] * (value.dim() - 1)) for key, value in one.items()}
    first = extractor(one)
    assert extractor._adjacency(one["edge_index"].long().reshape(1, 2, -1)) is extractor._cached[1]
    np.testing.assert_allclose(extractor(two).detach(), first.detach().repeat(2, 1), rtol=1e-6)
    np.testing.assert_allclose(extractor(one).detach(), first.detach())
    other = {**one, "edge_index": one["edge_index"].flip(-1)}  # another graph, same batch size
    fresh = GraphExtractor(env.observation_space, hidden=8)
    fresh.load_state_dict(extractor.state_dict())
    np.testing.assert_allclose(extractor(other).detach(), fresh(other).detach(), rtol=1e-6)


def test_sb3_subprocess_workers_make_the_env_by_its_module_qualified_id():
    """The workers start fresh (spawn) and import nothing of ours until Gymnasium does."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    envs = make_vec_env("rlplace.learn.env:rlplace/Placement-v0", n_envs=2, vec_env_cls=SubprocVecEnv,
                        vec_env_kwargs={"start_method": "spawn"},
                        env_kwargs={"graph": "layered", "graph_options": {"num_ops": 30}, "cluster": "baechi_2080"})
    try:
        envs.reset()
        _, reward, _, info = envs.step(np.stack([envs.action_space.sample() for _ in range(2)]))
        assert all(i["step_time"] > 0 for i in info) and np.all(reward < 0)
    finally:
        envs.close()
