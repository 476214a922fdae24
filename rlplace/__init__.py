"""rlplace: device placement of ML training graphs.

The path of the data: OpGraph -> (coarsen) -> Placer -> Placement -> Backend -> StepResult.
"""

from rlplace.cluster import Cluster, CommModel, Device
from rlplace.errors import BackendError, ConfigError, GraphError, PlacementError, RlplaceError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import StepResult, simulate

__version__ = "0.1.0"
__all__ = ["BackendError", "Cluster", "CommModel", "ConfigError", "Device", "GraphError", "OpGraph",
           "Placement", "PlacementError", "RlplaceError", "StepResult", "simulate"]
