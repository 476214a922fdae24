"""PyTorch model sources for ``graph=torch_model`` and ``backend=torch``: a spec
``{name: "package.module:function", args: {...}, learning_rate: ...}`` names a function that
returns ``(module, inputs, targets)`` (``rlplace.zoo.torch_models`` has examples). The graph
source imports its training step at module granularity (``from_torch(...,
granularity="module")``: placements never split a module, so each one is a ``device_map``), and
the backend rebuilds the same model to run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.import_.source import resolve

if TYPE_CHECKING:  # the module imports PyTorch only when a model is built (backend=torch's options are checked without it)
    import torch

    from rlplace.import_.torch import TorchImport

SPEC_KEYS = ("name", "args", "learning_rate")


@dataclass
class TorchModel:
    """What a spec builds: the module, its inputs and targets, and the SGD learning rate."""

    module: torch.nn.Module
    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]
    learning_rate: float

    def imported(self, costs: str = "none", **options) -> TorchImport:
        from rlplace.import_.torch import from_torch

        return from_torch(self.module, self.inputs, self.targets, learning_rate=self.learning_rate,
                          costs=costs, granularity="module", **options)


def check_spec(spec: dict[str, Any]) -> None:
    """ConfigError for a spec that cannot name a model, before anything is imported."""
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"model.{unknown[0]}: a PyTorch model source takes only {', '.join(SPEC_KEYS)}")
    name = spec.get("name")
    module, _, attr = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not module or not attr:
        raise ConfigError(f"model.name: {name!r} is not 'package.module:function'")


def build_model(spec: dict[str, Any]) -> TorchModel:
    import torch

    check_spec(spec)
    built = resolve(spec["name"])(**dict(spec.get("args") or {}))
    if not (isinstance(built, tuple) and len(built) in (2, 3) and isinstance(built[0], torch.nn.Module)):
        raise ConfigError(f"model.name: {spec['name']} must return (module, inputs) or (module, inputs, targets)")
    module, inputs, targets = (*built, ()) if len(built) == 2 else built
    listed = [[t] if isinstance(t, torch.Tensor) else list(t) for t in (inputs, targets)]
    return TorchModel(module, listed[0], listed[1], float(spec.get("learning_rate", 0.01)))


def model_graph(model: dict[str, Any], costs: str = "profile", device: str = "v100", profile_steps: int = 3) -> OpGraph:
    """``graph=torch_model``: the OpGraph of the spec's training step; ``costs`` as
    ``from_torch`` takes them (``profile``: measured on this machine's CPU; ``analytical``:
    the roofline of ``device``)."""
    return build_model(model).imported(costs, device=device, profile_steps=profile_steps).graph
