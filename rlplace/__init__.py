"""rlplace: device placement of ML training graphs.

The path of the data: OpGraph -> (coarsen) -> Placer -> Placement -> Backend -> StepResult.

    from rlplace import from_torch, load_preset, make_placer, simulate
    imported = from_torch(model, inputs, targets=targets, granularity="module")
    cluster = load_preset("baechi_2080")
    placement = make_placer("m_etf").place(imported.graph, cluster)
    print(simulate(imported.graph, cluster, placement).step_time)

The importers, the placers and the export load on first use (``from_torch`` imports torch,
``from_keras`` TensorFlow), so ``import rlplace`` stays light; where an extra is missing
(``pip install rlplace`` is the core), the error names the one to install (rlplace/extras.py).
"""

from importlib import import_module

from rlplace.cluster import Cluster, CommModel, Device, load_preset
from rlplace.extras import missing_extra
from rlplace.errors import BackendError, ConfigError, GraphError, PlacementError, RlplaceError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import StepResult, simulate

__version__ = "0.1.0"
_ON_FIRST_USE = {"make_placer": "rlplace.placers", "available_placers": "rlplace.placers",
                 "from_torch": "rlplace.import_.torch", "from_keras": "rlplace.import_.keras",
                 "load_fiddle": "rlplace.import_.fiddle", "torch_device_map": "rlplace.export",
                 "make_backend": "rlplace.backends"}
__all__ = ["BackendError", "Cluster", "CommModel", "ConfigError", "Device", "GraphError", "OpGraph",
           "Placement", "PlacementError", "RlplaceError", "StepResult", "load_preset", "simulate",
           *_ON_FIRST_USE]


def __getattr__(name: str):
    if name in _ON_FIRST_USE:
        try:
            module = import_module(_ON_FIRST_USE[name])
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, f"rlplace.{name}") or exc from None
        return getattr(module, name)
    raise AttributeError(f"module 'rlplace' has no attribute {name!r}")
