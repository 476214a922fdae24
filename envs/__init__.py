"""rlplace.envs: Gymnasium environments for placement (the environment issue)."""
