"""Extract the OpGraph of one training step from a TensorFlow graph.

The step is every op that running ``train_op`` and the loss executes (their ancestors through
data and control inputs); initializers are left out. Per op:

* ``op_type``, ``output_shapes`` and ``output_bytes`` from the static shapes (dtype size ×
  elements; an unknown dimension counts as the batch size; resource, variant and string
  tensors as 0 bytes);
* ``persistent_bytes``: a variable's buffer (weights and optimizer slots) and a constant's
  value. Their outputs, and those of ops that only forward an input buffer (``ReadVariableOp``,
  ``Identity``, ``Reshape``, ...), occupy no new memory: ``output_bytes`` 0, while edges still
  carry the full tensor;
* ``colocation_group``: ops TensorFlow keeps on one device: the ``_class`` attribute
  (``op.colocation_groups()``) and every edge that carries a resource or reference tensor
  (TensorFlow's placer refuses to split those), joined transitively; named after the first
  ``loc:@`` target by name (else the first op by name); groups of one op are dropped;
* ``forward_op``: for an op under a ``gradients/`` scope, the forward op whose ``<op>_grad``
  scope holds it;
* ``layer``: the builder's tag, else its forward op's, else its colocation group's (optimizer
  updates follow their variable).

Edges: one per (producer output, consumer), carrying the tensor's bytes; control inputs are
edges with ``src_output = -1`` and 0 bytes. Costs are left at ``compute_time`` (default 0) and
``temporary_bytes`` 0 for the profiler (``rlplace.tf.profile``) to fill in.
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

from rlplace.coarsen import linked_names
from rlplace.graph import CONTROL, OpGraph
from rlplace.tf.builder import TFModel

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
# Ops whose output is (a view of) an input or persistent buffer: they allocate nothing.
FORWARDING_OPS = frozenset({"ReadVariableOp", "Identity", "IdentityN", "Reshape", "Squeeze",
                            "ExpandDims", "StopGradient", "Snapshot"})
_GRADIENT_SCOPE = re.compile(r"gradients(_\d+)?$")


def step_ops(model: TFModel) -> list[tf.Operation]:
    """The ops one training step runs, in creation order (a topological order)."""
    seen: set[str] = set()
    stack = [model.train_op, model.loss.op]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return [op for op in model.graph.get_operations() if op.name in seen]


def tensor_bytes(tensor: tf.Tensor, batch_size: int) -> int:
    dtype = tensor.dtype.base_dtype
    if dtype in (tf.resource, tf.variant, tf.string) or tensor.shape.rank is None:
        return 0
    count = 1
    for dim in tensor.shape:
        count *= batch_size if dim is None else dim
    return count * dtype.size


def _shape(tensor: tf.Tensor) -> list[int] | None:
    return None if tensor.shape.rank is None or None in tensor.shape else list(tensor.shape)


def _persistent_bytes(op: tf.Operation) -> int:
    if op.type in VARIABLE_OPS:
        shape, dtype = op.get_attr("shape"), tf.as_dtype(op.get_attr("dtype"))
        count = 1
        for dim in tf.TensorShape(shape):
            count *= dim if dim is not None else 0
        return count * dtype.size
    if op.type == "Const":
        return tensor_bytes(op.outputs[0], 0)
    return 0


def forward_op_name(name: str, known: set[str]) -> str | None:
    """``gradients/a/b/MatMul_grad/MatMul_1`` -> ``a/b/MatMul`` when that op is in ``known``."""
    parts = name.split("/")
    if not _GRADIENT_SCOPE.match(parts[0]):
        return None
    for i in range(1, len(parts) - 1):
        if parts[i].endswith("_grad"):
            candidate = "/".join(parts[1:i] + [parts[i][:-len("_grad")]])
            if candidate in known:
                return candidate
    return None


def colocation_groups(ops: list[tf.Operation]) -> dict[str, str]:
    """op name -> colocation group name, for ops that share a group with another step op: ops
    linked by a colocation reference or by reading a variable's resource or ref; a group is
    named after its smallest reference target (else its smallest op)."""
    pairs: list[tuple[str, str]] = []
    targets: set[str] = set()
    for op in ops:
        for loc in op.colocation_groups():
            target = loc.decode().removeprefix("loc:@")
            if target != op.name:
                targets.add(target)
                pairs.append((op.name, target))
        for inp in op.inputs:
            if inp.dtype.base_dtype == tf.resource or inp.dtype._is_ref_dtype:
                pairs.append((op.name, inp.op.name))
    component = linked_names(pairs)
    members: dict[int, list[str]] = {}
    for op in ops:
        if op.name in component:
            members.setdefault(component[op.name], []).append(op.name)
    label: dict[int, str] = {}
    for target in targets:
        label[component[target]] = min(label.get(component[target], target), target)
    return {name: label.get(c, min(names)) for c, names in members.items() if len(names) > 1 for name in names}


def op_records(model: TFModel, compute_time: float = 0.0) -> tuple[list[dict[str, Any]], list[tuple]]:
    """Op records and edges (``OpGraph.from_records`` input) of one training step."""
    ops = step_ops(model)
    names = {op.name for op in ops}
    groups = colocation_groups(ops)
    forward = {op.name: forward_op_name(op.name, names) for op in ops}

    records, edges = [], {}
    for op in ops:
        persistent = _persistent_bytes(op)
        out = [tensor_bytes(t, model.batch_size) for t in op.outputs]
        if persistent or op.type in FORWARDING_OPS:
            out = [0] * len(out)
        rec: dict[str, Any] = {"name": op.name, "op_type": op.type, "compute_time": compute_time,
                               "persistent_bytes": persistent, "temporary_bytes": 0,
                               "output_bytes": out, "output_shapes": [_shape(t) for t in op.outputs]}
        if op.name in groups:
            rec["colocation_group"] = groups[op.name]
        if forward[op.name] is not None:
            rec["forward_op"] = forward[op.name]
        records.append(rec)
        for t in op.inputs:
            edges.setdefault((t.op.name, op.name, t.value_index), tensor_bytes(t, model.batch_size))
        for c in op.control_inputs:
            edges.setdefault((c.name, op.name, CONTROL), 0)
    _tag_layers(records, model.layers)
    return records, [(s, d, b, p) for (s, d, p), b in edges.items()]


def _tag_layers(records: list[dict[str, Any]], tags: dict[str, int]) -> None:
    layer = {r["name"]: tags[r["name"]] for r in records if r["name"] in tags}
    for r in records:  # creation order: a forward op precedes its gradient ops
        fwd = r.get("forward_op")
        if r["name"] not in layer and fwd in layer:
            layer[r["name"]] = layer[fwd]
    group_layer: dict[str, int] = {}
    for r in records:
        if r.get("colocation_group") and r["name"] in layer:
            group_layer.setdefault(r["colocation_group"], layer[r["name"]])
    for r in records:
        tag = layer.get(r["name"], group_layer.get(r.get("colocation_group")))
        if tag is not None:
            r["layer"] = tag


def extract(model: TFModel, name: str | None = None, compute_time: float = 0.0) -> OpGraph:
    """The OpGraph of one training step of ``model`` (costs unprofiled: ``compute_time`` each)."""
    ops, edges = op_records(model, compute_time)
    return OpGraph.from_records(ops, edges, name=name or model.name)
