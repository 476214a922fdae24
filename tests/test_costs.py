"""Analytical op costs (FLOPs, bytes, roofline) and profile perturbation."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import assert_graphs_equal, op, random_dags
from rlplace.costs import (DEVICES, RULES, DeviceSpec, Tensor, device_spec, op_costs, perturb,
                           roofline_time, with_analytical_costs)
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph

F32 = 4


def tensor(name, shape, op_type="Placeholder"):
    return op(name, out=[int(np.prod(shape)) * F32], op_type=op_type, output_shapes=[list(shape)])


def one_op(op_type, inputs, out_shapes, **extra):
    """A graph of placeholders feeding one op of ``op_type``; returns (graph, index of the op)."""
    ops = [tensor(f"in{k}", s) for k, s in enumerate(inputs)]
    ops.append(op("x", out=[int(np.prod(s)) * F32 for s in out_shapes], op_type=op_type,
                  output_shapes=[list(s) for s in out_shapes], **extra))
    edges = [(f"in{k}", "x", int(np.prod(s)) * F32) for k, s in enumerate(inputs)]
    g = OpGraph.from_records(ops, edges)
    return g, g.index["x"]


def costs_of(op_type, inputs, out_shapes):
    g, i = one_op(op_type, inputs, out_shapes)
    c = op_costs(g)
    return c.flops[i], c.bytes[i]


@pytest.mark.parametrize("a,b,c", [
    ((4, 3), (3, 5), (4, 5)),   # A B
    ((3, 4), (3, 5), (4, 5)),   # A^T B
    ((4, 3), (5, 3), (4, 5)),   # A B^T
    ((3, 5), (4, 3), (4, 5)),   # edges do not say which input is A
])
def test_matmul_flops_are_2mnk_whatever_the_transposes(a, b, c):
    flops, moved = costs_of("MatMul", [a, b], [c])
    assert flops == 2 * 4 * 5 * 3
    assert moved == (12 + 15 + 20) * F32


def test_batch_matmul_flops_count_every_batch_and_broadcast_operands():
    assert costs_of("BatchMatMulV2", [(2, 7, 4, 3), (2, 7, 3, 5)], [(2, 7, 4, 5)])[0] == 2 * 14 * 4 * 5 * 3
    assert costs_of("BatchMatMulV2", [(2, 4, 3), (3, 5)], [(2, 4, 5)])[0] == 2 * 2 * 4 * 5 * 3


def test_conv2d_and_its_gradients_count_the_forward_flops():
    # 5x5 image, 2 -> 4 channels, 3x3 kernel, SAME: 2 * (1*5*5*4 outputs) * (3*3*2) = 3600
    x, f, y = (1, 5, 5, 2), (3, 3, 2, 4), (1, 5, 5, 4)
    assert costs_of("Conv2D", [x, f], [y]) == (3600, (50 + 72 + 100) * F32)
    assert costs_of("Conv2D", [f, x], [y])[0] == 3600  # input order does not matter
    assert costs_of("Conv2DBackpropInput", [(4,), f, y], [x])[0] == 3600
    assert costs_of("Conv2DBackpropFilter", [x, (4,), y], [f])[0] == 3600
    # stride 2, VALID: 2x2 output positions
    assert costs_of("Conv2D", [x, f], [(1, 2, 2, 4)])[0] == 2 * 16 * 18
    assert costs_of("Conv2DBackpropFilter", [(1, 5, 5, 4), (4,), (1, 2, 2, 4)], [(3, 3, 4, 4)])[0] == 2 * 16 * 36


def test_lstm_block_cell_counts_its_gate_matmul():
    b, n_in, h = 8, 6, 5
    flops, _ = costs_of("LSTMBlockCell", [(b, n_in), (b, h), (b, h), (n_in + h, 4 * h), (h,), (h,), (h,), (4 * h,)],
                        [(b, h)] * 7)
    assert flops == 2 * b * (n_in + h) * 4 * h + 10 * b * 4 * h


def test_optimizer_updates_move_the_variable_and_its_slots():
    grad = (100, 10)
    nbytes = 1000 * F32
    assert costs_of("ResourceApplyGradientDescent", [(), grad], [])[1] == 3 * nbytes  # var r/w + grad
    assert costs_of("ResourceApplyAdam", [(), (), grad], [])[1] == 7 * nbytes  # var, m, v r/w + grad
    assert costs_of("ResourceApplyRMSProp", [(), grad], [])[1] == 7 * nbytes


def test_views_and_sources_are_free_and_element_wise_ops_memory_bound():
    assert costs_of("Reshape", [(4, 6)], [(24,)]) == (0, 0)
    flops, moved = costs_of("AddV2", [(4, 6), (4, 6)], [(4, 6)])
    assert flops == 24 and moved == 3 * 24 * F32
    assert costs_of("Sum", [(4, 6)], [(4,)]) == (24, 28 * F32)


def test_unknown_types_are_memory_bound_and_reported():
    ops = [tensor("a", (10,)), op("fwd", out=[40], op_type="Mystery", output_shapes=[[10]]),
           op("grad", out=[40], op_type="MysteryGrad", output_shapes=[[10]], forward_op="fwd"),
           op("other", out=[40], op_type="Mystery", output_shapes=[[10]])]
    g = OpGraph.from_records(ops, [("a", "fwd", 40), ("fwd", "grad", 40), ("a", "other", 40)])
    c = op_costs(g)
    assert c.unknown_types == {"Mystery": 2, "MysteryGrad": 1}
    assert c.flops[g.index["fwd"]] == 0 and c.bytes[g.index["fwd"]] == 80
    assert c.known.tolist() == [True, False, False, False]  # a Placeholder is known


def test_a_gradient_of_an_unknown_type_takes_its_forward_ops_cost():
    ops = [tensor("a", (4, 3)), tensor("b", (3, 5)),
           op("mm", out=[80], op_type="MatMul", output_shapes=[[4, 5]]),
           op("g", out=[48], op_type="FancyGrad", output_shapes=[[4, 3]], forward_op="mm")]
    g = OpGraph.from_records(ops, [("a", "mm", 48), ("b", "mm", 60), ("mm", "g", 80)])
    c = op_costs(g)
    assert c.known.all() and c.flops[g.index["g"]] == c.flops[g.index["mm"]] == 120
    assert c.unknown_types == {}


def test_an_output_read_by_edges_counts_its_full_size():
    """Ops writing a forwarded buffer have output_bytes 0 in the profile but still write it."""
    ops = [tensor("a", (10,)), op("relu", out=[0], op_type="Relu", output_shapes=[[10]]),
           op("sink", out=[0], op_type="NoOp")]
    g = OpGraph.from_records(ops, [("a", "relu", 40), ("relu", "sink", 40)])
    assert op_costs(g).bytes[g.index["relu"]] == 80


def test_roofline_picks_the_binding_bound():
    spec = DeviceSpec("toy", peak_flops=1e12, memory_bandwidth=1e11, launch_overhead=1e-6)
    t = roofline_time(np.array([1e9, 1e6, 0.0]), np.array([1e6, 1e9, 0.0]), spec)
    np.testing.assert_allclose(t, [1e-3 + 1e-6, 1e-2 + 1e-6, 1e-6])
    t = roofline_time(np.array([1e9, 1e6, 0.0]), np.array([1e6, 1e9, 0.0]), spec, np.array([True, False, False]))
    np.testing.assert_allclose(t, [1e-3 + 1e-6, 1e-2, 0.0])  # no launch, no overhead


def test_device_specs_presets_custom_and_errors():
    assert set(DEVICES) == {"gtx2080", "v100", "p100", "k40"}
    assert device_spec("k40").peak_flops < device_spec("p100").peak_flops < device_spec("v100").peak_flops
    custom = device_spec({"peak_flops": 2e12, "memory_bandwidth": 1e11})
    assert custom.name == "custom" and custom.launch_overhead > 0
    with pytest.raises(ConfigError, match="unknown device 'h100'"):
        device_spec("h100")
    with pytest.raises(ConfigError, match="memory_bandwidth"):
        device_spec({"peak_flops": 1e12})
    with pytest.raises(ConfigError, match="peak_flops must be"):
        DeviceSpec("bad", -1.0, 1e9)


def test_with_analytical_costs_changes_only_compute_time():
    g, i = one_op("MatMul", [(64, 32), (32, 16)], [(64, 16)])
    fast, slow = with_analytical_costs(g, "v100"), with_analytical_costs(g, "k40")
    assert slow.compute_time[i] > fast.compute_time[i] > 0
    assert [r for r in fast.edge_records()] == g.edge_records()
    for k in range(g.num_ops):
        assert {**fast.op_record(k), "compute_time": 0} == {**g.op_record(k), "compute_time": 0}


@given(random_dags(), st.floats(0.0, 2.0), st.integers(0, 2**32 - 1), st.booleans())
def test_perturbation_stays_in_range_keeps_the_graph_and_is_deterministic(g, p, seed, symmetric):
    p = min(p, 1.0) if symmetric else p
    a, b = perturb(g, p, seed, symmetric=symmetric), perturb(g, p, seed, symmetric=symmetric)
    assert_graphs_equal(a, b)
    low = 1 - p if symmetric else 1.0
    assert np.all(a.compute_time >= g.compute_time * low - 1e-12)
    assert np.all(a.compute_time <= g.compute_time * (1 + p) + 1e-12)
    assert np.all(a.edge_bytes >= np.floor(g.edge_bytes * low))
    assert np.all(a.edge_bytes <= np.ceil(g.edge_bytes * (1 + p)))
    assert a.names == g.names and a.name == g.name
    for k in range(g.num_ops):
        assert {**a.op_record(k), "compute_time": 0} == {**g.op_record(k), "compute_time": 0}
    assert [e[:2] + e[3:] for e in a.edge_records()] == [e[:2] + e[3:] for e in g.edge_records()]
    np.testing.assert_array_equal(perturb(g, p, seed, comm=False, symmetric=symmetric).edge_bytes, g.edge_bytes)


def test_perturbation_draws_independent_factors_and_a_tensors_edges_share_one():
    ops = [op("src", out=[1000])] + [op(f"n{k}", compute_time=1.0) for k in range(200)]
    edges = [("src", f"n{k}", 1000) for k in range(200)]
    g = OpGraph.from_records(ops, edges)
    a = perturb(g, 0.5, seed=1)
    factors = a.compute_time[1:]
    assert len(np.unique(factors)) == 200 and 1.0 <= factors.min() and factors.max() <= 1.5
    assert factors.mean() == pytest.approx(1.25, abs=0.05)  # U[1, 1.5]
    assert len(np.unique(a.edge_bytes)) == 1  # one tensor: one factor
    assert not np.array_equal(perturb(g, 0.5, seed=2).compute_time, a.compute_time)
    assert_graphs_equal(perturb(g, 0.0, seed=3), g)


@pytest.mark.parametrize("p,symmetric", [(-0.1, False), (1.5, True), (float("nan"), False)])
def test_perturbation_rejects_bad_p(p, symmetric):
    g = OpGraph.from_records([op("a")], [])
    with pytest.raises(ConfigError, match="perturb.p"):
        perturb(g, p, symmetric=symmetric)


# ------------------------------------------------------------------ extracted zoo models
tf = pytest.importorskip("tensorflow")

from rlplace.tf.extract import extract  # noqa: E402
from rlplace.zoo import build_tf_model  # noqa: E402

SMALL = {
    "tensor_holography": dict(batch_size=1, image_size=8, filters=4, num_layers=3),
    "gnmt": dict(batch_size=2, seq_length=3, hidden=8, vocab_size=20, num_layers=2),
    "transformer": dict(batch_size=2, seq_length=4, hidden=8, heads=2, filter_size=16, vocab_size=20,
                        encoder_layers=1, decoder_layers=1),
}
HEAVY = ("MatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_extracted_zoo_models_get_positive_costs_for_every_known_op(name):
    g = extract(build_tf_model(name, **SMALL[name]))
    c = op_costs(g)
    assert c.unknown_types == {} and c.known.all()
    costed = with_analytical_costs(g, "p100")
    spec = device_spec("p100")
    assert np.all(costed.compute_time > 0)
    heavy = np.array([t in HEAVY for t in g.op_type])
    assert heavy.any() and np.all(c.flops[heavy] > 0)
    work = c.bytes > 0
    np.testing.assert_array_less(spec.launch_overhead, costed.compute_time[work])
    free = np.array([t in ("Const", "VarHandleOp", "Identity", "NoOp", "Reshape") for t in g.op_type])
    np.testing.assert_allclose(costed.compute_time[free], spec.launch_overhead)
    assert costed.edge_records() == g.edge_records()


# ------------------------------------------------------------------ keras.applications models
KERAS_APPS = ("MobileNetV2", "EfficientNetB0", "ResNet50")


@pytest.mark.parametrize("app", KERAS_APPS)
def test_keras_applications_have_a_formula_for_every_op_type(app):
    """MobileNetV2 and EfficientNetB0 bring depthwise convolutions and their two gradients,
    EfficientNetB0 dropout's random ops; nothing may fall back to the memory-bound default."""
    from rlplace.import_.keras import from_keras

    imported = from_keras(f"keras.applications:{app}", batch_size=1, costs="none",
                          args={"weights": None, "input_shape": (32, 32, 3), "classes": 4})
    c = op_costs(imported.graph)
    assert c.unknown_types == {}
    types = set(imported.graph.op_type)
    if app != "ResNet50":
        depthwise = [i for i, t in enumerate(imported.graph.op_type) if t.startswith("DepthwiseConv2dNative")]
        assert {imported.graph.op_type[i] for i in depthwise} == {
            "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"}
        assert np.all(c.flops[depthwise] > 0)
    assert "Conv2D" in types


def test_depthwise_flops_are_2_kh_kw_per_output_element():
    x, f = Tensor([2, 8, 8, 6], 0), Tensor([3, 3, 6, 2], 0)
    y = Tensor([2, 4, 4, 12], 0)  # stride 2, channel multiplier 2
    assert RULES["DepthwiseConv2dNative"]([x, f], [y])[0] == 2 * 2 * 4 * 4 * 12 * 9
    sizes = Tensor([4], 16)
    dx = Tensor([2, 8, 8, 6], 0)
    assert RULES["DepthwiseConv2dNativeBackpropInput"]([sizes, f, y], [dx])[0] == 2 * 2 * 4 * 4 * 12 * 9
    assert RULES["DepthwiseConv2dNativeBackpropFilter"]([x, sizes, y], [Tensor([3, 3, 6, 2], 0)])[0] \
        == 2 * 2 * 4 * 4 * 12 * 9
