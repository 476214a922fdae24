"""Bring your own model: PyTorch training steps, the dnn-partitioning JSON and Keras sources."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlplace.cluster import load_preset
from rlplace.costs import op_costs
from rlplace.errors import ConfigError, GraphError, RlplaceError
from rlplace.import_.fiddle import fiddle_graph, load_fiddle
from rlplace.placers import make_placer
from rlplace.sim import simulate

PLACERS = ("single", "m_etf", "celeritas", "metis")


def check_placers_run(graph, cluster):
    for name in PLACERS:
        placement = make_placer(name).place(graph, cluster)
        result = simulate(graph, cluster, placement)
        assert result.step_time >= graph.critical_path(cluster.speeds.max()) - 1e-12, name


# ------------------------------------------------------------------------ dnn-partitioning
def fiddle_doc(**changes):
    doc = {"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1, "nodes": [
        {"id": 1, "name": "in", "supportedOnFpga": 1, "cpuLatency": 0.0, "fpgaLatency": 0.0,
         "isBackwardNode": 0, "colorClass": 1, "size": 0.0},
        {"id": 2, "name": "fc", "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 2.0,
         "isBackwardNode": 0, "colorClass": 2, "size": 4e6},
        {"id": 3, "name": "softmax", "supportedOnFpga": 0, "cpuLatency": 2.0, "fpgaLatency": 1.0,
         "isBackwardNode": 0, "size": 0.0},
        {"id": 4, "name": "fcgrad", "supportedOnFpga": 1, "cpuLatency": 20.0, "fpgaLatency": 4.0,
         "isBackwardNode": True, "colorClass": 2, "size": 4e6}],
        "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 1e6},
                  {"sourceId": 2, "destId": 3, "cost": 0.25, "size": 5e5},
                  {"sourceId": 3, "destId": 4, "cost": 0.25}]}
    doc.update(changes)
    return doc


def test_fiddle_maps_nodes_edges_and_the_cluster(tmp_path):
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(fiddle_doc()))
    imported = load_fiddle(path)
    g, cluster = imported.graph, imported.cluster
    assert g.names == ["in", "fc", "softmax", "fcgrad"]
    np.testing.assert_allclose(g.compute_time, [0.0, 2e-3, 1e-3, 4e-3])  # fpgaLatency, ms -> s
    assert g.persistent_bytes.tolist() == [0, 4_000_000, 0, 4_000_000]
    assert g.colocation_group[g.index["fc"]] == g.colocation_group[g.index["fcgrad"]] == "color2"
    assert g.colocation_group[g.index["in"]] is None  # a class of one is no constraint
    assert g.forward_op[g.index["fcgrad"]] == g.index["fc"] and g.forward_op[g.index["fc"]] == -1
    assert imported.cpu_only == ["softmax"]
    # CommModel: total cost / total size over edges with both; an edge without size gets the
    # bytes that reproduce its cost
    assert cluster.comm.seconds_per_byte == pytest.approx(0.75e-3 / 1.5e6)
    e = {(g.names[s], g.names[d]): b for s, d, b in zip(g.edge_src, g.edge_dst, g.edge_bytes)}
    assert e[("in", "fc")] == 1_000_000 and e[("softmax", "fcgrad")] == 500_000
    assert cluster.num_devices == 2 and cluster.memory.tolist() == [10**9] * 2
    with_cpu = load_fiddle(path, include_cpus=True).cluster
    assert with_cpu.num_devices == 3 and with_cpu.speeds[2] == pytest.approx(7.0 / 32.0)
    check_placers_run(g, cluster)


@pytest.mark.parametrize("change,needle", [
    (dict(maxFPGAs=None), None), (dict(edges=[{"sourceId": 1, "destId": 9, "cost": 0.0}]), "unknown node id"),
    (dict(nodes=[{"id": 1}]), "missing key 'supportedOnFpga'"),
])
def test_fiddle_errors_name_the_problem(change, needle):
    doc = fiddle_doc(**change)
    if needle is None:
        del doc["maxFPGAs"]
        needle = "missing key 'maxFPGAs'"
    with pytest.raises(GraphError, match=needle):
        fiddle_graph(doc)


def test_a_fiddle_number_past_python_s_digit_limit_is_named_by_its_size():
    doc = fiddle_doc()
    doc["nodes"][0]["size"] = 10**5000  # its repr would raise ValueError
    with pytest.raises(GraphError, match="node 0: size must be a finite number >= 0, got an integer of 16610 bits"):
        fiddle_graph(doc)


def test_fiddle_file_errors(tmp_path):
    with pytest.raises(GraphError, match="missing.json: no such dnn-partitioning JSON file"):
        load_fiddle(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(GraphError, match="bad.json"):
        load_fiddle(bad)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(["top", "node", "edge"]), key=st.sampled_from(
    ["maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges", "id", "supportedOnFpga", "cpuLatency", "fpgaLatency",
     "isBackwardNode", "colorClass", "size", "name", "sourceId", "destId", "cost", "whole"]),
       index=st.integers(0, 3), value=JSON_VALUES)
def test_fiddle_graph_raises_only_rlplace_errors(where, key, index, value):
    """Any one value of the document replaced by any JSON value: an import or an RlplaceError."""
    doc = fiddle_doc()
    if where == "top":
        if key == "whole":
            doc = value
        else:
            doc[key] = value
    else:
        items = doc["nodes" if where == "node" else "edges"]
        item = index % len(items)
        if key == "whole":
            items[item] = value
        else:
            items[item][key] = value
    try:
        fiddle_graph(doc)
    except RlplaceError:
        pass


# ------------------------------------------------------------------------ PyTorch
torch = pytest.importorskip("torch")
nn = torch.nn

from rlplace.import_.torch import from_torch  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, groups=2), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.head = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def small_transformer():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(32, 10))


@pytest.fixture(scope="module")
def torch_graphs():
    torch.manual_seed(0)
    cnn, transformer = SmallCNN(), small_transformer()
    return {"cnn": (cnn, from_torch(cnn, torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))),
            "transformer": (transformer, from_torch(transformer, torch.randn(2, 8, 32),
                                                    torch.randint(0, 10, (2, 8))))}


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_torch_training_step_graph(torch_graphs, name):
    model, imported = torch_graphs[name]
    g = imported.graph
    assert g.num_ops > 50 and g.num_edges > g.num_ops
    assert np.all(g.edge_src < g.edge_dst)  # topological indices: a DAG
    params = [i for i, t in enumerate(g.op_type) if t == "parameter"]
    assert g.persistent_bytes[params].sum() == sum(p.numel() for p in model.parameters()) * 4
    assert np.all(g.output_total[params] == 0)
    # forward/backward pairs: every backward op points at a forward op
    backward = np.flatnonzero(g.forward_op >= 0)
    assert len(backward) > g.num_ops // 5
    assert np.all(g.forward_op[backward] < backward)
    pairs = {(g.op_type[g.forward_op[i]], g.op_type[i]) for i in backward}
    heavy = ("aten.convolution", "aten.convolution_backward") if name == "cnn" else \
        ("aten.native_layer_norm", "aten.native_layer_norm_backward")
    assert heavy in pairs
    # each parameter is colocated with its SGD update, which is no backward op
    for i in params:
        group = g.colocation_groups[g.colocation_group[i]]
        assert len(group) >= 2 and all(g.forward_op[j] == -1 for j in group)
    costs = op_costs(g)
    assert costs.unknown_types == {}
    mm = [i for i, t in enumerate(g.op_type) if t in ("aten.convolution", "aten.mm", "aten.addmm", "aten.bmm")]
    assert mm and np.all(costs.flops[mm] > 0)
    # views, sources and allocations launch no kernel: no device time; every other op pays the launch
    idle = {g.op_type[i] for i in np.flatnonzero(~costs.launches)}
    assert {"parameter", "input", "aten.t" if name == "cnn" else "aten.view"} <= idle
    assert np.all(g.compute_time[~costs.launches] == 0) and np.all(g.compute_time[costs.launches] > 0)
    check_placers_run(g, load_preset("baechi_2080"))


def test_torch_conv_flops_are_the_textbook_count(torch_graphs):
    _, imported = torch_graphs["cnn"]
    g = imported.graph
    c = op_costs(g)
    convs = [i for i, t in enumerate(g.op_type) if t == "aten.convolution"]
    # conv1: 2 * (2*8*16*16 outputs) * 3*3*3; conv2 (groups 2): 2 * (2*16*7*7) * 4*3*3
    assert sorted(c.flops[convs].tolist()) == sorted([2 * 2 * 8 * 16 * 16 * 27, 2 * 2 * 16 * 7 * 7 * 36])
    back = [i for i, t in enumerate(g.op_type) if t == "aten.convolution_backward"]
    # conv2's backward computes dx and dw (twice the forward), conv1's only dw (no dx for the input)
    assert sorted(c.flops[back].tolist()) == sorted([2 * 2 * 8 * 16 * 16 * 27, 2 * 2 * 2 * 16 * 7 * 7 * 36])


def test_torch_flops_are_pytorchs_own_count_but_for_a_grouped_convolutions_gradient(torch_graphs):
    """The FLOPs the import counts per op (``counted_flops``) add up to what PyTorch's
    FlopCounterMode counts running the same step; the one exception is the gradient of the
    grouped convolution, which keeps the textbook count (the counter ignores groups there)."""
    from torch.utils.flop_counter import FlopCounterMode

    from rlplace.import_.torch import counted_flops

    model, imported = torch_graphs["cnn"]
    g = imported.graph
    counted = counted_flops(imported.step, g)
    rules = op_costs(g).flops
    grouped = [i for i, t in enumerate(g.op_type) if t == "aten.convolution_backward"
               and rules[i] == 2 * 2 * 2 * 16 * 7 * 7 * 36]  # conv2's (groups 2), test above
    assert len(grouped) == 1 and np.isnan(counted[grouped[0]])
    with FlopCounterMode(display=False) as counter:
        x, y = torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))
        loss = nn.functional.cross_entropy(model(x), y)
        torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    by_op = counter.get_flop_counts()["Global"]
    conv_backward = by_op.pop(torch.ops.aten.convolution_backward)
    types = np.array(g.op_type)
    assert np.nansum(counted[types != "aten.convolution_backward"]) == sum(by_op.values())
    assert np.nansum(counted[types == "aten.convolution_backward"]) < conv_backward  # the grouped one left out
    assert np.all(imported.graph.compute_time[~np.isnan(counted)] > 0)


def test_torch_op_granularity_tags_layers_by_top_level_module_so_expert_splits_stages():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(4)], nn.Linear(32, 10))
    g = from_torch(model, torch.randn(8, 32), torch.randint(0, 10, (8,))).graph
    for k in range(5):
        assert g.layer[g.index[f"param:{k}.weight" if k == 4 else f"param:{k}.0.weight"]] == k
    backward = np.flatnonzero(g.forward_op >= 0)
    assert all(g.layer[i] == g.layer[g.forward_op[i]] for i in backward if g.layer[g.forward_op[i]] is not None)
    expert = make_placer("expert").place(g, load_preset("baechi_2080"))
    stage = {g.layer[i]: int(expert.device_of[i]) for i in range(g.num_ops) if g.layer[i] is not None}
    assert [stage[k] for k in range(5)] == sorted(stage[k] for k in range(5)) and len(set(stage.values())) == 4


def test_torch_profile_measures_the_ops_here():
    torch.manual_seed(0)
    imported = from_torch(SmallCNN(), torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)),
                          costs="profile", profile_steps=2)
    g = imported.graph
    convs = [i for i, t in enumerate(g.op_type) if t == "aten.convolution"]
    assert np.all(g.compute_time[convs] > 0)
    assert np.all(g.compute_time[[i for i, t in enumerate(g.op_type) if t == "parameter"]] == 0)


def test_torch_bad_costs_option():
    with pytest.raises(ConfigError, match="costs"):
        from_torch(nn.Linear(2, 2), torch.randn(1, 2), costs="measured")
