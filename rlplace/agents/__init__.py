"""rlplace.agents: learned placers: policies, REINFORCE and PPO (the learned-placers issue)."""
