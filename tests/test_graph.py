import gzip
import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given

from conftest import assert_graphs_equal, op, random_dags
from rlplace.cluster import CommModel
from rlplace.errors import GraphError
from rlplace.graph import CONTROL, OpGraph
from rlplace.zoo import layered, linear_regression


def rich_graph() -> OpGraph:
    """Every optional attribute, a multi-output op read twice by one op, a control edge."""
    ops = [
        op("w", out=[0], persistent=64, op_type="VariableV2", colocation_group="w", layer=0),
        op("split", compute_time=0.5, out=[8, 8], temporary=4, op_type="Split",
           output_shapes=[[2, 1], None], layer=0),
        op("mul", out=[16], op_type="Mul", output_shapes=[[2, 2]], layer=1),
        op("grad", out=[16], op_type="MulGrad", forward_op="mul", layer="head"),
        op("apply", out=[], op_type="Apply", colocation_group="w"),
    ]
    edges = [("w", "mul", 64), ("split", "mul", 8, 0), ("split", "mul", 8, 1), ("mul", "grad", 16),
             ("grad", "apply", 16), ("w", "apply", 64), ("split", "apply", 0, CONTROL)]
    return OpGraph.from_records(ops, edges, name="rich")


def test_json_gz_round_trip(tmp_path):
    for g in (rich_graph(), layered(300, seed=4), linear_regression()):
        path = tmp_path / f"{g.name}.json.gz"
        g.save(path)
        h = OpGraph.load(path)
        assert h.name == g.name
        assert_graphs_equal(g, h)
        doc = json.loads(gzip.decompress(path.read_bytes()))
        assert doc["format"] == "rlplace.opgraph" and doc["version"] == 1


def test_networkx_round_trip():
    for g in (rich_graph(), layered(300, seed=5), linear_regression()):
        nxg = g.to_networkx()
        assert set(nxg.nodes["op0" if "op0" in nxg else g.names[0]]) >= {"compute_time", "output_bytes"}
        assert_graphs_equal(g, OpGraph.from_networkx(nxg))
    # an op reading two outputs of one producer needs a MultiDiGraph; a plain graph does not
    assert isinstance(rich_graph().to_networkx(), nx.MultiDiGraph)
    assert not isinstance(linear_regression().to_networkx(), nx.MultiDiGraph)


def test_from_plain_digraph_defaults_port_zero():
    g = nx.DiGraph()
    g.add_node("a", compute_time=1.0, persistent_bytes=0, temporary_bytes=0, output_bytes=[5])
    g.add_node("b", compute_time=2.0, persistent_bytes=0, temporary_bytes=0, output_bytes=[1])
    g.add_edge("a", "b", bytes=5)
    og = OpGraph.from_networkx(g)
    assert og.edge_records() == [["a", "b", 5, 0]]


def test_index_is_topological_and_keeps_a_topological_input_order():
    ops = [op(f"n{i}") for i in range(5)]
    edges = [("n3", "n0", 1), ("n4", "n3", 1), ("n1", "n2", 1)]
    g = OpGraph.from_records(ops, edges)
    assert all(g.index[s] < g.index[d] for s, d, *_ in edges)
    assert g.names == ["n1", "n2", "n4", "n3", "n0"]  # lexicographic by input position
    h = OpGraph.from_records(ops, [("n0", "n1", 1), ("n2", "n4", 1)])
    assert h.names == [f"n{i}" for i in range(5)]


BAD_GRAPHS = [
    ([op("a"), op("b")], [("a", "b", 1), ("b", "a", 1)], "cycle through op"),
    ([op("a")], [("a", "a", 1)], "op 'a': self-loop"),
    ([op("a", compute_time=-1.0)], [], "op 'a': compute_time"),
    ([op("a", compute_time=math.nan)], [], "op 'a': compute_time"),
    ([op("a", compute_time=math.inf)], [], "op 'a': compute_time"),
    ([op("a", persistent=-3)], [], "op 'a': persistent_bytes"),
    ([op("a", temporary=1.5)], [], "op 'a': temporary_bytes"),
    ([op("a", out=[-1])], [], "op 'a': output_bytes[0]"),
    ([{k: v for k, v in op("a").items() if k != "compute_time"}], [], "op 'a': missing required attribute 'compute_time'"),
    ([{k: v for k, v in op("a").items() if k != "output_bytes"}], [], "op 'a': missing required attribute 'output_bytes'"),
    ([op("a"), op("a")], [], "duplicate op name 'a'"),
    ([op("a")], [("a", "ghost", 1)], "unknown op 'ghost'"),
    ([op("a"), op("b")], [("a", "b", -5)], "edge 'a' -> 'b': bytes"),
    ([op("a"), op("b")], [("a", "b", 1, 3)], "edge 'a' -> 'b': src_output 3 out of range"),
    ([op("a"), op("b")], [("a", "b", 1), ("a", "b", 2)], "duplicate edge 'a' -> 'b'"),
    ([op("a", forward_op="ghost")], [], "op 'a': forward_op 'ghost'"),
    ([op("a", flops=3)], [], "op 'a': unknown attribute 'flops'"),
    ([op("a", layer=1.5)], [], "op 'a': layer"),
    ([op("a", out=[1e300])], [], "op 'a': output_bytes[0] must be an integer in [0, 2**62]"),
    ([op("a", persistent=10**30)], [], "op 'a': persistent_bytes must be an integer in [0, 2**62]"),
    ([op("a", temporary=10**400)], [], "op 'a': temporary_bytes"),
    ([op("a", compute_time=10**400)], [], "op 'a': compute_time"),
    ([op(c, compute_time=1.7e308) for c in "abc"], [],
     "op 'a': compute_time must be a number of seconds in [0, 1e+09]"),
    ([op(c, compute_time=4e8) for c in "abc"], [],
     "op 'c': the compute times up to this op add up to more than 1e+09 s"),
    ([op(c, persistent=2**61) for c in "abc"], [], "op 'b': the bytes up to this op add up to more than 2**62"),
    ([op("a", persistent=2**61, out=[0]), op("b")], [("a", "b", 2**61), ("a", "b", 2**61, -1)],
     "edge 'a' -> 'b': the graph's bytes up to this edge add up to more than 2**62"),
    ([op("a", out=[1, 2], output_shapes="ab")], [], "op 'a': output_shapes must list one shape per output"),
    ([op("a", output_shapes=[3])], [], "op 'a': output_shapes: a shape must be a list of dimensions or null"),
    ([op("a", output_shapes=[["x"]])], [], "op 'a': output_shapes dimension"),
    ([op("a", output_shapes=[[-2]])], [], "op 'a': output_shapes dimension"),
    ([op(["a"])], [], "op ['a'] (#0 of the ops): op names must be non-empty strings"),
    ([op("a"), op("b")], [(["a"], "b", 1)], "edge ['a'] -> 'b': unknown op ['a']"),
    (["a"], [], "op #0: expected a record with a name and costs, got 'a'"),
    ([None], [], "op #0: expected a record"),
]


@pytest.mark.parametrize("ops,edges,message", BAD_GRAPHS, ids=[b[2] for b in BAD_GRAPHS])
def test_validation_errors_name_the_op(ops, edges, message):
    with pytest.raises(GraphError) as info:
        OpGraph.from_records(ops, edges)
    assert message in str(info.value)


def test_cycle_message_lists_the_cycle():
    ops = [op("a"), op("b"), op("c"), op("d")]
    with pytest.raises(GraphError) as info:
        OpGraph.from_records(ops, [("a", "b", 1), ("b", "c", 1), ("c", "d", 1), ("c", "b", 1)])
    assert "'b'" in str(info.value) and "'c'" in str(info.value) and "'a'" not in str(info.value)


def test_load_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json.gz"
    with pytest.raises(GraphError, match="nope.json.gz: no such graph file"):
        OpGraph.load(missing)
    plain = tmp_path / "plain.json.gz"
    plain.write_text("{}")
    with pytest.raises(GraphError, match="plain.json.gz: not a json.gz OpGraph file"):
        OpGraph.load(plain)
    wrong = tmp_path / "wrong.json.gz"
    wrong.write_bytes(gzip.compress(b'{"format": "something"}'))
    with pytest.raises(GraphError, match="wrong.json.gz: not an OpGraph file"):
        OpGraph.load(wrong)
    future = tmp_path / "future.json.gz"
    future.write_bytes(gzip.compress(json.dumps({"format": "rlplace.opgraph", "version": 99}).encode()))
    with pytest.raises(GraphError, match="unsupported OpGraph format version 99"):
        OpGraph.load(future)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(json.dumps(
        {"format": "rlplace.opgraph", "version": 1, "ops": [op("a", compute_time=-2)], "edges": []}).encode()))
    with pytest.raises(GraphError, match=r"bad.json.gz: op 'a': compute_time"):
        OpGraph.load(bad)


def test_csr_and_tensor_views():
    g = rich_graph()
    for i in range(g.num_ops):
        out = g.edge_dst[g.out_ptr[i]:g.out_ptr[i + 1]]
        assert sorted(out.tolist()) == sorted(d for s, d in zip(g.edge_src, g.edge_dst) if s == i)
        assert sorted(g.predecessors(i).tolist()) == sorted(s for s, d in zip(g.edge_src, g.edge_dst) if d == i)
    # each tensor is one (source, port); its edges are contiguous and carry its bytes
    for t in range(len(g.tensor_src)):
        e = slice(g.tensor_ptr[t], g.tensor_ptr[t + 1])
        assert set(g.edge_src[e]) == {g.tensor_src[t]} and set(g.edge_src_output[e]) == {g.tensor_port[t]}
        assert g.tensor_bytes[t] == g.edge_bytes[e].max()
    split = g.index["split"]
    assert len(range(g.op_tensor_ptr[split], g.op_tensor_ptr[split + 1])) == 3  # ports 0, 1, control
    assert g.unread_output_bytes[g.index["grad"]] == 0 and g.unread_output_bytes[g.index["apply"]] == 0


def test_statistics_by_hand():
    ops = [op("a", 1.0, out=[10], persistent=5), op("b", 2.0, out=[20], temporary=3),
           op("c", 4.0, out=[30]), op("d", 0.5, out=[])]
    g = OpGraph.from_records(ops, [("a", "b", 10), ("a", "c", 10), ("b", "d", 20), ("c", "d", 30)])
    comm = CommModel(latency=0.1, seconds_per_byte=0.01)
    s = g.stats(comm)
    assert (s.num_ops, s.num_edges) == (4, 4)
    assert s.total_compute == pytest.approx(7.5)
    assert s.total_memory == 5 + 3 + 10 + 20 + 30
    assert s.critical_path == pytest.approx(1.0 + 4.0 + 0.5)
    assert s.ccr == pytest.approx((4 * 0.1 + 0.01 * (10 + 10 + 20 + 30)) / 7.5)
    assert g.critical_path(speed=2.0) == pytest.approx(5.5 / 2)


@given(random_dags())
def test_critical_path_matches_networkx(g):
    nxg = nx.DiGraph()
    nxg.add_nodes_from(range(g.num_ops))
    # node weights as weights of edges into the node, from a virtual source
    nxg.add_weighted_edges_from((int(s), int(d), g.compute_time[d]) for s, d in zip(g.edge_src, g.edge_dst))
    nxg.add_weighted_edges_from(("src", i, g.compute_time[i]) for i in range(g.num_ops))
    assert g.critical_path() == pytest.approx(nx.dag_longest_path_length(nxg), abs=1e-12)


def write_doc(path, doc):
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def chain_doc(n=3):
    return {"format": "rlplace.opgraph", "version": 1, "name": "c",
            "ops": [op(f"n{i}") for i in range(n)], "edges": [[f"n{i}", f"n{i + 1}", 10] for i in range(n - 1)]}


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(ops={"n0": op("n0")}), "ops must be a list, got {'n0'"),
    (lambda d: d.update(ops="n0"), "ops must be a list, got 'n0'"),
    (lambda d: d.update(ops=None), "ops must be a list, got None"),
    (lambda d: d.update(edges={}), "edges must be a list"),
    (lambda d: d.update(ops=[], edges=[]), "the graph has no ops"),
    (lambda d: d.pop("edges"), "missing key 'edges'"),
    (lambda d: d.update(name=["x"]), "name must be a string"),
    (lambda d: d["ops"][1].update(persistent_bytes=1e300), "op 'n1': persistent_bytes"),
    (lambda d: d["ops"][1].update(output_bytes=[10**30]), "op 'n1': output_bytes[0]"),
    (lambda d: d["ops"][2].update(output_shapes=[[1, "2"]]), "op 'n2': output_shapes dimension"),
    (lambda d: d["ops"][2].update(output_shapes=[1, 2]), "op 'n2': output_shapes must list one shape"),
    (lambda d: d["ops"][0].update(name=["n0"]), "op ['n0'] (#0 of the ops)"),
    (lambda d: d["edges"][0].__setitem__(0, ["n0"]), "edge ['n0'] -> 'n1': unknown op"),
    (lambda d: d["ops"][1].update(compute_time=float("nan")), "op 'n1': compute_time"),
])
def test_malformed_graph_files_name_the_file_and_the_op(tmp_path, mutate, message):
    doc = chain_doc()
    mutate(doc)
    path = write_doc(tmp_path / "g.json.gz", doc)
    with pytest.raises(GraphError) as info:
        OpGraph.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_json_level_corruptions_are_graph_errors(tmp_path):
    for raw in [b'{"format": "rlplace.opgraph", "version": 1, "ops": [' + b"1" * 5000 + b"]}",  # int too long
                b"[" * 100_000,  # too deeply nested
                b'{"format": "rlplace.opgraph", "version": 1, "ops": "\xff\xfe"}',
                b"\xff\xfe\x00"]:
        path = tmp_path / "g.json.gz"
        path.write_bytes(gzip.compress(raw))
        with pytest.raises(GraphError, match="g.json.gz: "):
            OpGraph.load(path)


def test_the_decompressed_size_is_capped(tmp_path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b" " * 1_000_000 + json.dumps(chain_doc()).encode()))
    with pytest.raises(GraphError, match=r"bomb.json.gz: more than 999999 bytes decompressed \(graph.max_bytes"):
        OpGraph.load(path, max_bytes=999_999)
    assert OpGraph.load(path, max_bytes=2_000_000).num_ops == 3


def test_the_default_cap_takes_the_gnmt_profile_and_refuses_a_gigabyte(baechi_profile, tmp_path):
    from rlplace.graph import DEFAULT_MAX_FILE_BYTES
    from rlplace.zoo import load_baechi_profile

    path = tmp_path / "gnmt.json.gz"
    load_baechi_profile(baechi_profile).save(path)
    assert len(gzip.decompress(path.read_bytes())) * 100 < DEFAULT_MAX_FILE_BYTES < 2**30
    assert OpGraph.load(path).num_ops == 2828


def test_graphs_whose_compute_would_overflow_are_refused_before_heft_sees_them():
    ops = [op(c, compute_time=1.7e308) for c in "abc"]
    with pytest.raises(GraphError, match="op 'a': compute_time"):
        OpGraph.from_records(ops, [("a", "b", 1), ("b", "c", 1)])


def test_a_graph_at_the_limits_is_placed_with_valid_devices_and_a_finite_step_time():
    from rlplace.placers import make_placer
    from rlplace.presets import load_preset
    from rlplace.sim import simulate

    ops = [op(c, compute_time=3.3e8, out=[2**58]) for c in "abc"]
    g = OpGraph.from_records(ops, [("a", "b", 2**58), ("b", "c", 2**58)])
    cluster = load_preset("cluster", "baechi_2080")
    for name in ("heft", "m_etf", "m_sct"):
        device = make_placer(name).place(g, cluster).device_of
        assert ((device >= 0) & (device < cluster.num_devices)).all(), name
        assert math.isfinite(simulate(g, cluster, device).step_time)
