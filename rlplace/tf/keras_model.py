"""Keras models as TensorFlow training steps, and the model sources ``backend=tf`` rebuilds.

``keras_training_step`` builds a Keras model inside a ``ModelBuilder`` graph (graph mode, so
its weights are ``VarHandleOp`` ops like the zoo's), feeds it synthetic placeholders of its
input shapes at ``batch_size``, adds a loss and a plain SGD update. ``keras.backend.clear_session``
runs first, so Keras's automatic layer names, and therefore the op names, are the same in every
process that builds the same model: a worker can rebuild it and apply a placement by name.

A model source (``rlplace.tf.sources.build_model(spec)``) is ``{name: ..., <knobs>}`` where ``name`` is

* a zoo model (``rlplace.zoo.TF_MODELS``; knobs as in ``rlplace.zoo.build_tf_model``),
* ``"package.module:function"``: ``function(**args)`` returns a Keras model or a ``TFModel``,
* a ``.keras`` file (``model.save("m.keras")``),

and the knobs of the last two are ``batch_size`` (default 1), ``loss``, ``learning_rate`` and
``args`` (keyword arguments of the function). ``rlplace.tf.sources`` reads a spec (without
TensorFlow, so that ``backend=tf`` checks it before starting its worker).
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from rlplace.errors import ConfigError
from rlplace.tf.builder import ModelBuilder, TFModel

v1 = tf.compat.v1


def keras_training_step(model: Any, batch_size: int = 1, loss: str = "auto",
                        learning_rate: float = 0.01, name: str | None = None,
                        model_args: dict[str, Any] | None = None) -> TFModel:
    """One SGD training step of a Keras model. ``model``: a Keras model (rebuilt from its
    config in the step's graph, weights not copied: step time does not depend on them) or a
    function returning one (called in the graph with ``model_args``; a function that returns a
    ``TFModel`` instead built the whole step itself, which is returned as is). ``loss``: ``"auto"``
    (sparse categorical cross-entropy for a ``[batch, classes]`` output, from logits unless
    the last layer is a softmax; else the mean square of the output), ``"sparse_ce"`` or
    ``"mse"``."""
    import keras

    keras.backend.clear_session()
    label = name or getattr(model, "name", None) or getattr(model, "__name__", "keras_model")
    with ModelBuilder(label, batch_size) as b:
        net = keras.models.clone_model(model) if isinstance(model, keras.Model) else model(**(model_args or {}))
        if isinstance(net, TFModel):
            return net
        if not isinstance(net, keras.Model):
            raise ConfigError(f"keras model {label!r}: the builder returned {type(net).__name__}, not a keras.Model")
        inputs = [b.placeholder(f"input_{i}", (batch_size, *_static(t.shape[1:], label)), t.dtype)
                  for i, t in enumerate(net.inputs)]
        out = net(inputs[0] if len(inputs) == 1 else inputs, training=True)
        value = _loss(b, out, loss, _ends_in_softmax(net), label)
        return b.finish(value, lambda step: v1.train.GradientDescentOptimizer(learning_rate))


def loss_training_step(build_loss: Callable[[ModelBuilder], tf.Tensor], batch_size: int = 1,
                       learning_rate: float = 0.01, name: str = "model") -> TFModel:
    """One SGD step of the loss ``build_loss(b)`` builds with ``tf.compat.v1``/Keras calls in
    the builder ``b`` (inputs through ``b.placeholder``, layer tags through ``b.layer``)."""
    import keras

    keras.backend.clear_session()
    with ModelBuilder(name, batch_size) as b:
        return b.finish(build_loss(b), lambda step: v1.train.GradientDescentOptimizer(learning_rate))


def _static(dims, label: str) -> tuple[int, ...]:
    if any(d is None for d in dims):
        raise ConfigError(f"keras model {label!r}: input shape {tuple(dims)} has unknown dimensions besides "
                          f"the batch; build it with a fixed input_shape")
    return tuple(int(d) for d in dims)


def _ends_in_softmax(net) -> bool:
    import keras

    activation = getattr(net.layers[-1], "activation", None) if net.layers else None
    return activation is keras.activations.softmax


def _loss(b: ModelBuilder, out: tf.Tensor, loss: str, probabilities: bool, label: str) -> tf.Tensor:
    import keras

    if loss == "auto":
        loss = "sparse_ce" if out.shape.rank == 2 else "mse"
    if loss == "sparse_ce":
        labels = b.placeholder("labels", (b.batch_size,), "int32", high=int(out.shape[-1]))
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, out, from_logits=not probabilities))
    if loss == "mse":
        return tf.reduce_mean(tf.square(out))
    raise ConfigError(f"keras model {label!r}: loss must be 'auto', 'sparse_ce' or 'mse', got {loss!r}")
