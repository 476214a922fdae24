"""Synthetic OpGraphs: layered random DAGs, chains, fork-joins and Baechi's linear regression.

Costs are in seconds and bytes. Random sizes are log-normal with a given mean and coefficient of
variation (``cv``: standard deviation / mean), the usual shape of measured op costs.
"""

from __future__ import annotations

import math

import numpy as np

from rlplace.errors import ConfigError
from rlplace.graph import CONTROL, OpGraph


def _lognormal(rng: np.random.Generator, mean: float, cv: float, size: int) -> np.ndarray:
    if mean <= 0:
        return np.zeros(size)
    if cv <= 0:
        return np.full(size, float(mean))
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), size)


def _need_nonnegative(generator: str, **params: float) -> None:
    """Means and coefficients of variation: finite and >= 0 (a mean of 0 makes every value 0)."""
    for key, value in params.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"{generator}: {key} must be a finite number >= 0, got {value!r}")


def layered(num_ops: int = 1000, width: int = 16, max_fan_in: int = 3, skip_prob: float = 0.1,
            compute_mean: float = 1e-3, compute_cv: float = 1.0,
            output_bytes_mean: float = 1e6, bytes_cv: float = 1.0,
            persistent_fraction: float = 0.2, persistent_bytes_mean: float = 4e6,
            temporary_fraction: float = 0.3, temporary_bytes_mean: float = 1e6,
            seed: int = 0, name: str | None = None) -> OpGraph:
    """A layered random DAG: ``num_ops`` ops in layers of ``width``; every op past the first
    layer reads 1..``max_fan_in`` ops, each from the previous layer, or with probability
    ``skip_prob`` from any earlier layer. A ``persistent_fraction`` of the ops hold weights and a
    ``temporary_fraction`` need scratch memory. Same seed, same graph."""
    if num_ops < 1 or width < 1 or max_fan_in < 1 or not 0 <= skip_prob <= 1:
        raise ConfigError("layered: need num_ops >= 1, width >= 1, max_fan_in >= 1, 0 <= skip_prob <= 1")
    _need_nonnegative("layered", compute_mean=compute_mean, compute_cv=compute_cv,
                      output_bytes_mean=output_bytes_mean, bytes_cv=bytes_cv,
                      persistent_bytes_mean=persistent_bytes_mean, temporary_bytes_mean=temporary_bytes_mean)
    for key, value in (("persistent_fraction", persistent_fraction), ("temporary_fraction", temporary_fraction)):
        if not 0 <= value <= 1:
            raise ConfigError(f"layered: {key} must be in [0, 1], got {value!r}")
    rng = np.random.default_rng(seed)
    layer = np.arange(num_ops) // width
    compute = _lognormal(rng, compute_mean, compute_cv, num_ops)
    out_bytes = np.round(_lognormal(rng, output_bytes_mean, bytes_cv, num_ops)).astype(np.int64)
    persistent = np.where(rng.random(num_ops) < persistent_fraction,
                          np.round(_lognormal(rng, persistent_bytes_mean, bytes_cv, num_ops)), 0).astype(np.int64)
    temporary = np.where(rng.random(num_ops) < temporary_fraction,
                         np.round(_lognormal(rng, temporary_bytes_mean, bytes_cv, num_ops)), 0).astype(np.int64)
    names = [f"op{i}" for i in range(num_ops)]
    ops = [{"name": names[i], "op_type": "Layer", "compute_time": float(compute[i]),
            "persistent_bytes": int(persistent[i]), "temporary_bytes": int(temporary[i]),
            "output_bytes": [int(out_bytes[i])], "layer": int(layer[i])} for i in range(num_ops)]

    edges = set()
    fan_in = rng.integers(1, max_fan_in + 1, num_ops)
    for i in range(width, num_ops):
        lay = layer[i]
        for _ in range(fan_in[i]):
            src_layer = lay - 1 if rng.random() >= skip_prob else rng.integers(0, lay)
            lo = src_layer * width
            edges.add((int(rng.integers(lo, min(lo + width, num_ops))), i))
    edge_list = [(names[s], names[d], int(out_bytes[s]), 0) for s, d in sorted(edges)]
    return OpGraph.from_records(ops, edge_list, name=name or f"layered{num_ops}")


def chain(num_ops: int = 10, compute_time: float = 1e-3, output_bytes: int = 1_000_000,
          persistent_bytes: int = 0, temporary_bytes: int = 0, name: str | None = None) -> OpGraph:
    """``num_ops`` ops in a line, each reading the previous one."""
    if num_ops < 1:
        raise ConfigError("chain: need num_ops >= 1")
    ops = [{"name": f"op{i}", "compute_time": compute_time, "persistent_bytes": persistent_bytes,
            "temporary_bytes": temporary_bytes, "output_bytes": [output_bytes]} for i in range(num_ops)]
    edges = [(f"op{i}", f"op{i + 1}", output_bytes) for i in range(num_ops - 1)]
    return OpGraph.from_records(ops, edges, name=name or f"chain{num_ops}")


def fork_join(branches: int = 4, branch_length: int = 5, compute_time: float = 1e-3,
              output_bytes: int = 1_000_000, name: str | None = None) -> OpGraph:
    """A source, ``branches`` independent chains of ``branch_length`` ops, and a sink reading
    the end of every chain: the shape that rewards spreading work over devices."""
    if branches < 1 or branch_length < 1:
        raise ConfigError("fork_join: need branches >= 1 and branch_length >= 1")

    def op(name: str, branch: int | None) -> dict:
        rec = {"name": name, "compute_time": compute_time, "persistent_bytes": 0,
               "temporary_bytes": 0, "output_bytes": [output_bytes]}
        if branch is not None:
            rec["layer"] = branch
        return rec

    ops = [op("source", None)]
    edges = []
    for b in range(branches):
        prev = "source"
        for k in range(branch_length):
            cur = f"b{b}_{k}"
            ops.append(op(cur, b))
            edges.append((prev, cur, output_bytes))
            prev = cur
        edges.append((prev, "sink", output_bytes))
    ops.append(op("sink", None))
    return OpGraph.from_records(ops, edges, name=name or f"fork_join{branches}x{branch_length}")


def linear_regression(batch_size: int = 128, features: int = 1024, compute_time: float = 1e-3,
                      name: str = "linear_regression") -> OpGraph:
    """The linear-regression training step of Baechi Fig. 2 (SGD with a decaying learning rate).

    Two colocation groups, as in the paper: ``Weight`` with ``ApplyGrad`` and ``Step`` with
    ``UpdateStep``. Fusing both groups makes the cycle of Baechi Fig. 4
    (Weight → … → Grad → UpdateStep and Step → LearningRate → ApplyGrad). Every op takes
    ``compute_time`` (unit costs, as in the paper's examples). A variable's output aliases its
    persistent buffer, so its ``output_bytes`` are 0 while its edges carry the full tensor."""
    f32 = 4
    x, w, y = batch_size * features * f32, features * f32, batch_size * f32

    def op(nm, op_type, out, persistent=0, group=None, forward=None):
        rec = {"name": nm, "op_type": op_type, "compute_time": compute_time,
               "persistent_bytes": persistent, "temporary_bytes": 0, "output_bytes": out}
        if group:
            rec["colocation_group"] = group
        if forward:
            rec["forward_op"] = forward
        return rec

    ops = [
        op("X", "Placeholder", [x]),
        op("Y", "Placeholder", [y]),
        op("Weight", "VariableV2", [0], persistent=w, group="Weight"),
        op("Step", "VariableV2", [0], persistent=8, group="Step"),
        op("MatMul", "MatMul", [y]),
        op("Error", "Sub", [y]),
        op("Loss", "Mean", [f32]),
        op("LearningRate", "ExponentialDecay", [f32]),
        op("ErrorGrad", "Mul", [y], forward="Loss"),
        op("Grad", "MatMul", [w], forward="MatMul"),
        op("ApplyGrad", "ApplyGradientDescent", [0], group="Weight"),
        op("UpdateStep", "AssignAdd", [0], group="Step"),
    ]
    edges = [
        ("X", "MatMul", x), ("Weight", "MatMul", w), ("MatMul", "Error", y), ("Y", "Error", y),
        ("Error", "Loss", y), ("Loss", "ErrorGrad", f32), ("Error", "ErrorGrad", y),
        ("X", "Grad", x), ("ErrorGrad", "Grad", y), ("Step", "LearningRate", 8),
        ("Weight", "ApplyGrad", w), ("LearningRate", "ApplyGrad", f32), ("Grad", "ApplyGrad", w),
        ("Step", "UpdateStep", 8), ("Grad", "UpdateStep", 0, CONTROL),
    ]
    return OpGraph.from_records(ops, edges, name=name)
