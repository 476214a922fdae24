"""Baechi (SoCC'20): the placers m-TOPO, m-ETF and m-SCT (``placer``), the graph optimizer they
run first (``optimizer``: colocation, co-placement, fusion, forward-operator-based placement) and
m-SCT's favorite children from the LP relaxation of its schedule (``sct_lp``)."""

from rlplace.placers.baechi.optimizer import GraphOptimizer
from rlplace.placers.baechi.placer import METFPlacer, MSCTPlacer, MTopoPlacer

__all__ = ["GraphOptimizer", "METFPlacer", "MSCTPlacer", "MTopoPlacer"]
