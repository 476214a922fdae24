"""Keras / TensorFlow: a Keras model (or a function building a loss) as a TensorFlow training
step (``TFModel``, ``rlplace.tf.keras_model``) and its OpGraph (``rlplace.tf.extract``).

Costs are analytical by default (``rlplace.costs``: roofline of a named device; the op types
without a formula are in ``rlplace.costs.op_costs(graph).unknown_types``) or profiled on this
machine (``rlplace.tf.profile``). A model given as a source (``"package.module:function"`` or a
``.keras`` file) comes back with ``source``, the spec ``backend=tf`` rebuilds it from
(``TFBackend(model=source)``, or ``backend.options.model`` in a config).

``apply_placement`` pins the imported step's ops to a placement's devices, as the measuring
worker does, so the placed step runs in a ``tf.compat.v1.Session``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rlplace.costs import with_analytical_costs
from rlplace.errors import ConfigError
from rlplace.export import placed_devices
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.tf.builder import ModelBuilder, TFModel
from rlplace.tf.extract import extract
from rlplace.tf.keras_model import keras_training_step, loss_training_step
from rlplace.tf.measure import apply_placement as _pin
from rlplace.tf.sources import build_model, is_source


@dataclass
class KerasImport:
    model: TFModel
    graph: OpGraph
    source: dict[str, Any] | None  # the backend=tf model spec; None for an in-memory model
    seconds: float  # wall time of building, extracting and costing


def from_keras(model: Any, batch_size: int = 1, loss: str = "auto", learning_rate: float = 0.01,
               args: dict[str, Any] | None = None, name: str | None = None, costs: str = "analytical",
               device: Any = "v100", **profile_options: Any) -> KerasImport:
    """``model``: a ``keras.Model``, a function returning one (called with ``args``), or a
    source string (``"package.module:function"``, ``"model.keras"``). ``costs``:
    ``"analytical"`` (on ``device``), ``"profile"`` (this machine; ``profile_options`` go to
    ``rlplace.tf.profile.profile``) or ``"none"``."""
    start = time.perf_counter()
    source = None
    if isinstance(model, str):
        if not is_source(model):
            raise ConfigError(f"from_keras: {model!r} is neither 'package.module:function' nor a .keras file")
        source = {"name": model, "batch_size": batch_size, "loss": loss, "learning_rate": learning_rate,
                  "args": dict(args or {})}
        tf_model = build_model(source)
    else:
        tf_model = keras_training_step(model, batch_size, loss, learning_rate, name, model_args=args)
    return KerasImport(tf_model, _graph(tf_model, name, costs, device, profile_options), source,
                       time.perf_counter() - start)


def from_loss(build_loss: Callable[[ModelBuilder], Any], batch_size: int = 1, learning_rate: float = 0.01,
              name: str = "model", costs: str = "analytical", device: Any = "v100",
              **profile_options: Any) -> KerasImport:
    """The training step of the loss ``build_loss(b)`` builds in a ``ModelBuilder`` ``b``
    (``rlplace.tf.keras_model.loss_training_step``). To measure it with ``backend=tf``, put a
    function returning ``loss_training_step(...)`` in a module and import that source."""
    start = time.perf_counter()
    tf_model = loss_training_step(build_loss, batch_size, learning_rate, name)
    return KerasImport(tf_model, _graph(tf_model, name, costs, device, profile_options), None,
                       time.perf_counter() - start)


def apply_placement(imported: KerasImport, placement: Placement, devices: Sequence[str] | None = None) -> TFModel:
    """Pin every op of ``imported``'s training step to its device in ``placement``
    (``tf.Operation._set_device``, as ``rlplace.tf.measure`` does before measuring; ops TensorFlow
    adds outside the step follow their colocation group or stay free). ``devices[k]`` is the
    TensorFlow name of the cluster's device k (default ``/device:GPU:k``; several logical CPU
    devices: ``rlplace.tf.devices.configure_devices``, at the start of a process). Returns
    ``imported.model``: run its ``train_op`` in ``tf.compat.v1.Session(graph=model.graph)``."""
    device_of, names = placed_devices(imported.graph, placement, devices, "/device:GPU:{}")
    _pin(imported.model, dict(zip(imported.graph.names, device_of.tolist())), names)
    return imported.model


def _graph(tf_model: TFModel, name: str | None, costs: str, device: Any, profile_options: dict) -> OpGraph:
    if costs == "analytical":
        return with_analytical_costs(extract(tf_model, name), device)
    if costs == "profile":
        from rlplace.tf.profile import profile

        return profile(tf_model, name=name, **profile_options).graph
    if costs == "none":
        return extract(tf_model, name)
    raise ConfigError(f"costs must be 'analytical', 'profile' or 'none', got {costs!r}")
