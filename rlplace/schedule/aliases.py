"""Which input buffer an op's output shares under TensorFlow's memory rules
(``Cluster.memory_model = "tf_reuse"``), computed once per graph.

TensorFlow's executor hands tensors around by reference-counted buffer; a buffer is freed when
its last reference goes (the last reader of every tensor that shares it has run, and its sends
are done). Two kinds of op return an input's buffer instead of a new one:

* views (``Identity``, ``Reshape``, ``Squeeze``, ...: ``OpKernelContext::set_output`` of the
  input, ``Tensor::CopyFrom``): the output always shares the input's buffer, whatever else reads
  the input;
* in-place kernels (``OpKernelContext::forward_input_or_allocate_output``: element-wise unary
  and binary ops, their gradients, ``BiasAdd``, ``AddN``, ``Softmax``, ...): the output takes the buffer of
  an input of the same size when no one else holds a reference to it. Here: when the input has
  no other reader and is not itself a view, so the decision does not depend on the schedule
  (TensorFlow also forwards to the last of several readers, which this rule leaves out), and
  when the graph gives the output no bytes of its own (a profile that saw the op allocate
  nothing for it: ``rlplace.tf.profile``; then it shares an input of the same size, one that it
  alone reads where there is one, as TensorFlow can forward only a buffer no one else holds).

An output shares only a transient buffer of the same size (never a variable's or a constant's:
TensorFlow's variable keeps a reference). A shared output occupies no bytes of its own; the
buffer it shares lives until the output's readers are done too (``rlplace.sim``,
``rlplace.schedule.trace.memory_peaks``).
"""

from __future__ import annotations

import functools

import numpy as np

from rlplace.graph import OpGraph

# Ops whose output is its input's buffer (a view); rlplace.tf.extract gives them no output bytes.
VIEW_OPS = frozenset({"ReadVariableOp", "Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims",
                      "StopGradient", "Snapshot"})
# Kernels that call forward_input_or_allocate_output (tensorflow/core/kernels: cwise_ops_common.h,
# relu_op.h, bias_op.cc, aggregate_ops.cc, softmax_op.cc, zeros_like/ones_like in constant_op.cc).
IN_PLACE_OPS = frozenset({
    "Abs", "Neg", "Sign", "Square", "Sqrt", "Rsqrt", "Reciprocal", "Inv", "Exp", "Expm1", "Log", "Log1p",
    "Tanh", "Sigmoid", "Sin", "Cos", "Erf", "Floor", "Ceil", "Round", "Softplus", "Softsign",
    "Relu", "Relu6", "Elu", "Selu", "LeakyRelu",
    "Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "DivNoNan", "Maximum", "Minimum", "Pow",
    "SquaredDifference", "FloorDiv", "FloorMod",
    "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "LeakyReluGrad", "TanhGrad", "SigmoidGrad",
    "RsqrtGrad", "SqrtGrad", "ReciprocalGrad", "InvGrad", "SoftplusGrad",
    "BiasAdd", "AddN", "Softmax", "LogSoftmax", "ZerosLike", "OnesLike"})


def shared_input(graph: OpGraph, memory_model: str) -> np.ndarray:
    """Per tensor, the tensor whose buffer it shares on its producer's device (-1: a buffer of
    its own). All -1 under the ``default`` model."""
    if memory_model == "default":
        return np.full(len(graph.tensor_src), -1, dtype=np.int64)
    return _tf_reuse(graph)


def own_bytes(graph: OpGraph, shared: np.ndarray) -> np.ndarray:
    """Per tensor, the bytes it takes in its producer's memory: none when it shares a buffer."""
    return np.where(shared >= 0, 0, graph.tensor_output_bytes).astype(np.int64)


def buffer_roots(shared: np.ndarray) -> np.ndarray:
    """Per tensor, the tensor at the start of its chain of shared buffers (itself if none)."""
    root = np.arange(len(shared), dtype=np.int64)
    for t in np.flatnonzero(shared >= 0):  # a shared input comes from an earlier op
        root[t] = root[shared[t]]
    return root


@functools.lru_cache(maxsize=16)
def _tf_reuse(graph: OpGraph) -> np.ndarray:
    shared = np.full(len(graph.tensor_src), -1, dtype=np.int64)
    transient = graph.tensor_output_bytes > 0  # the tensor's buffer is a step's allocation
    readers = np.diff(graph.tensor_ptr)
    for t in range(len(graph.tensor_src)):  # tensors in topological order of their producers
        i, port, size = int(graph.tensor_src[t]), int(graph.tensor_port[t]), graph.tensor_bytes[t]
        op_type = graph.op_type[i]
        if port < 0 or size == 0:
            continue
        view = op_type in VIEW_OPS
        unallocated = graph.tensor_output_bytes[t] == 0
        if not (view or unallocated or op_type in IN_PLACE_OPS):
            continue
        inputs = graph.edge_tensor[graph.in_edges[graph.in_ptr[i]:graph.in_ptr[i + 1]]]
        inputs = inputs[graph.tensor_port[inputs] >= 0]
        inputs = inputs[np.argsort(readers[inputs] != 1, kind="stable")]  # sole readers first
        for a in inputs:
            if graph.tensor_bytes[a] != size or not transient[a]:
                continue
            if view or unallocated or (readers[a] == 1 and shared[a] < 0):
                shared[t] = a
                transient[t] = True
                break
    shared.flags.writeable = False
    return shared
