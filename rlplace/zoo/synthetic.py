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


# Peak resident memory per op while a generator builds its graph (records, then OpGraph's
# arrays): 2.2 GB for a 1,000,000-op layered DAG with 1.9 million edges, 0.56 GB at 200,000.
BUILD_BYTES_PER_OP = 2300


def available_memory() -> int | None:
    """Bytes this machine can give a new allocation now (Linux's MemAvailable), None where
    unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_buildable(generator: str, num_ops: int) -> None:
    """A graph too large for this machine's memory is refused before it is built (one line,
    instead of the machine swapping or the process killed midway)."""
    need, available = num_ops * BUILD_BYTES_PER_OP, available_memory()
    if available is not None and need > available:
        raise ConfigError(f"{generator}: {num_ops:,} ops need about {need / 2**30:,.1f} GiB to build, more than "
                          f"the {available / 2**30:.1f} GiB of memory available")


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
    check_buildable("layered", num_ops)
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
    check_buildable("chain", num_ops)
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
    check_buildable("fork_join", branches * branch_length + 2)

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


def training_step(seed: int, continuous: bool = False, layers: int | None = None) -> OpGraph:
    """A random training step: forward layers (some with a weight: a variable and its read,
    colocated), skip connections and elementwise chains, a loss; the backward pass (one gradient
    op per forward input, naming its forward op, reading the forward inputs; a gradient sum
    where a forward output has several readers); per weight an Adam-like slot variable and an
    update op colocated with the variable, reading the weight gradient; sometimes a global step
    (a variable and its increment, colocated, after every update, which a decaying learning rate
    may read). Costs are drawn from a few values (ties, like unprofiled ops) or, with
    ``continuous``, from a log-uniform range."""
    rng = np.random.default_rng(seed)
    n_layers = layers or int(rng.integers(2, 9))
    ops, edges, size = [], [], {}

    def add(name, t, out, persistent=0, temporary=0, **extra):
        ops.append({"name": name, "compute_time": float(t), "persistent_bytes": int(persistent),
                    "temporary_bytes": int(temporary), "output_bytes": list(out), **extra})
        size[name] = out[0] if out else 0
        return name

    def cost():
        if continuous:
            return float(np.exp(rng.uniform(np.log(1e-6), np.log(2e-3))))
        return float(rng.choice([1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 2e-3], p=[.2, .2, .2, .2, .1, .1]))

    def tiny():
        return 1e-6 * (1 + rng.random()) if continuous else 1e-6

    def nbytes():
        return int(rng.choice([4, 1_000, 100_000, 1_000_000, 4_000_000]))

    inputs = {}  # forward op -> its data inputs
    acts = [add("input", tiny(), [nbytes()])]
    weights = []
    for i in range(n_layers):
        srcs = [acts[-1]]
        if len(acts) > 1 and rng.random() < 0.4:  # a skip connection
            srcs.append(acts[int(rng.integers(0, len(acts) - 1))])
        if rng.random() < 0.7:
            w = add(f"w{i}", tiny(), [0], persistent=nbytes(), colocation_group=f"w{i}")
            r = add(f"w{i}/read", tiny(), [nbytes()], colocation_group=f"w{i}")
            edges.append((w, r, 0))
            weights.append((w, r))
            srcs.insert(1, r)
        y = add(f"f{i}", cost(), [nbytes()], temporary=nbytes())
        edges += [(p, y, size[p]) for p in srcs]
        inputs[y] = srcs
        if rng.random() < 0.3:  # an elementwise op after it
            z = add(f"f{i}/act", cost(), [nbytes()])
            edges.append((y, z, size[y]))
            inputs[z] = [y]
            y = z
        acts.append(y)
    loss = add("loss", 1e-5, [4])
    edges.append((acts[-1], loss, size[acts[-1]]))
    inputs[loss] = [acts[-1]]

    readers: dict[str, list[str]] = {}
    for y, srcs in inputs.items():
        for p in srcs:
            readers.setdefault(p, []).append(y)
    grad_of: dict[str, str] = {}  # op -> the backward op giving the gradient of its output
    grad_in: dict[tuple[str, str], str] = {}
    for y in list(inputs)[::-1]:
        for p in inputs[y]:
            gp = add(f"grad/{y}/{p}", cost(), [max(size[p], 4)], forward_op=y)
            if y in grad_of:
                edges.append((grad_of[y], gp, max(size[y], 4)))
            edges += [(q, gp, size[q]) for q in inputs[y]]
            grad_in[(y, p)] = gp
        for p in inputs[y]:
            parts = [grad_in.get((r, p)) for r in readers[p]]
            if p not in grad_of and all(parts):
                if len(parts) == 1:
                    grad_of[p] = parts[0]
                else:
                    s = add(f"sum/{p}", 1e-5, [max(size[p], 4)])
                    edges += [(q, s, max(size[p], 4)) for q in parts]
                    grad_of[p] = s
    train = add("train", tiny(), [])
    step = None
    if rng.random() < 0.7:
        step = add("step", tiny(), [0], persistent=8, colocation_group="step")
        lr = add("lr", 5e-6, [4])
        if rng.random() < 0.5:
            edges.append((step, lr, 8))
        update_step = add("step/update", tiny(), [0], colocation_group="step")
        edges += [(step, update_step, 8), (update_step, train, 0, CONTROL)]
    for w, r in weights:
        m = add(f"{w}/m", tiny(), [0], persistent=1_000, colocation_group=w)
        apply = add(f"{w}/apply", float(rng.choice([5e-6, 1e-4])), [0], colocation_group=w)
        edges += [(w, apply, 0), (m, apply, 0), (grad_of[r], apply, size[r]), (apply, train, 0, CONTROL)]
        if step is not None:
            edges += [("lr", apply, 4), (apply, "step/update", 0, CONTROL)]
    unique = {(e[0], e[1], e[3] if len(e) > 3 else 0): e for e in edges}
    return OpGraph.from_records(ops, list(unique.values()), name=f"training{seed}")
