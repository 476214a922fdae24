"""Wrappers for PlacementEnv: reward relative to a reference placement, and action masks.

Both record their constructor arguments (``gymnasium.utils.RecordConstructorArgs``), so
``env.spec`` rebuilds a wrapped environment and Gymnasium's ``check_env`` passes on them."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlplace.errors import ConfigError
from rlplace.placers import make_placer


class RelativeReward(gym.RewardWrapper, gym.utils.RecordConstructorArgs):
    """Divide the reward by the magnitude of a reference placement's reward, so the reference
    scores -1 and better placements score above it. The reference is a step time in seconds or
    the name of a placer (e.g. ``"m_etf"``), run once on the environment's own backend."""

    def __init__(self, env: gym.Env, reference: float | str):
        gym.utils.RecordConstructorArgs.__init__(self, reference=reference)
        gym.RewardWrapper.__init__(self, env)
        base = env.unwrapped
        if isinstance(reference, str):
            placement = make_placer(reference).place(base.graph, base.cluster)
            result = base.evaluate(placement)
            if result.oom:
                raise ConfigError(f"reference placer {reference!r} runs out of memory on {base.graph.name!r}")
            reference = result.step_time
        try:
            seconds = math.nan if isinstance(reference, bool) else float(reference)
        except (TypeError, ValueError, OverflowError):
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigError(f"RelativeReward: the reference must be a placer's name or a step time > 0 "
                              f"(seconds), got {reference!r}")
        self.reference_step_time = seconds
        self.scale = abs(base.reward_of_step_time(self.reference_step_time))
        if not self.scale > 0:
            raise ConfigError(f"the reference step time {reference} gives a zero reward: nothing to divide by")

    def reward(self, reward):
        return reward / self.scale


class DeviceMask(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Sequential mode: add ``action_mask`` to the observation, 1 for every device that can
    still take the current unit (``PlacementEnv.action_masks``)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        if env.unwrapped.mode != "sequential":
            raise ConfigError("DeviceMask needs the sequential mode (one unit per step)")
        self.observation_space = spaces.Dict({
            **env.observation_space.spaces,
            "action_mask": spaces.Box(0, 1, (env.unwrapped.num_devices,), np.int8)})

    def observation(self, observation):
        return {**observation, "action_mask": self.action_masks().astype(np.int8)}

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()
