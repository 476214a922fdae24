"""PlacementVectorEnv: k one-shot placement episodes per step, evaluated as one batch.

``gymnasium.make_vec("rlplace/Placement-v0", num_envs=k, vectorization_mode="vector_entry_point",
...)`` builds it. Unlike ``SyncVectorEnv`` (k environments stepped one after the other), one
``PlacementEnv`` takes all k actions of a step and hands their placements to the backend
together (``PlacementEnv.step_batch``): a parallel backend (``rlplace.distributed.RayBackend``)
evaluates them concurrently, and the k samples share one cache and one ``accounting``.
Every episode ends after its step; autoreset is ``SAME_STEP``: ``info["final_info"]`` and
``info["final_obs"]`` hold what each episode ended with, the observation is the reset one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from rlplace.learn.env.placement import PlacementEnv
from rlplace.errors import ConfigError


class PlacementVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, **env_options):
        self.env = PlacementEnv(**{"mode": "one_shot", **env_options})
        if self.env.mode != "one_shot":
            raise ConfigError(f"the vector environment takes mode='one_shot', got {self.env.mode!r}")
        self.num_envs = num_envs
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = self.env.render_mode
        self._observations = create_empty_array(self.single_observation_space, num_envs)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            infos = self._add_info(infos, info, i)
        return self._batch([obs] * self.num_envs), infos

    def step(self, actions):
        steps = self.env.step_batch(np.asarray(actions))
        obs, info = self.env.reset()
        infos: dict[str, Any] = {}
        for i, (final_obs, _, _, _, final_info) in enumerate(steps):
            infos = self._add_info(infos, {"final_obs": final_obs, "final_info": final_info}, i)
            infos = self._add_info(infos, info, i)
        rewards = np.array([step[1] for step in steps], dtype=np.float64)
        done = np.ones(self.num_envs, dtype=np.bool_)
        return self._batch([obs] * self.num_envs), rewards, done, ~done, infos

    def close_extras(self, **kwargs) -> None:
        self.env.close()

    def _batch(self, observations: list) -> Any:
        self._observations = concatenate(self.single_observation_space, observations, self._observations)
        return self._observations
