"""Model sources for ``backend=tf`` and ``graph=tf_model``: which TensorFlow training step a
spec ``{name: ..., <knobs>}`` names (see ``rlplace.tf.keras_model``), checked without importing
TensorFlow and built in the process that runs it.

``name`` is a zoo model (``rlplace.zoo.TF_MODELS``), ``"package.module:function"`` (the
function returns a Keras model or a ``TFModel``) or a ``.keras`` file. A TensorFlow SavedModel
directory is not a source: it holds traced functions, not layers, so its training step would be
one opaque call op with nothing to place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlplace.errors import ConfigError
from rlplace.import_.source import resolve

SOURCE_KNOBS = ("batch_size", "loss", "learning_rate", "args")


def is_source(name: Any) -> bool:
    """Whether ``name`` names a model by module path or file (not a zoo name)."""
    return isinstance(name, str) and (":" in name or name.endswith(".keras"))


def check_source(spec: dict[str, Any]) -> None:
    """ConfigError for a source spec that cannot work, before TensorFlow runs."""
    name = spec.get("name")
    unknown = sorted(set(spec) - {"name", *SOURCE_KNOBS})
    if unknown:
        raise ConfigError(f"model.{unknown[0]}: a model source takes only {', '.join(SOURCE_KNOBS)}")
    if name.endswith(".keras"):
        if not Path(name).is_file():
            raise ConfigError(f"model.name: no such Keras file {name!r}")
        return
    module, _, attr = name.partition(":")
    if not module or not attr:
        raise ConfigError(f"model.name: {name!r} is not 'package.module:function'")


def check_spec(spec: dict[str, Any]) -> None:
    """ConfigError for a spec that names no zoo model and no source."""
    from rlplace.zoo import TF_MODELS

    name = spec.get("name")
    if is_source(name):
        check_source(spec)
    elif name not in TF_MODELS:
        raise ConfigError(f"model.name must be a zoo model ({', '.join(TF_MODELS)}), 'package.module:function' "
                          f"or a .keras file, got {name!r}")


def build_model(spec: dict[str, Any]):
    """The TFModel of a model spec (see the module docstring)."""
    from rlplace.tf.keras_model import keras_training_step
    from rlplace.zoo import build_tf_model

    knobs = dict(spec)
    name = knobs.pop("name", None)
    if not is_source(name):
        return build_tf_model(name, **knobs)
    check_source(spec)
    args = dict(knobs.pop("args", None) or {})
    if name.endswith(".keras"):
        import keras

        return keras_training_step(lambda: keras.models.load_model(name, compile=False, safe_mode=True),
                                   name=Path(name).stem, **knobs)
    return keras_training_step(resolve(name), name=name.partition(":")[2], model_args=args, **knobs)

