import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings, strategies as st

from rlplace.graph import OpGraph
from rlplace.zoo.baechi import default_profile_path
from rlplace.zoo.synthetic import training_step as training_graph  # noqa: F401  (tests import it from here)

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
