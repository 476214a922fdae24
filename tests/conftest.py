import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings, strategies as st

from rlplace.graph import CONTROL, OpGraph
from rlplace.zoo.baechi import default_profile_path

settings.register_profile("rlplace", deadline=None, max_examples=60)
settings.load_profile("rlplace")

REPO = Path(__file__).resolve().parents[1]


def gpu_written(path) -> None:
    """Make the run's checkpoint look written on a GPU: a 16-byte Philox generator state."""
    state = torch.load(path, weights_only=True)
    state["generator"] = torch.zeros(16, dtype=torch.uint8)
    torch.save(state, path)


def op(name, compute_time=1.0, out=(10,), persistent=0, temporary=0, **extra):
    return {"name": name, "compute_time": compute_time, "persistent_bytes": persistent,
            "temporary_bytes": temporary, "output_bytes": list(out), **extra}


@st.composite
def random_dags(draw, max_ops=14):
    """Small random OpGraphs: any DAG shape, costs and sizes (including zeros)."""
    n = draw(st.integers(1, max_ops))
    ops = [op(f"n{i}", compute_time=draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0])),
              out=[draw(st.integers(0, 50))], persistent=draw(st.integers(0, 20)),
              temporary=draw(st.integers(0, 20))) for i in range(n)]
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(f"n{i}", f"n{j}", ops[i]["output_bytes"][0]) for i, j in sorted(pairs) if i < j]
    return OpGraph.from_records(ops, edges, name="random")


OP_TYPES = ["MatMul", "Identity", "Relu", "AddV2", "AddN", "Conv2D"]


@st.composite
def typed_dags(draw, max_ops=14, op_types=tuple(OP_TYPES), sizes=(0, 8, 8, 16), times=(0.0, 0.5, 1.0, 2.5)):
    """Random DAGs of TensorFlow op types with few output sizes (0: an output a profile saw
    unallocated), so that outputs share input buffers under the tf_reuse memory model."""
    n = draw(st.integers(1, max_ops))
    ops = [op(f"n{i}", compute_time=draw(st.sampled_from(times)),
              out=[draw(st.sampled_from(sizes))], temporary=draw(st.integers(0, 4)),
              persistent=draw(st.integers(0, 4)), op_type=draw(st.sampled_from(op_types))) for i in range(n)]
    shape = [draw(st.sampled_from([8, 16])) for _ in range(n)]  # the tensor's size, when output_bytes is 0
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(f"n{i}", f"n{j}", ops[i]["output_bytes"][0] or shape[i]) for i, j in sorted(pairs) if i < j]
    return OpGraph.from_records(ops, edges, name="typed")


@pytest.fixture(scope="session")
def baechi_profile() -> Path:
    path = default_profile_path()
    if not path.is_file():
        pytest.skip(f"Baechi GNMT profile not found at {path} (set RLPLACE_BAECHI_GNMT)")
    return path


@pytest.fixture
def rlplace_cli():
    """argv prefix that runs an rlplace app with this interpreter."""
    return lambda app: [sys.executable, "-m", f"rlplace.apps.{app}"]


def assert_graphs_equal(a: OpGraph, b: OpGraph):
    assert a.names == b.names
    assert [a.op_record(i) for i in range(a.num_ops)] == [b.op_record(i) for i in range(b.num_ops)]
    assert a.edge_records() == b.edge_records()
    np.testing.assert_array_equal(a.out_ptr, b.out_ptr)


# ------------------------------------------------------------------------------ training-like graphs
def training_graph(seed: int, continuous: bool = False, layers: int | None = None) -> OpGraph:
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
