"""Learned placement policies (networks implementing ``rlplace.agents.base.Policy``)."""
