"""Analytical op costs for a named device, and profile perturbation.

``op_costs`` counts each op's floating-point operations and the bytes it moves to and from
device memory from the OpGraph alone: its ``op_type``, its ``output_shapes`` and the shapes of
its inputs (the producers' output shapes, through the edges and their ``src_output``). Edges do
not record which input slot they feed, so every formula reads its operands by shape, not by
position. Input bytes are the edges' bytes; an output's bytes are the larger of its
``output_bytes`` and the bytes its edges carry (an op writing into a forwarded buffer still
writes it). Types without a formula count as memory-bound (0 FLOPs, inputs + outputs moved);
a backward op of such a type takes its forward op's cost.

``roofline_time`` turns them into seconds on a ``DeviceSpec``:
``max(flops / peak_flops, bytes / memory_bandwidth) + launch_overhead`` (Williams et al.,
"Roofline", CACM 2009, plus a fixed per-op dispatch cost; none for the aten ops that launch no
kernel, ``NO_KERNEL``). ``with_analytical_costs`` fills an
OpGraph's ``compute_time`` that way, so graphs built without running them get costs for the
papers' GPUs.

``perturb`` is Baechi's profile-sensitivity experiment (Baechi §5.3, Figure 8).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

import numpy as np

from rlplace.errors import ConfigError
from rlplace.graph import OpGraph


# ----------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class DeviceSpec:
    """A device's roofline: fp32 ``peak_flops`` (FLOP/s), ``memory_bandwidth`` (bytes/s) and
    a fixed ``launch_overhead`` (s) every op pays (kernel launch and executor dispatch)."""

    name: str
    peak_flops: float
    memory_bandwidth: float
    launch_overhead: float = 5e-6

    def __post_init__(self):
        for key in ("peak_flops", "memory_bandwidth"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"device {self.name!r}: {key} must be a finite number > 0, got {value!r}")
        value = self.launch_overhead
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"device {self.name!r}: launch_overhead must be a finite number >= 0, "
                              f"got {value!r}")


DEVICES: dict[str, DeviceSpec] = {
    # Baechi §5: "4 NVIDIA GTX 2080 GPUs, with 8 GB" (the GeForce RTX 2080). NVIDIA Turing
    # architecture whitepaper, Table 1 (reference card): 2,944 CUDA cores at 1,710 MHz boost
    # = 10.07 TFLOPS fp32; 256-bit GDDR6 at 14 Gbps = 448 GB/s.
    "gtx2080": DeviceSpec("gtx2080", 10.07e12, 448e9),
    # Celeritas §5: "4 NVIDIA Tesla V100 GPUs (each has 32GB memory) ... via the PCIe bus".
    # NVIDIA V100 datasheet (2020), V100 PCIe: 14 TFLOPS fp32, HBM2 900 GB/s.
    "v100": DeviceSpec("v100", 14e12, 900e9),
    # Mars §5: "4 NVIDIA P100 Pascal GPUs (each has 12GB RAM)": the PCIe 12 GB card. NVIDIA
    # Tesla P100 datasheet (2016), P100 for PCIe: 9.3 TFLOPS fp32, 549 GB/s for the 12 GB model.
    "p100": DeviceSpec("p100", 9.3e12, 549e9),
    # Hierarchical Planner §3: "4 Nvidia Tesla K40s". NVIDIA Tesla K40 datasheet (2013):
    # 4.29 TFLOPS fp32 at base clock (GPU Boost is opt-in), GDDR5 288 GB/s.
    "k40": DeviceSpec("k40", 4.29e12, 288e9),
}


def device_spec(device: str | DeviceSpec | Mapping) -> DeviceSpec:
    """A preset by name (``gtx2080``, ``v100``, ``p100``, ``k40``), a DeviceSpec, or a custom
    spec as a mapping with ``peak_flops``, ``memory_bandwidth`` and optionally ``name`` and
    ``launch_overhead``."""
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, str):
        if device not in DEVICES:
            raise ConfigError(f"costs.device: unknown device {device!r} (known: {', '.join(DEVICES)})")
        return DEVICES[device]
    if isinstance(device, Mapping):
        unknown = set(device) - {"name", "peak_flops", "memory_bandwidth", "launch_overhead"}
        if unknown:
            raise ConfigError(f"costs.device: unknown key {sorted(unknown)[0]!r}")
        for key in ("peak_flops", "memory_bandwidth"):
            if key not in device:
                raise ConfigError(f"costs.device: a custom device needs {key!r}")
        return DeviceSpec(**{"name": "custom", **device})
    raise ConfigError(f"costs.device: expected a device name, a DeviceSpec or a mapping, got {device!r}")


# ----------------------------------------------------------------------------- per-op counts
class Tensor(NamedTuple):
    shape: list[int] | None
    nbytes: int

    @property
    def elements(self) -> float:
        """Element count from the shape, else from the bytes as 4-byte elements."""
        return float(math.prod(self.shape)) if self.shape is not None else self.nbytes / 4


Rule = Callable[[list[Tensor], list[Tensor]], tuple[float, float]]  # (inputs, outputs) -> (FLOPs, bytes)


def _moved(ins: list[Tensor], outs: list[Tensor]) -> float:
    return float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))


def _per_output_element(flops: float) -> Rule:
    return lambda ins, outs: (flops * sum(t.elements for t in outs), _moved(ins, outs))


def _per_input_element(flops: float) -> Rule:
    return lambda ins, outs: (flops * sum(t.elements for t in ins), _moved(ins, outs))


def _add_n(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    return max(len(ins) - 1, 0) * sum(t.elements for t in outs), _moved(ins, outs)


def _free(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    return 0.0, 0.0


def _matmul(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """C[..., m, n] = A[..., m, k] B[..., k, n], either operand possibly transposed: the
    trailing two dims give k^2 = (mk)(kn)/(mn) whatever the order and transposes; 2k FLOPs
    (multiply and add) per element of C."""
    mats = [t for t in ins if t.shape is not None and len(t.shape) >= 2]
    c = outs[0]
    if len(mats) != 2 or c.shape is None or len(c.shape) < 2 or math.prod(c.shape[-2:]) == 0:
        return 0.0, _moved(ins, outs)
    a, b = mats
    k = math.sqrt(math.prod(a.shape[-2:]) * math.prod(b.shape[-2:]) / math.prod(c.shape[-2:]))
    return 2.0 * k * c.elements, _moved(ins, outs)


def _conv_flops(big: Tensor, kernel: list[int]) -> float:
    """2 kh kw C_in FLOPs per element of ``big`` (NHWC with C_out last, filter
    [kh, kw, C_in, C_out])."""
    return 2.0 * big.elements * math.prod(kernel[:3])


def _pick(candidates: list[tuple[Tensor, Tensor]], ok: Callable[[list[int], list[int]], bool]):
    """The first (image, filter) pair of rank-4 shapes that passes ``ok``, else None."""
    for x, f in candidates:
        if x.shape is not None and f.shape is not None and len(x.shape) == 4 == len(f.shape) \
                and ok(x.shape, f.shape):
            return x, f
    return None


def _pairs(ins: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    four = [t for t in ins if t.shape is not None and len(t.shape) == 4]
    return [(x, f) for x in four for f in four if x is not f]


def _conv2d(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    y = outs[0].shape
    found = y is not None and _pick(_pairs(ins), lambda x, f: x[0] == y[0] and f[3] == y[3] and f[2] == x[3])
    return (_conv_flops(outs[0], found[1].shape) if found else 0.0), _moved(ins, outs)


def _conv2d_backprop_input(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """dx = conv_transpose(dy, filter): the forward convolution's FLOPs, counted on dy."""
    dx = outs[0].shape
    found = dx is not None and _pick(_pairs(ins),
                                     lambda dy, f: dy[0] == dx[0] and f[3] == dy[3] and f[2] == dx[3])
    return (_conv_flops(found[0], found[1].shape) if found else 0.0), _moved(ins, outs)


def _conv2d_backprop_filter(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """dfilter = x^T dy over the batch and positions: the forward convolution's FLOPs. Of the
    rank-4 inputs, dy is the one whose channels are C_out (the smaller when C_in = C_out:
    strides and VALID padding only shrink it)."""
    df = outs[0].shape
    if df is None or len(df) != 4:
        return 0.0, _moved(ins, outs)
    four = sorted((t for t in ins if t.shape is not None and len(t.shape) == 4), key=lambda t: t.elements)
    dy = next((t for t in four if t.shape[3] == df[3]), None)
    return (_conv_flops(dy, df) if dy is not None else 0.0), _moved(ins, outs)


def _depthwise_flops(dy: Tensor, kernel: list[int]) -> float:
    """2 kh kw FLOPs per element of the output (or of dy): each output channel reads one input
    channel (filter [kh, kw, C_in, multiplier], output channels C_in * multiplier)."""
    return 2.0 * dy.elements * kernel[0] * kernel[1]


def _depthwise(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """DepthwiseConv2dNative: the filter is the rank-4 operand with C_in = the image's channels
    and C_in * multiplier = the output's."""
    y = outs[0].shape
    found = y is not None and _pick(_pairs(ins), lambda x, f: x[0] == y[0] and f[2] == x[3] and f[2] * f[3] == y[3])
    return (_depthwise_flops(outs[0], found[1].shape) if found else 0.0), _moved(ins, outs)


def _depthwise_backprop_input(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """dx = the transposed depthwise convolution of dy: the forward FLOPs, counted on dy."""
    dx = outs[0].shape
    found = dx is not None and _pick(_pairs(ins),
                                     lambda dy, f: dy[0] == dx[0] and f[2] == dx[3] and f[2] * f[3] == dy[3])
    return (_depthwise_flops(found[0], found[1].shape) if found else 0.0), _moved(ins, outs)


def _depthwise_backprop_filter(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """dfilter [kh, kw, C_in, M]: dy is the rank-4 input with C_in * M channels (the smaller
    of the two when M = 1, as for Conv2DBackpropFilter)."""
    df = outs[0].shape
    if df is None or len(df) != 4:
        return 0.0, _moved(ins, outs)
    four = sorted((t for t in ins if t.shape is not None and len(t.shape) == 4), key=lambda t: t.elements)
    dy = next((t for t in four if t.shape[3] == df[2] * df[3]), None)
    return (_depthwise_flops(dy, df) if dy is not None else 0.0), _moved(ins, outs)


def _lstm(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """LSTMBlockCell / BlockLSTM: a rows x [in + h, 4h] gate matmul plus ~10 FLOPs per gate
    element. The kernel is the largest matrix; x is the largest input whose last dim is
    ``in`` (rows: its elements over that dim, the batch, times the steps for BlockLSTM)."""
    mats = [t for t in ins if t.shape is not None and len(t.shape) >= 2]
    w = max(mats, key=lambda t: t.elements, default=None)
    if w is None or len(w.shape) != 2:
        return 0.0, _moved(ins, outs)
    xs = [t for t in mats if t is not w and t.shape[-1] + w.shape[1] // 4 == w.shape[0]]
    if not xs:
        return 0.0, _moved(ins, outs)
    x = max(xs, key=lambda t: t.elements)
    rows = x.elements / x.shape[-1]
    return 2.0 * rows * w.elements + 10.0 * rows * w.shape[1], _moved(ins, outs)


def _gather(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """Reads the gathered rows and writes them (the table is not read whole; the indices are
    a row's fraction of the output)."""
    return 0.0, 2.0 * sum(t.nbytes for t in outs)


def _scatter(read_modify_write: int) -> Rule:
    """Scatter into a variable: reads the updates (the largest input) and reads/writes as many
    rows of the variable."""
    def rule(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
        updates = max(ins, key=lambda t: t.nbytes, default=Tensor(None, 0))
        return updates.elements, float((1 + read_modify_write) * updates.nbytes)
    return rule


# Optimizer updates: (buffers read and written besides the gradient: the variable and its
# slots; FLOPs per element), from the update rules in TensorFlow's training_ops.
_OPTIMIZERS = {
    "GradientDescent": (1, 2), "ProximalGradientDescent": (1, 6), "Momentum": (2, 4),
    "KerasMomentum": (2, 4), "Adagrad": (2, 5), "AdagradV2": (2, 6), "Adadelta": (3, 12),
    "RMSProp": (3, 10), "CenteredRMSProp": (4, 13), "Adam": (3, 14), "AdamWithAmsgrad": (4, 15),
    "AdaMax": (3, 10), "Ftrl": (3, 15), "FtrlV2": (3, 17), "AddSign": (2, 8), "PowerSign": (2, 10),
}
_APPLY = re.compile(r"^(Resource)?(Sparse)?Apply(\w+)$")


def _apply(buffers: int, flops: float) -> Rule:
    """The gradient (the largest input) is read once; each state buffer read and written."""
    def rule(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
        grad = max(ins, key=lambda t: t.nbytes, default=Tensor(None, 0))
        return flops * grad.elements, float((1 + 2 * buffers) * grad.nbytes)
    return rule


def _assign(reads_variable: bool) -> Rule:
    def rule(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
        value = max(ins, key=lambda t: t.nbytes, default=Tensor(None, 0))
        return (value.elements if reads_variable else 0.0), float((3 if reads_variable else 2) * value.nbytes)
    return rule


# No device work: graph sources, views of an input buffer, host-side shape arithmetic.
FREE_OPS = frozenset({
    "Placeholder", "PlaceholderWithDefault", "Const", "VarHandleOp", "VariableV2", "Variable",
    "ReadVariableOp", "Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
    "Snapshot", "NoOp", "Shape", "ShapeN", "Size", "Rank", "ConcatOffset", "InvertPermutation",
    "BroadcastGradientArgs", "BroadcastArgs", "_Arg", "_Retval"})
# One FLOP per output element (transcendentals included: these ops sit far below the ridge
# point of every device here, so the count does not change their time).
ELEMENTWISE_OPS = frozenset({
    "Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "DivNoNan", "FloorDiv", "FloorMod", "Mod",
    "Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "ReciprocalGrad", "Maximum",
    "Minimum", "Square", "SquaredDifference", "Sqrt", "SqrtGrad", "Rsqrt", "RsqrtGrad", "Pow",
    "Exp", "Log", "Log1p", "Expm1", "Erf", "Tanh", "TanhGrad", "Sigmoid", "SigmoidGrad", "Relu",
    "ReluGrad", "Relu6", "Relu6Grad", "Elu", "EluGrad", "Selu", "SeluGrad", "LeakyRelu",
    "LeakyReluGrad", "Softplus", "SoftplusGrad", "BiasAdd", "Cast", "Select", "SelectV2",
    "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd",
    "LogicalOr", "LogicalNot", "ClipByValue", "ZerosLike", "OnesLike", "LSTMBlockCellGrad",
    # random numbers (Philox counters: a handful of integer operations per element, still
    # memory-bound)
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal", "StatelessRandomUniformV2",
    "StatelessRandomNormalV2", "StatelessTruncatedNormalV2", "StatelessRandomGetKeyCounter"})
# One FLOP per input element.
REDUCTION_OPS = frozenset({
    "Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "ArgMax", "ArgMin", "BiasAddGrad", "L2Loss",
    "UnsortedSegmentSum", "SegmentSum", "MaxPool", "AvgPool", "MaxPoolV2"})
# Data movement only: bytes in and out, no arithmetic.
MOVEMENT_OPS = frozenset({
    "ConcatV2", "Concat", "Split", "SplitV", "Pack", "Unpack", "Tile", "Transpose", "Slice",
    "StridedSlice", "StridedSliceGrad", "Fill", "MatrixBandPart", "OneHot", "Pad", "PadV2",
    "MirrorPad", "Reverse", "ReverseV2", "BroadcastTo", "Range", "Where", "Unique",
    "DynamicStitch", "ParallelDynamicStitch", "Copy", "Empty"})

RULES: dict[str, Rule] = {
    **{t: _free for t in FREE_OPS},
    **{t: _per_output_element(1.0) for t in ELEMENTWISE_OPS},
    **{t: _per_input_element(1.0) for t in REDUCTION_OPS},
    **{t: _per_output_element(0.0) for t in MOVEMENT_OPS},
    "AddN": _add_n,
    "MaxPoolGrad": _per_output_element(1.0), "AvgPoolGrad": _per_output_element(1.0),
    "MatMul": _matmul, "BatchMatMul": _matmul, "BatchMatMulV2": _matmul, "BatchMatMulV3": _matmul,
    "Conv2D": _conv2d, "Conv2DBackpropInput": _conv2d_backprop_input,
    "Conv2DBackpropFilter": _conv2d_backprop_filter,
    "DepthwiseConv2dNative": _depthwise, "DepthwiseConv2dNativeBackpropInput": _depthwise_backprop_input,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_backprop_filter,
    # max, subtract, exp, sum, divide (and the log / gradient for the loss)
    "Softmax": _per_input_element(5.0), "LogSoftmax": _per_input_element(5.0),
    "SoftmaxCrossEntropyWithLogits": _per_input_element(5.0),
    "SparseSoftmaxCrossEntropyWithLogits": _per_input_element(5.0),
    # training batch norm: mean and variance, then normalize, scale and shift
    "FusedBatchNorm": _per_input_element(8.0), "FusedBatchNormV2": _per_input_element(8.0),
    "FusedBatchNormV3": _per_input_element(8.0), "FusedBatchNormGrad": _per_input_element(5.0),
    "FusedBatchNormGradV2": _per_input_element(5.0), "FusedBatchNormGradV3": _per_input_element(5.0),
    "LSTMBlockCell": _lstm, "BlockLSTM": _lstm, "BlockLSTMV2": _lstm,
    "ResourceGather": _gather, "GatherV2": _gather, "Gather": _gather, "GatherNd": _gather,
    "ResourceScatterAdd": _scatter(2), "ResourceScatterSub": _scatter(2),
    "ResourceScatterUpdate": _scatter(1), "ScatterAdd": _scatter(2), "ScatterUpdate": _scatter(1),
    "AssignVariableOp": _assign(False), "Assign": _assign(False),
    "AssignAddVariableOp": _assign(True), "AssignSubVariableOp": _assign(True),
    "AssignAdd": _assign(True), "AssignSub": _assign(True),
}

# ----------------------------------------------------------------------------- aten (PyTorch)
# Op types ``aten.<name>`` of the traced PyTorch training steps (``rlplace.import_.torch``).
# Tensors are channels-first (NCHW) there, and a convolution's weight is [C_out, C_in / groups,
# *kernel].
def _aten_matmul(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """mm, bmm, addmm, baddbmm: C[..., m, n] = A[..., m, k] B[..., k, n] (+ a bias operand that
    matches no pair): 2k FLOPs per element of C."""
    c = outs[0].shape
    mats = [t for t in ins if t.shape is not None and len(t.shape) >= 2]
    if c is None or len(c) < 2:
        return 0.0, _moved(ins, outs)
    pairs = [(a, b) for a in mats for b in mats if a is not b] or [(a, a) for a in mats]
    for a, b in pairs:
        if a.shape[-2] == c[-2] and b.shape[-1] == c[-1] and a.shape[-1] == b.shape[-2]:
            return 2.0 * a.shape[-1] * math.prod(c), _moved(ins, outs)
    return 0.0, _moved(ins, outs)


def _is_conv(x: list[int], w: list[int], y: list[int]) -> bool:
    return len(x) == len(w) == len(y) and x[0] == y[0] and w[0] == y[1] and w[1] > 0 and x[1] % w[1] == 0


def _aten_conv(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """convolution (1-3 spatial dims, groups): 2 (C_in / groups) prod(kernel) FLOPs per
    output element."""
    y = outs[0].shape
    ranked = [t for t in ins if t.shape is not None and y is not None and len(t.shape) == len(y)]
    for x in ranked:
        for w in ranked:
            if x is not w and _is_conv(x.shape, w.shape, y):
                return 2.0 * math.prod(y) * math.prod(w.shape[1:]), _moved(ins, outs)
    return 0.0, _moved(ins, outs)


def _aten_conv_backward(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
    """convolution_backward(dy, x, w) -> (dx, dw, db), each possibly not computed (no shape):
    the forward FLOPs, counted on dy, once for dx and once for dw."""
    ranked = [t for t in ins if t.shape is not None and len(t.shape) >= 3]
    dx, dw = (outs + [Tensor(None, 0)] * 2)[:2]
    for dy, x, w in itertools.permutations(ranked, 3):
        if _is_conv(x.shape, w.shape, dy.shape) and dx.shape in (None, x.shape) and dw.shape in (None, w.shape):
            grads = (dx.shape is not None) + (dw.shape is not None)
            return grads * 2.0 * dy.elements * math.prod(w.shape[1:]), _moved(ins, outs)
    return 0.0, _moved(ins, outs)


def _aten_attention(factor: float) -> Rule:
    """Scaled dot-product attention: QK^T and PV are 2 E FLOPs per (query, key) pair each, plus
    the softmax; ``factor`` 2.5 for the backward (five products of that size)."""
    def rule(ins: list[Tensor], outs: list[Tensor]) -> tuple[float, float]:
        four = [t for t in ins if t.shape is not None and len(t.shape) == 4]
        out = next((t for t in outs if t.shape is not None and len(t.shape) == 4), None)
        if not four or out is None:
            return 0.0, _moved(ins, outs)
        keys = max(t.shape[-2] for t in four)
        return factor * (4.0 * out.elements + 5.0 * out.elements / out.shape[-1]) * keys, _moved(ins, outs)
    return rule


ATEN_FREE_OPS = frozenset(f"aten.{t}" for t in (
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
    "detach", "alias", "slice", "select", "as_strided", "split", "split_with_sizes", "unbind",
    "chunk", "view_as", "unflatten", "flatten", "empty", "empty_like", "empty_strided", "lift_fresh_copy",
    "sym_size", "sym_numel", "sym_stride"))
ATEN_ELEMENTWISE_OPS = frozenset(f"aten.{t}" for t in (
    "add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "abs", "sign",
    "reciprocal", "pow", "sqrt", "rsqrt", "exp", "log", "log1p", "expm1", "erf", "square",
    "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "where", "masked_fill", "masked_fill_",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or", "bitwise_not",
    "relu", "relu_", "threshold_backward", "gelu", "gelu_backward", "tanh", "tanh_backward",
    "sigmoid", "sigmoid_backward", "silu", "silu_backward", "hardtanh", "hardtanh_backward",
    "hardswish", "hardswish_backward", "hardsigmoid", "hardsigmoid_backward", "leaky_relu",
    "leaky_relu_backward", "elu", "elu_backward", "softplus", "softplus_backward", "addcmul",
    "addcdiv", "lerp", "native_dropout", "native_dropout_backward", "bernoulli", "bernoulli_",
    "rand", "rand_like", "randn", "randn_like", "uniform_", "normal_", "fill_", "zero_"))
ATEN_REDUCTION_OPS = frozenset(f"aten.{t}" for t in (
    "sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std", "prod", "argmax",
    "argmin", "any", "all", "linalg_vector_norm", "logsumexp", "cumsum", "nll_loss_forward",
    "nll_loss_backward", "avg_pool2d", "max_pool2d_with_indices", "_adaptive_avg_pool2d",
    "adaptive_avg_pool2d", "embedding_dense_backward"))
ATEN_MOVEMENT_OPS = frozenset(f"aten.{t}" for t in (
    "clone", "contiguous", "_to_copy", "copy", "copy_", "cat", "stack", "index_select", "gather",
    "scatter", "scatter_add", "index", "index_put", "index_add", "embedding", "constant_pad_nd",
    "repeat", "flip", "roll", "full", "full_like", "zeros", "zeros_like", "ones", "ones_like",
    "new_zeros", "new_empty", "new_full", "new_ones", "scalar_tensor", "arange", "fill",
    "select_backward", "slice_backward", "tril", "triu", "avg_pool2d_backward",
    "max_pool2d_with_indices_backward", "_adaptive_avg_pool2d_backward"))
ATEN_RULES: dict[str, Rule] = {
    **{t: _free for t in ATEN_FREE_OPS},
    **{t: _per_output_element(1.0) for t in ATEN_ELEMENTWISE_OPS},
    **{t: _per_input_element(1.0) for t in ATEN_REDUCTION_OPS},
    **{t: _per_output_element(0.0) for t in ATEN_MOVEMENT_OPS},
    **{f"aten.{t}": _aten_matmul for t in ("mm", "bmm", "addmm", "baddbmm", "matmul")},
    "aten.convolution": _aten_conv, "aten.convolution_backward": _aten_conv_backward,
    **{f"aten.{t}": _per_input_element(5.0) for t in (
        "_softmax", "_log_softmax", "_safe_softmax", "_softmax_backward_data", "_log_softmax_backward_data")},
    **{f"aten.{t}": _per_input_element(8.0) for t in (
        "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training", "native_layer_norm", "native_group_norm")},
    **{f"aten.{t}": _per_input_element(5.0) for t in (
        "native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward")},
    **{f"aten.{t}": _aten_attention(1.0) for t in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention")},
    **{f"aten.{t}": _aten_attention(2.5) for t in (
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention_backward")},
    # the graph's sources in a traced step: no device work
    "parameter": _free, "buffer": _free, "input": _free,
}
RULES.update(ATEN_RULES)
# The ops of a traced PyTorch step that launch no kernel: aliases of an input's buffer (views,
# ``detach``, ``split``), allocations by the caching allocator, shape queries and the step's
# sources (resident tensors). PyTorch runs them on the host while the device works (kernel
# launches are asynchronous), so they take no device time and pay no ``launch_overhead``.
# ``lift_fresh_copy`` copies a constant: it launches. TensorFlow's executor runs every node as a
# kernel call, so its FREE_OPS keep the per-node cost: in Baechi's GNMT profile (TensorFlow 1.12,
# real GPUs) the profiled ones take as long as small kernels (medians: Identity 2 us, Const 3,
# ExpandDims 4, Squeeze and VariableV2 5, Reshape 7; RealDiv 2, Add 3, SplitV 5, ConcatV2 7).
NO_KERNEL = (ATEN_FREE_OPS - {"aten.lift_fresh_copy"}) | {"parameter", "buffer", "input"}


def rule_for(op_type: str | None) -> Rule | None:
    """The cost formula of an op type, None when it has none."""
    if op_type is None:
        return None
    if op_type in RULES:
        return RULES[op_type]
    match = _APPLY.match(op_type)
    if match and match.group(3) in _OPTIMIZERS:
        return _apply(*_OPTIMIZERS[match.group(3)])
    return None


@dataclass
class OpCosts:
    """Per-op FLOPs and bytes moved (arrays by op index), and what had no formula."""

    flops: np.ndarray
    bytes: np.ndarray
    known: np.ndarray  # bool: the op's type (or its forward op's) has a formula
    launches: np.ndarray  # bool: the op launches work on its device (not in NO_KERNEL)
    unknown_types: Counter = field(default_factory=Counter)  # op type -> ops without a formula


def op_tensors(graph: OpGraph, i: int, port_bytes: list[list[int]]) -> tuple[list[Tensor], list[Tensor]]:
    """The data inputs and the outputs of op ``i`` as (shape, bytes)."""
    ins = []
    for e in graph.in_edges[graph.in_ptr[i]:graph.in_ptr[i + 1]]:
        port = int(graph.edge_src_output[e])
        if port >= 0:
            shapes = graph.output_shapes[graph.edge_src[e]]
            ins.append(Tensor(shapes[port] if shapes is not None else None, int(graph.edge_bytes[e])))
    shapes = graph.output_shapes[i] or [None] * len(port_bytes[i])
    return ins, [Tensor(s, b) for s, b in zip(shapes, port_bytes[i])]


def op_costs(graph: OpGraph, counted_flops: np.ndarray | None = None) -> OpCosts:
    """FLOPs and bytes moved of every op of ``graph`` (see the module docstring). Where
    ``counted_flops`` (per op, NaN where not counted) has a count, for instance PyTorch's own
    ``torch.utils.flop_counter`` at import (``rlplace.import_.torch``), that count replaces the
    formula's FLOPs; the bytes are the formula's."""
    port_bytes = [list(b) for b in graph.output_bytes]
    for t in range(len(graph.tensor_src)):
        port = graph.tensor_port[t]
        if port >= 0:
            src = graph.tensor_src[t]
            port_bytes[src][port] = max(port_bytes[src][port], int(graph.tensor_bytes[t]))
    n = graph.num_ops
    flops, moved, known = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
    counted = np.full(n, np.nan) if counted_flops is None else np.asarray(counted_flops, dtype=float)
    unknown: Counter = Counter()
    for i in range(n):
        ins, outs = op_tensors(graph, i, port_bytes)
        rule = rule_for(graph.op_type[i])
        fwd = graph.forward_op[i]
        if rule is not None:
            flops[i], moved[i] = rule(ins, outs)
            known[i] = True
        elif fwd >= 0 and known[fwd]:
            flops[i], moved[i], known[i] = flops[fwd], moved[fwd], True
        else:
            moved[i] = _moved(ins, outs)
        if not np.isnan(counted[i]):
            flops[i], known[i] = counted[i], True
        elif not known[i]:
            unknown[graph.op_type[i]] += 1
    launches = np.array([t not in NO_KERNEL for t in graph.op_type], dtype=bool)
    return OpCosts(flops, moved, known, launches, unknown)


# ----------------------------------------------------------------------------- times
def roofline_time(flops: np.ndarray, nbytes: np.ndarray, device: str | DeviceSpec | Mapping,
                  launches: np.ndarray | None = None) -> np.ndarray:
    """Seconds per op: ``max(flops / peak_flops, bytes / memory_bandwidth) + launch_overhead``,
    the overhead only for the ops ``launches`` marks (every op when it is None)."""
    spec = device_spec(device)
    launch = spec.launch_overhead if launches is None else np.where(launches, spec.launch_overhead, 0.0)
    return np.maximum(np.asarray(flops, float) / spec.peak_flops,
                      np.asarray(nbytes, float) / spec.memory_bandwidth) + launch


def with_compute_time(graph: OpGraph, compute_time: np.ndarray,
                      edge_bytes: np.ndarray | None = None) -> OpGraph:
    """``graph`` with new per-op compute times (and edge bytes), everything else unchanged."""
    ops = [{**graph.op_record(i), "compute_time": float(t)} for i, t in enumerate(compute_time)]
    edges = graph.edge_records()
    if edge_bytes is not None:
        for e, b in zip(edges, edge_bytes):
            e[2] = int(b)
    return OpGraph.from_records(ops, edges, name=graph.name)


def with_analytical_costs(graph: OpGraph, device: str | DeviceSpec | Mapping = "v100",
                          counted_flops: np.ndarray | None = None) -> OpGraph:
    """``graph`` with ``compute_time`` from the roofline of ``device`` (FLOPs as ``op_costs``
    takes them); nothing else changes."""
    costs = op_costs(graph, counted_flops)
    return with_compute_time(graph, roofline_time(costs.flops, costs.bytes, device, costs.launches))


# ----------------------------------------------------------------------------- perturbation
def perturb(graph: OpGraph, p: float, seed: int | np.random.Generator = 0, comm: bool = True,
            symmetric: bool = False) -> OpGraph:
    """Baechi §5.3, Figure 8: the profile with errors, to place with (the placement is then
    judged on the true profile). The paper "multipl[ies] the computation and communication
    profiles by a perturbation factor"; its code (``placer_lib.DefaultPlacer``,
    ``cost_factor``) multiplies every op's compute time and every edge's communication time by
    its own factor drawn uniformly from [1, cost_factor], the x-axis of Figure 8. Here
    ``cost_factor = 1 + p``: each op's ``compute_time`` is multiplied by an independent
    U[1, 1 + p] factor, or U[1 - p, 1 + p] with ``symmetric``. With ``comm``, each tensor's
    edges get one more independent factor on their bytes (the CommModel lives in the Cluster,
    so the bandwidth term is what a graph can perturb; a tensor is sent once per device, so its
    edges share the factor). Deterministic under ``seed``; everything else is unchanged."""
    if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 0) or (symmetric and p > 1):
        raise ConfigError(f"perturb.p must be a number in [0, {1 if symmetric else 'inf'}), got {p!r}")
    rng = np.random.default_rng(seed)
    low = 1.0 - p if symmetric else 1.0
    compute = graph.compute_time * rng.uniform(low, 1.0 + p, graph.num_ops)
    edge_bytes = None
    if comm:
        factor = rng.uniform(low, 1.0 + p, len(graph.tensor_src))
        edge_bytes = np.rint(graph.edge_bytes * factor[graph.edge_tensor])
    return with_compute_time(graph, compute, edge_bytes)
