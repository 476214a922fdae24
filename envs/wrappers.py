"""Wrappers for PlacementEnv: reward relative to a reference placement, and action masks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlplace.errors import ConfigError
from rlplace.placers import make_placer


class RelativeReward(gym.RewardWrapper):
    """Divide the reward by the magnitude of a reference placement's reward, so the reference
    scores -1 and better placements score above it. The reference is a step time in seconds or
    the name of a placer (e.g. ``"m_etf"``), run once on the environment's own backend."""

    def __init__(self, env: gym.Env, reference: float | str):
        super().__init__(env)
        base = env.unwrapped
        if isinstance(reference, str):
            placement = make_placer(reference).place(base.graph, base.cluster)
            result = base.evaluate(placement)
            if result.oom:
                raise ConfigError(f"reference placer {reference!r} runs out of memory on {base.graph.name!r}")
            reference = result.step_time
        self.reference_step_time = float(reference)
        self.scale = abs(base.reward_of_step_time(self.reference_step_time))
        if not self.scale > 0:
            raise ConfigError(f"the reference step time {reference} gives a zero reward: nothing to divide by")

    def reward(self, reward):
        return reward / self.scale


class DeviceMask(gym.ObservationWrapper):
    """Sequential mode: add ``action_mask`` to the observation, 1 for every device that can
    still take the current unit. A device is masked when its persistent bytes, plus the unit's,
    plus the largest temporary and output bytes of one of the unit's ops, exceed its memory: such
    a placement surely runs out of memory. If every device is full, none is masked (best effort)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        base = env.unwrapped
        if base.mode != "sequential":
            raise ConfigError("DeviceMask needs the sequential mode (one unit per step)")
        g, units = base.graph, base.units
        self._need = np.zeros(base.num_units)
        np.maximum.at(self._need, units.group_of, g.temporary_bytes + g.output_total)
        self._need += base._unit_persistent
        self.observation_space = spaces.Dict({
            **env.observation_space.spaces,
            "action_mask": spaces.Box(0, 1, (base.num_devices,), np.int8)})

    def observation(self, observation):
        return {**observation, "action_mask": self.action_masks()}

    def action_masks(self) -> np.ndarray:
        base = self.env.unwrapped
        unit = min(base._position, base.num_units - 1)
        placed = base._placement >= 0
        persistent = np.bincount(base._placement[placed], weights=base._unit_persistent[placed],
                                 minlength=base.num_devices)
        mask = (persistent + self._need[base.order[unit]] <= base.cluster.memory).astype(np.int8)
        return mask if mask.any() else np.ones_like(mask)
