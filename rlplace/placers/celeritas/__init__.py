"""Celeritas (Celeritas §4-6): its orders (``orders``: DFS-TOPO, CPD-TOPO), Optimal Operation
Fusion (``fusion``) and its placers (``placer``: Order-Place, Adjusting Placement, registered as
``order_place`` and ``celeritas``)."""

from rlplace.placers.celeritas.fusion import FusionStats, fusion_stats, optimal_fusion
from rlplace.placers.celeritas.orders import cpd_topo, dfs_topo, edge_comm_time, levels
from rlplace.placers.celeritas.placer import CeleritasPlacer, OrderPlacer

__all__ = ["CeleritasPlacer", "FusionStats", "OrderPlacer", "cpd_topo", "dfs_topo", "edge_comm_time", "fusion_stats",
           "levels", "optimal_fusion"]
