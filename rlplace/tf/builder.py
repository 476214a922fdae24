"""Building TensorFlow training graphs: ``TFModel`` (one training step in graph mode) and
``ModelBuilder`` (inputs, ``layer`` tags for expert placements, optimizer step).

A model is built in its own ``tf.Graph`` with the ``tf.compat.v1`` API, so variables are graph
ops (``VarHandleOp``) and optimizer updates carry ``_class`` colocation attributes. Building is
deterministic: the same builder and knobs give the same op names, so a worker process can rebuild
the graph from the config and apply a placement by name (``op._set_device``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


@dataclass(frozen=True)
class InputSpec:
    """A placeholder fed with synthetic data: floats are standard normal, integers are uniform
    in ``[0, high)`` (token ids, labels)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    high: int | None = None


@dataclass
class TFModel:
    """One training step: running ``train_op`` is forward + backward + optimizer update."""

    name: str
    graph: tf.Graph
    train_op: tf.Operation
    loss: tf.Tensor
    init_op: tf.Operation
    inputs: list[InputSpec]
    batch_size: int
    layers: dict[str, int] = field(default_factory=dict)  # op name -> layer tag

    def feed_dict(self, seed: int = 0) -> dict[tf.Tensor, np.ndarray]:
        """Synthetic inputs for every placeholder; same seed, same data."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for spec in self.inputs:
            tensor = self.graph.get_tensor_by_name(f"{spec.name}:0")
            if spec.high is None:
                value = rng.standard_normal(spec.shape).astype(spec.dtype)
            else:
                value = rng.integers(0, spec.high, spec.shape).astype(spec.dtype)
            feeds[tensor] = value
        return feeds


class ModelBuilder:
    """Collects what a zoo builder declares while it builds a model in ``self.graph``.

    Use as ``with ModelBuilder(name, batch_size) as b:`` and build with ``tf.compat.v1`` calls
    inside; ``b.layer(k)`` tags the ops created in its block (innermost block wins), and
    ``b.finish(loss, optimizer)`` adds the backward pass and the update and returns the model.
    """

    def __init__(self, name: str, batch_size: int):
        self.name = name
        self.batch_size = batch_size
        self.graph = tf.Graph()
        self.inputs: list[InputSpec] = []
        self.layers: dict[str, int] = {}
        self._context = None

    def __enter__(self) -> ModelBuilder:
        self._context = self.graph.as_default()
        self._context.__enter__()
        v1.set_random_seed(0)
        return self

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)

    def placeholder(self, name: str, shape: tuple[int, ...], dtype: str = "float32",
                    high: int | None = None) -> tf.Tensor:
        self.inputs.append(InputSpec(name, tuple(int(d) for d in shape), dtype, high))
        return v1.placeholder(tf.as_dtype(dtype), shape, name=name)

    @contextlib.contextmanager
    def layer(self, tag: int) -> Iterator[None]:
        """Tag every op created in the block that no inner block tagged."""
        start = len(self.graph.get_operations())
        yield
        for op in self.graph.get_operations()[start:]:
            self.layers.setdefault(op.name, tag)

    def finish(self, loss: tf.Tensor,
               optimizer: Callable[[tf.Variable], v1.train.Optimizer]) -> TFModel:
        """Backward pass and optimizer update; ``optimizer(global_step)`` makes the optimizer
        (the step lets it decay its learning rate) and the update increments the step."""
        global_step = v1.train.get_or_create_global_step()
        train_op = optimizer(global_step).minimize(loss, global_step=global_step, name="train_step")
        init_op = v1.global_variables_initializer()
        return TFModel(self.name, self.graph, train_op, loss, init_op, list(self.inputs),
                       self.batch_size, dict(self.layers))


def session_config(inter_op_threads: int = 1, intra_op_threads: int = 0) -> v1.ConfigProto:
    """Run the graph as built: no Grappler rewrites, no constant folding or CSE, so every
    profiled op is a graph op by its own name and placements apply op by op.
    ``inter_op_threads=1`` runs one op at a time per device, as the simulator assumes."""
    config = v1.ConfigProto(inter_op_parallelism_threads=inter_op_threads,
                            intra_op_parallelism_threads=intra_op_threads,
                            allow_soft_placement=False)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_common_subexpression_elimination = False
    config.graph_options.optimizer_options.do_function_inlining = False
    return config
