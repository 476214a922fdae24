import io
import pickle

import networkx as nx
import numpy as np
import pytest

from rlplace.errors import GraphError
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
