"""Public Python APIs raise the project's errors only (issue 44 item 4): the environment and its
wrappers, the simulator, the placers and the training loop's configs, fed values of the wrong
type, NaN, infinities, ragged or empty arrays and huge numbers by hypothesis. Any other
exception escaping is a failure; success is allowed (a value that happens to be fine)."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlplace.cluster import load_preset
from rlplace.errors import RlplaceError
from rlplace.learn.configs import TrainConfig, WarmStartConfig
from rlplace.learn.env import DeviceMask, PlacementEnv, RelativeReward
from rlplace.placement import Placement
from rlplace.placers import available_placers, make_placer
from rlplace.sim import simulate
from rlplace.zoo import layered

GRAPH, CLUSTER = layered(12, seed=0), load_preset("baechi_2080")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=5), st.just(math.inf), st.just(-math.inf), st.just(float("nan")))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                      max_leaves=6)


def only_project_errors(call):
    try:
        call()
    except RlplaceError as exc:
        assert "\n" not in str(exc).strip(), str(exc)


@SETTINGS
@given(key=st.sampled_from(["mode", "reward", "oom_penalty", "step_time_limit", "shaping", "cache_size", "order",
                            "grouping", "render_mode", "schedule_features"]), value=values)
def test_env_options(key, value):
    only_project_errors(lambda: PlacementEnv(GRAPH, CLUSTER, **{key: value}))


@pytest.fixture(scope="module")
def envs():
    return {mode: PlacementEnv(GRAPH, CLUSTER, mode=mode) for mode in ("one_shot", "sequential")}


@SETTINGS
@given(mode=st.sampled_from(["one_shot", "sequential"]), action=st.one_of(
    values, st.lists(st.integers(-5, 2**63 - 1), max_size=20),
    st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=12),
    st.lists(st.floats(allow_nan=True), min_size=12, max_size=12)))
def test_env_steps(envs, mode, action):
    env = envs[mode]
    env.reset(seed=0)
    only_project_errors(lambda: env.step(np.asarray(action, dtype=object) if isinstance(action, list) else action))
    only_project_errors(lambda: env.step(action))


@SETTINGS
@given(reference=values)
def test_relative_reward_references(reference):
    only_project_errors(lambda: RelativeReward(PlacementEnv(GRAPH, CLUSTER), reference))


def test_device_mask_wraps_only_the_sequential_env():
    only_project_errors(lambda: DeviceMask(PlacementEnv(GRAPH, CLUSTER, mode="one_shot")))


@SETTINGS
@given(devices=st.one_of(values, st.lists(st.integers(-3, 2**40), min_size=0, max_size=14),
                         st.lists(st.floats(allow_nan=True), min_size=12, max_size=12)))
def test_simulate_placements(devices):
    def run():
        placement = Placement(devices)
        simulate(GRAPH, CLUSTER, placement)
    only_project_errors(run)


@SETTINGS
@given(name=st.sampled_from(sorted(available_placers())), key=st.sampled_from(
    ["seed", "evaluations", "device", "memory_rounds", "single_fallback", "coplacement", "fusion", "weights",
     "start", "seconds", "sigma", "temperature"]), value=values)
def test_placer_options(name, key, value):
    if name == "exact" and key == "seconds" and isinstance(value, (int, float)) and value > 1:
        value = 1   # a valid time limit here is a real solve; its refusals are what is fuzzed
    only_project_errors(lambda: make_placer(name, **{key: value}).place(GRAPH, CLUSTER))


@SETTINGS
@given(key=st.sampled_from(["agent", "algorithm", "samples", "budget_placements", "budget_seconds",
                            "checkpoint_every", "order", "torch_device", "seed"]), value=values)
def test_train_configs(key, value):
    only_project_errors(lambda: TrainConfig(**{key: value}))


@SETTINGS
@given(key=st.sampled_from(["placer", "bc_steps", "bc_lr", "bc_target_accuracy", "bc_check_every"]), value=values)
def test_warm_start_configs(key, value):
    only_project_errors(lambda: TrainConfig(warm_start=WarmStartConfig(**{key: value})))
