import networkx as nx
import numpy as np
import pytest
from conftest import op, random_dags
from hypothesis import given, strategies as st

from rlplace.coarsen import (CoarseGraph, GraphOptimizer, backward_ops, coplacement_labels, follow_forward,
                             forward_part, fuse)
from rlplace.graph import CONTROL, OpGraph
from rlplace.zoo import layered, linear_regression


def _is_dag(cg: CoarseGraph) -> bool:
    g = cg.graph
    h = nx.DiGraph()
    h.add_nodes_from(range(cg.num_groups))
    a, b = cg.group_of[g.edge_src], cg.group_of[g.edge_dst]
    h.add_edges_from(zip(a[a != b].tolist(), b[a != b].tolist()))
    return nx.is_directed_acyclic_graph(h)


def test_coplacement_joins_single_successor_and_forward_op():
    ops = [op("a"), op("b"), op("c"), op("d"), op("e"), op("g", forward_op="a"), op("h", forward_op="e"),
           op("s")]
    # a feeds b only; b feeds c and d; d feeds e; g is a's gradient, h is e's; g feeds only the
    # gradient sum s (a backward op without a forward op), and so does h
    g = OpGraph.from_records(ops, [("a", "b", 1), ("b", "c", 1), ("b", "d", 1), ("d", "e", 1), ("e", "h", 1),
                                   ("a", "g", 1), ("g", "s", 1), ("h", "s", 1)])
    lab = coplacement_labels(g, coplacement=True)
    i = g.index
    assert lab[i["a"]] == lab[i["b"]] == lab[i["g"]]  # a's only forward reader is b; g joins a
    assert lab[i["d"]] == lab[i["e"]] == lab[i["h"]]
    assert lab[i["c"]] != lab[i["a"]]  # c has no successor
    # the backward ops' single successor does not join them: g and h stay apart through s
    assert lab[i["a"]] != lab[i["e"]] and lab[i["s"]] not in (lab[i["a"]], lab[i["e"]])
    none = coplacement_labels(g, colocation=False, coplacement=False)
    assert len(np.unique(none)) == g.num_ops


def test_coplacement_counts_data_edges_only():
    # a's output feeds b only (its control edge to c carries no tensor); u has only a control edge
    ops = [op("a"), op("b"), op("c"), op("u"), op("v")]
    g = OpGraph.from_records(ops, [("a", "b", 1), ("a", "c", 0, CONTROL), ("u", "v", 0, CONTROL)])
    lab = coplacement_labels(g)
    i = g.index
    assert lab[i["a"]] == lab[i["b"]] and lab[i["c"]] != lab[i["a"]]
    assert lab[i["u"]] != lab[i["v"]]


def test_gradient_sum_without_forward_op_is_backward_and_follows_its_first_input():
    # x1, x2 forward; g1, g2 their gradients; s sums them (no forward op, like gradients/AddN);
    # t reads s and the forward x2, so it is forward-side
    ops = [op("x1"), op("x2"), op("g1", forward_op="x1"), op("g2", forward_op="x2"), op("s"), op("t")]
    g = OpGraph.from_records(ops, [("x1", "g1", 1), ("x2", "g2", 1), ("g1", "s", 1), ("g2", "s", 1),
                                   ("s", "t", 1), ("x2", "t", 1)])
    i = g.index
    assert backward_ops(g).tolist() == [g.names[k] in ("g1", "g2", "s") for k in range(g.num_ops)]
    sub, keep = forward_part(g)
    assert set(sub.names) == {"x1", "x2", "t"}
    device = follow_forward(g, keep, np.array([sub.index[g.names[k]] for k in keep]))  # 0, 1, 2 by name order
    assert device[i["g1"]] == device[i["x1"]] == device[i["s"]]
    assert device[i["g2"]] == device[i["x2"]]


def test_fusing_both_colocation_groups_of_linear_regression_would_make_a_cycle_and_is_avoided():
    g = linear_regression()
    for exact in (False, True):
        cg = GraphOptimizer(coplacement=False, fusion_exact_check=exact).optimize(g)
        assert _is_dag(cg)
        q = cg.quotient()  # raises GraphError on a cycle
        # colocation groups are never split: they are colocation groups of the quotient
        for ops in g.colocation_groups.values():
            assert len({q.colocation_group[c] for c in cg.group_of[ops]}) == 1


def test_fig6_subgraph_fuses_step_and_update_step():
    g = linear_regression()
    keep = ["Grad", "Step", "UpdateStep"]
    ops = [{k: v for k, v in g.op_record(g.index[n]).items() if k != "forward_op"} for n in keep]
    sub = OpGraph.from_records(ops, [("Step", "UpdateStep", 8), ("Grad", "UpdateStep", 0, CONTROL)])
    cg = GraphOptimizer(coplacement=False).optimize(sub)
    assert cg.num_groups == 2
    assert cg.group_of[sub.index["Step"]] == cg.group_of[sub.index["UpdateStep"]]


def _labels(g, sets):
    return np.array([next(k for k, names in enumerate(sets) if name in names) for name in g.names])


def test_degree_rule_misses_what_the_exact_check_fuses():
    # Fig. 5a: a second path a -> x -> y -> b; fusing a and b would make a cycle
    g = OpGraph.from_records([op("a"), op("x"), op("b"), op("y")],
                             [("a", "b", 1), ("a", "x", 1), ("y", "b", 1), ("x", "y", 1)])
    coplace = _labels(g, [{"a", "b"}, {"x"}, {"y"}])
    assert fuse(g, coplace, rule="degree").num_groups == 4  # a: out-degree 2, b: in-degree 2
    assert fuse(g, coplace, exact_check=True, rule="degree").num_groups == 4
    # Fig. 5c: both degrees 2 but no second path: only the exact check fuses
    g2 = OpGraph.from_records([op("a"), op("x"), op("b"), op("z")],
                              [("a", "b", 1), ("a", "x", 1), ("z", "b", 1)])
    coplace2 = _labels(g2, [{"a", "b"}, {"x", "z"}])
    assert fuse(g2, coplace2, rule="degree").num_groups == 4
    cg = fuse(g2, coplace2, exact_check=True, rule="degree")
    assert cg.num_groups == 3 and cg.group_of[g2.index["a"]] == cg.group_of[g2.index["b"]]
    # every contraction of the lossless rule has a single-successor src or a single-predecessor
    # dst, so it never needs the path check
    assert fuse(g2, coplace2, exact_check=True).num_groups == fuse(g2, coplace2).num_groups


@given(random_dags(), st.integers(0, 3), st.booleans(), st.sampled_from(["lossless", "degree"]))
def test_fusion_never_makes_a_cycle(g, k, exact, rule):
    coplace = np.random.default_rng(k).integers(0, 1 + k, g.num_ops)
    cg = fuse(g, coplace, exact_check=exact, rule=rule)
    assert _is_dag(cg)
    for grp in range(cg.num_groups):  # a group never mixes co-placement sets
        assert len(np.unique(coplace[cg.members(grp)])) == 1
    cg.quotient()


@given(random_dags())
def test_optimizer_output_maps_back_exactly(g):
    cg = GraphOptimizer(fusion_exact_check=True).optimize(g)
    q = cg.quotient()
    dev = np.arange(q.num_ops) % 3
    p = cg.expand(dev)
    assert len(p) == g.num_ops
    np.testing.assert_array_equal(p.device_of, dev[cg.group_of])


def test_optimizer_shrinks_layered_graph_and_keeps_compute():
    g = layered(2000, seed=1)
    cg = GraphOptimizer().optimize(g)
    q = cg.quotient()
    assert q.num_ops < g.num_ops
    assert q.total_compute == pytest.approx(g.total_compute)


def test_forward_part_and_follow_forward():
    g = linear_regression()
    sub, keep = forward_part(g)
    assert set(sub.names) == set(g.names) - {"ErrorGrad", "Grad"}
    dev = np.arange(len(keep)) % 2
    device = follow_forward(g, keep, dev)
    i = g.index
    assert device[i["Grad"]] == device[i["MatMul"]]
    assert device[i["ErrorGrad"]] == device[i["Loss"]]
    for ops in g.colocation_groups.values():
        assert len(set(device[ops].tolist())) == 1
