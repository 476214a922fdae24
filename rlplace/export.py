"""Placements to the forms other libraries apply (issue 43).

``torch_device_map``: a placement of a PyTorch training step imported with
``rlplace.import_.torch.from_torch(..., granularity="module")`` as the ``device_map`` that Hugging
Face ``accelerate.dispatch_model`` takes, ``{module name: torch device}``: one entry per module
that holds a parameter or buffer itself, on the device of that tensor's op. Plain PyTorch applies
it with ``model.get_submodule(name).to(device)`` per entry (``apply_device_map``), but then moving
activations between devices is the model's business; ``accelerate`` adds the hooks that do it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlplace.errors import PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement


def placed_devices(graph: OpGraph, placement: Placement, devices: Sequence[str] | None,
                   default: str) -> tuple[np.ndarray, list[str]]:
    """``placement``'s device per op of ``graph`` and the name of each device it uses:
    ``devices``, or ``default.format(k)`` for device k; a placement of another graph, or one that
    uses a device not named, is a PlacementError."""
    device_of = np.asarray(placement.device_of)
    if device_of.shape != (graph.num_ops,):
        raise PlacementError(f"placement has shape {device_of.shape} but graph {graph.name!r} has {graph.num_ops} ops")
    used = int(device_of.max(initial=0)) + 1
    names = [default.format(k) for k in range(used)] if devices is None else list(devices)
    if device_of.size and used > len(names):
        raise PlacementError(f"the placement uses device {used - 1} but {len(names)} devices were named")
    return device_of, names


def torch_device_map(imported, placement: Placement, devices: Sequence[str] | None = None) -> dict[str, str]:
    """``{module: device}`` for ``imported`` (a ``TorchImport``) placed by ``placement``;
    ``devices[k]`` is the torch device of the cluster's device k (default ``cuda:k``). A module
    whose tensors lie on several devices (a graph imported with ``granularity="op"``) or the
    root module holding a tensor itself has no entry that says where it runs: a PlacementError
    naming it."""
    graph = imported.graph
    device_of, names = placed_devices(graph, placement, devices, "cuda:{}")
    module_device: dict[str, int] = {}
    for state, modules in imported.holders.items():
        d = int(device_of[graph.index[state]])
        for module in modules:
            if module == "":
                raise PlacementError(f"{state} is held by the root module itself, which a device_map cannot place "
                                     "apart from its submodules: hold it in a submodule")
            if module_device.setdefault(module, d) != d:
                raise PlacementError(f"module {module!r} has tensors on devices {module_device[module]} and {d}: "
                                     "import the model with from_torch(..., granularity='module')")
    return {module: names[d] for module, d in module_device.items()}


def apply_device_map(model, device_map: dict[str, str]):
    """Move each module of ``device_map`` to its device (``module.to``); returns ``model``."""
    for name, device in device_map.items():
        model.get_submodule(name).to(device)
    return model
