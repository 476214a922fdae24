"""TensorFlow's buffer sharing as a memory model (``Cluster.memory_model = "tf_reuse"``,
rlplace.schedule.aliases): which outputs share an input's buffer, and what that does to the
simulated peak memory and step time. The event loop itself is checked against the literal
oracle in test_schedule.py."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import op, typed_dags
from rlplace.cluster import Cluster, CommModel, Device, load_preset
from rlplace.errors import ConfigError
from rlplace.graph import CONTROL, OpGraph
from rlplace.placers import make_placer
from rlplace.schedule.aliases import shared_input
from rlplace.sim import simulate


def cluster(n, memory_model, memory=10**9, mode="parallel"):
    return Cluster(tuple(Device(f"d{i}", memory) for i in range(n)), CommModel(0.5, 0.05, mode),
                   memory_model=memory_model)


def chain(*ops, edges):
    """Edges (src, dst, bytes) carry data; (src, dst) orders two ops (a control edge)."""
    return OpGraph.from_records(list(ops), [(*e, 0, CONTROL) if len(e) == 2 else e for e in edges])


def peak(g, memory_model, device=None):
    device = np.zeros(g.num_ops, dtype=np.int64) if device is None else np.asarray(device)
    return simulate(g, cluster(int(device.max()) + 1, memory_model), device).peak_memory.tolist()


def test_an_in_place_kernel_takes_its_only_readers_buffer():
    """a (100 B) -> relu (100 B) -> b: by default relu's output and input are both live while
    it runs (200 B); TensorFlow forwards the input's buffer (100 B)."""
    g = chain(op("a", out=[100], op_type="MatMul"), op("relu", out=[100], op_type="Relu"),
              op("b", out=[], op_type="MatMul"), edges=[("a", "relu", 100), ("relu", "b", 100)])
    assert shared_input(g, "tf_reuse").tolist() == [-1, 0]
    assert shared_input(g, "default").tolist() == [-1, -1]
    assert peak(g, "default") == [200]
    assert peak(g, "tf_reuse") == [100]


def test_an_input_with_another_reader_is_not_forwarded():
    g = chain(op("a", out=[100], op_type="MatMul"), op("relu", out=[100], op_type="Relu"),
              op("b", out=[], op_type="MatMul"),
              edges=[("a", "relu", 100), ("a", "b", 100), ("relu", "b", 100)])
    assert shared_input(g, "tf_reuse").tolist() == [-1, -1]
    assert peak(g, "tf_reuse") == peak(g, "default") == [200]


def test_a_view_keeps_its_inputs_buffer_until_its_own_readers_are_done():
    """a (100 B) -> Identity (no bytes of its own) -> c, with b (50 B) run in between: by default
    a is freed when the Identity ends (peak 100 B); in TensorFlow the Identity holds a's buffer
    until c has run, so b's 50 B come on top (150 B). (Tensors: a's, the view's control
    edge to b, the view's data, b's.)"""
    g = chain(op("a", out=[100], op_type="MatMul"), op("view", out=[0], op_type="Identity"),
              op("b", out=[50], op_type="MatMul"), op("c", out=[], op_type="AddN"),
              edges=[("a", "view", 100), ("view", "b"), ("view", "c", 100), ("b", "c", 50)])
    assert shared_input(g, "tf_reuse").tolist() == [-1, -1, 0, -1]
    assert peak(g, "default") == [100]
    assert peak(g, "tf_reuse") == [150]


def test_a_variables_buffer_is_never_shared():
    """A read of a variable has no transient buffer to forward: the Mul allocates its output."""
    g = chain(op("var", out=[0], persistent=100, op_type="VarHandleOp"),
              op("read", out=[0], op_type="ReadVariableOp"), op("mul", out=[100], op_type="Mul"),
              op("loss", out=[], op_type="Sum"), edges=[("var", "read", 0), ("read", "mul", 100), ("mul", "loss", 100)])
    assert shared_input(g, "tf_reuse").tolist() == [-1, -1, -1]
    assert peak(g, "tf_reuse") == peak(g, "default") == [200]


def test_a_view_of_a_received_tensor_holds_the_received_copy():
    """a on device 0 is sent to device 1, where an Identity views it and c reads the view after
    b: the received copy stays until c is done (100 + 50 B on device 1)."""
    g = chain(op("a", out=[100], op_type="MatMul"), op("view", out=[0], op_type="Identity"),
              op("b", out=[50], op_type="MatMul"), op("c", out=[], op_type="AddN"),
              edges=[("a", "view", 100), ("view", "b"), ("view", "c", 100), ("b", "c", 50)])
    device = [0, 1, 1, 1]
    assert peak(g, "default", device) == [100, 100]
    assert peak(g, "tf_reuse", device) == [100, 150]


def test_memory_model_is_checked_and_selectable_in_presets():
    with pytest.raises(ConfigError, match="memory_model"):
        Cluster((Device("d0", 10),), memory_model="tf")
    assert load_preset("local_cpu", memory_model="tf_reuse").memory_model == "tf_reuse"
    assert load_preset("baechi_2080").memory_model == "default"


@given(typed_dags(op_types=("MatMul", "Relu", "AddV2", "AddN", "Conv2D"), sizes=(8, 8, 16)),
       st.integers(1, 3), st.sampled_from(["parallel", "sequential"]), st.data())
def test_forwarding_alone_never_needs_more_memory_nor_changes_the_step(g, ndev, mode, data):
    """Without views and with every output allocated (shape-sized graphs), sharing only removes
    an output's own buffer while its input's runs on: no device's peak grows. The simulator does
    not wait for memory, so the schedule is the same."""
    device = np.array(data.draw(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops, max_size=g.num_ops)))
    default = simulate(g, cluster(ndev, "default", mode=mode), device)
    reuse = simulate(g, cluster(ndev, "tf_reuse", mode=mode), device)
    assert np.all(reuse.peak_memory <= default.peak_memory)
    assert reuse.step_time == default.step_time


@given(typed_dags(), st.integers(1, 3), st.sampled_from(["m_topo", "m_etf", "m_sct"]))
def test_baechi_places_alike_when_memory_does_not_bind(g, ndev, name):
    """With memory to spare the memory model changes neither a Baechi placer's placement nor
    its step time."""
    placements = [make_placer(name).place(g, cluster(ndev, mm)) for mm in ("default", "tf_reuse")]
    assert placements[0].device_of.tolist() == placements[1].device_of.tolist()
    times = [simulate(g, cluster(ndev, mm), p).step_time for mm, p in zip(("default", "tf_reuse"), placements)]
    assert times[0] == times[1]


def test_a_placer_releases_a_shared_buffer_when_the_chain_is_done_on_every_device():
    """Baechi's accounting (hold_op_memory): a (100 B) -> Identity on device 0, read by c on
    device 1. The view holds a's buffer, so device 0 keeps the 100 B until the view's transfer
    to device 1 is done (a's last reader, the view, ends at 2 s; the transfer at 7.5 s), and
    device 1 its received copy until c ends (8.5 s)."""
    from rlplace.schedule import new_model
    from rlplace.schedule.ops import book_inputs, duration, hold_op_memory, release_until, start

    g = chain(op("a", out=[100], op_type="MatMul"), op("view", out=[0], op_type="Identity"),
              op("c", out=[], op_type="AddN"), edges=[("a", "view", 100), ("view", "c", 100)])
    c = cluster(2, "tf_reuse")
    m = new_model(g, c, placer=True)
    for i, d, begin in [(0, 0, 0.0), (1, 0, 1.0), (2, 1, 7.5)]:  # 7.5 s: the view's transfer ends
        received = book_inputs(m.graph, m.ops, m.transfers, m.sent, m.channels, i, d)
        start(m.ops, m.devices, i, d, begin, duration(m.graph.compute, m.devices.speed, i, d))
        hold_op_memory(m.graph, m.ops, m.transfers, m.sent, m.memory, m.releases, i, received)
    assert m.transfers.end[0] == 7.5
    live = []
    for t in (2.0, 7.0, 7.5, 8.0, 8.5):
        release_until(m.releases, m.memory, t)
        live.append(m.memory.live.tolist())
    assert live == [[100, 100], [100, 100], [0, 100], [0, 100], [0, 0]]
