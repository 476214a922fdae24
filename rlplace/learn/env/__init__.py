"""Gymnasium environments for placement. Importing this package registers
``rlplace/Placement-v0``::

    import gymnasium, rlplace.learn.env
    env = gymnasium.make("rlplace/Placement-v0", graph="layered", cluster="baechi_2080")
    envs = gymnasium.make_vec("rlplace/Placement-v0", num_envs=4, graph="layered")  # PlacementVectorEnv

Where this package may not be imported yet (the worker processes of SB3's ``SubprocVecEnv``,
a script that only names the id), ``"rlplace.learn.env:rlplace/Placement-v0"`` makes Gymnasium
import it first (Gymnasium 1.x has no entry-point plugins).
"""

import gymnasium

from rlplace.learn.env.placement import Accounting, PlacementEnv
from rlplace.learn.env.pyg import observation_to_data
from rlplace.learn.env.vector import PlacementVectorEnv
from rlplace.learn.env.wrappers import DeviceMask, RelativeReward

if "rlplace/Placement-v0" not in gymnasium.registry:
    gymnasium.register(id="rlplace/Placement-v0", entry_point="rlplace.learn.env.placement:PlacementEnv",
                       vector_entry_point="rlplace.learn.env.vector:PlacementVectorEnv")

__all__ = ["Accounting", "DeviceMask", "PlacementEnv", "PlacementVectorEnv", "RelativeReward", "observation_to_data"]
