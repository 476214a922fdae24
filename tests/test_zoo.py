import io
import pickle
import sys

import networkx as nx
import numpy as np
import pytest

from rlplace.errors import ConfigError, GraphError
from rlplace.zoo import chain, fork_join, layered, linear_regression, load_baechi_profile
from rlplace.zoo.baechi import read_baechi_pickle


def test_layered_is_deterministic_and_shaped():
    a, b, c = layered(800, width=10, seed=1), layered(800, width=10, seed=1), layered(800, width=10, seed=2)
    assert a.edge_records() == b.edge_records() and np.array_equal(a.compute_time, b.compute_time)
    assert a.edge_records() != c.edge_records()
    assert a.num_ops == 800 and np.all(a.edge_src < a.edge_dst)
    layer = np.array(a.layer)
    assert np.all(layer[a.edge_src] < layer[a.edge_dst])  # edges go forward between layers
    assert np.all(a.in_ptr[11:] - a.in_ptr[10:-1] >= 1)  # every op past the first layer has inputs
    assert a.compute_time.mean() == pytest.approx(1e-3, rel=0.2)


def test_chain_and_fork_join():
    g = chain(5)
    assert g.num_edges == 4 and g.critical_path() == pytest.approx(g.total_compute)
    f = fork_join(branches=3, branch_length=4, compute_time=1.0)
    assert f.num_ops == 3 * 4 + 2
    assert f.critical_path() == pytest.approx(4 + 2)


def test_linear_regression_is_baechi_fig2():
    g = linear_regression()
    groups = {k: sorted(g.names[i] for i in v) for k, v in g.colocation_groups.items()}
    assert groups == {"Weight": ["ApplyGrad", "Weight"], "Step": ["Step", "UpdateStep"]}
    assert g.names[g.forward_op[g.index["Grad"]]] == "MatMul"
    # Baechi Fig. 4: fusing both colocation groups creates a cycle
    nxg = nx.DiGraph(g.to_networkx())
    fused = nx.contracted_nodes(nx.contracted_nodes(nxg, "Weight", "ApplyGrad", self_loops=False),
                                "Step", "UpdateStep", self_loops=False)
    assert not nx.is_directed_acyclic_graph(fused)
    step_only = nx.contracted_nodes(nxg, "Step", "UpdateStep", self_loops=False)
    assert nx.is_directed_acyclic_graph(step_only)


def test_baechi_gnmt_import(baechi_profile):
    nodes, costs = read_baechi_pickle(baechi_profile)
    g = load_baechi_profile(baechi_profile)
    assert g.num_ops == len(nodes) == 2828
    profiled = [n.name for n in nodes if n.name in costs]
    assert len(costs) == 1605 and len(profiled) == 1603  # two profiled ops are not in the graph
    for name in profiled:
        i = g.index[name]
        assert g.compute_time[i] == pytest.approx(max(costs[name].compute_cost, 1) * 1e-6)
        assert g.temporary_bytes[i] == costs[name].temporary_memory
    unprofiled = [g.index[n.name] for n in nodes if n.name not in costs]
    assert np.all(g.compute_time[unprofiled] == 1e-6)
    assert g.total_compute == pytest.approx(sum(costs[n].compute_cost for n in profiled) * 1e-6 + len(unprofiled) * 1e-6)
    # a DAG in topological index order; an input read twice by one op is one edge
    assert np.all(g.edge_src < g.edge_dst)
    inputs = {(n.name, i.lstrip("^").split(":")[0], 0 if ":" not in i else int(i.split(":")[1])) for n in nodes for i in n.input}
    assert g.num_edges == len(inputs) == 4505
    # colocation groups from the _class attribute: a variable with its initializer and reads
    assert len(g.colocation_groups) > 100
    emb = g.colocation_group[g.index["encoder/embedding"]]
    members = {g.names[i] for i in g.colocation_groups[emb]}
    assert "encoder/embedding/Assign" in members
    # a variable's output is its persistent buffer: counted once, but sent whole
    v = g.index["encoder/embedding"]
    assert g.persistent_bytes[v] == 61440000 and g.output_bytes[v] == [0]
    assert g.edge_bytes[g.out_ptr[v]:g.out_ptr[v + 1]].max() == 61440000


def test_baechi_import_refuses_foreign_classes(tmp_path):
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({"graphdef": io.StringIO("x"), "cost_dict": {}}))
    with pytest.raises(GraphError, match="refusing to load class _io.StringIO"):
        load_baechi_profile(evil)
    with pytest.raises(GraphError, match="no such Baechi profile"):
        load_baechi_profile(tmp_path / "missing.pkl")


class _ProfilePickler(pickle.Pickler):
    """Writes a Baechi cost.pkl as its authors' code did: GraphDef and placer.cost.Cost globals."""

    def reducer_override(self, obj):
        from tensorflow.core.framework import graph_pb2

        from rlplace.zoo.baechi import Cost, _SerializedProto

        if isinstance(obj, _SerializedProto):
            return graph_pb2.GraphDef, (), {"serialized": obj.serialized}
        if type(obj) is Cost:
            return sys.modules["placer.cost"].Cost, tuple(obj)
        return NotImplemented


@pytest.fixture
def write_profile(baechi_profile, monkeypatch, tmp_path):
    """``write_profile(change)``: a copy of the real profile under tmp_path, with ``change``
    applied to its unpickled dict first."""
    import types
    from collections import namedtuple

    from rlplace.zoo.baechi import _RestrictedUnpickler

    module = types.ModuleType("placer.cost")
    module.Cost = namedtuple("Cost", "compute_cost output_memory temporary_memory persistent_memory",
                             module="placer.cost")
    monkeypatch.setitem(sys.modules, "placer", types.ModuleType("placer"))
    monkeypatch.setitem(sys.modules, "placer.cost", module)

    def write(change):
        data = _RestrictedUnpickler(io.BytesIO(baechi_profile.read_bytes())).load()
        change(data)
        buf = io.BytesIO()
        _ProfilePickler(buf, protocol=4).dump(data)
        path = tmp_path / "cost.pkl"
        path.write_bytes(buf.getvalue())
        return path

    return write


def _set_cost(data, name, **fields):
    data["cost_dict"][name] = data["cost_dict"][name]._replace(**fields)


def _first_profiled(data):
    """A profiled op of the graph (two of the cost dictionary's ops are not in it)."""
    return "encoder/embedding"


@pytest.mark.parametrize("change,message", [
    (lambda d: None, None),  # the copy itself loads
    (lambda d: setattr(d["graphdef"], "serialized", b"\xff\xff not a GraphDef"),
     "not a Baechi cost.pkl profile (DecodeError"),
    (lambda d: setattr(d["graphdef"], "serialized", 12), "not a Baechi cost.pkl profile (TypeError"),
    (lambda d: d.update(cost_dict=[1, 2]), "not a Baechi cost.pkl profile"),
    (lambda d: d.pop("graphdef"), "not a Baechi cost.pkl profile (KeyError"),
    (lambda d: _set_cost(d, _first_profiled(d), compute_cost=float("nan")), "bad profile"),
    (lambda d: _set_cost(d, _first_profiled(d), compute_cost=float("inf")), "bad profile"),
    (lambda d: _set_cost(d, _first_profiled(d), compute_cost=None), "bad profile"),
    (lambda d: _set_cost(d, _first_profiled(d), temporary_memory="abc"), "bad profile"),
    (lambda d: _set_cost(d, _first_profiled(d), output_memory=None), "bad profile"),
    (lambda d: _set_cost(d, _first_profiled(d), compute_cost=1e300), "compute_time"),
    (lambda d: _set_cost(d, _first_profiled(d), persistent_memory=10**30), "persistent_bytes"),
])
def test_a_malformed_baechi_profile_is_a_graph_error_naming_the_file(write_profile, change, message):
    path = write_profile(change)
    if message is None:
        assert load_baechi_profile(path).num_ops == 2828
        assert load_baechi_profile(path.parent).num_ops == 2828  # the profile's folder, as shipped
        return
    with pytest.raises(GraphError) as info:
        load_baechi_profile(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_a_baechi_profile_names_the_op_with_a_bad_cost(write_profile):
    name = []
    path = write_profile(lambda d: (name.append(_first_profiled(d)),
                                    _set_cost(d, name[0], compute_cost=float("nan"))))
    with pytest.raises(GraphError, match=f"op '{name[0]}': bad profile"):
        load_baechi_profile(path)


def test_a_folder_without_cost_pkl_or_an_oversized_file_is_not_a_baechi_profile(baechi_profile, tmp_path):
    with pytest.raises(GraphError, match=f"{tmp_path / 'cost.pkl'}: no such Baechi profile"):
        load_baechi_profile(tmp_path)
    with pytest.raises(GraphError, match="cost.pkl: more than 1000 bytes"):
        load_baechi_profile(baechi_profile, max_bytes=1000)


def test_layered_refuses_negative_means_and_fractions_outside_0_1():
    for bad in ({"compute_mean": -1}, {"output_bytes_mean": -1.0}, {"compute_cv": float("nan")},
                {"persistent_fraction": 1.5}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            layered(20, **bad)
    assert layered(20, compute_mean=0).total_compute == 0  # a mean of 0 is asked for, not a slip


def test_a_graph_too_large_for_memory_is_refused_before_it_is_built(monkeypatch):
    from rlplace.zoo import synthetic

    monkeypatch.setattr(synthetic, "available_memory", lambda: 2**30)
    for build, ops in ((lambda: synthetic.layered(10**6), "1,000,000"), (lambda: synthetic.chain(10**6), "1,000,000"),
                       (lambda: synthetic.fork_join(1000, 1000), "1,000,002")):
        with pytest.raises(ConfigError, match=rf"{ops} ops need about 2.1 GiB to build, more than the 1.0 GiB"):
            build()
    assert synthetic.layered(1000).num_ops == 1000  # 2.2 MiB: built
    monkeypatch.setattr(synthetic, "available_memory", lambda: None)  # unknown: no refusal
    assert synthetic.chain(10).num_ops == 10


def test_the_profile_variable_may_name_the_file_or_its_folder(tmp_path, monkeypatch):
    from rlplace.zoo.baechi import default_profile_path

    monkeypatch.setenv("RLPLACE_BAECHI_GNMT", str(tmp_path))
    assert default_profile_path() == tmp_path / "cost.pkl"
    monkeypatch.setenv("RLPLACE_BAECHI_GNMT", str(tmp_path / "mine.pkl"))
    assert default_profile_path() == tmp_path / "mine.pkl"
