"""RL algorithms implementing ``rlplace.agents.base.Algorithm``."""
