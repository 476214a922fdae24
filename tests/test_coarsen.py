import networkx as nx
import numpy as np
import pytest
from conftest import op, random_dags, training_graph
from hypothesis import given, settings, strategies as st

from rlplace.cluster import Cluster, CommModel
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError
from rlplace.graph import CONTROL, OpGraph
from rlplace.placers import make_placer
from rlplace.placers.baechi.optimizer import (GraphOptimizer, backward_ops, coplacement_labels, follow_forward,
                                              forward_part, fuse)
from rlplace.sim import simulate
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
    # t reads s and the forward x2 (like an optimizer update: the gradient and the variable)
    ops = [op("x1"), op("x2"), op("g1", forward_op="x1"), op("g2", forward_op="x2"), op("s"), op("t")]
    g = OpGraph.from_records(ops, [("x1", "g1", 1), ("x2", "g2", 1), ("g1", "s", 1), ("g2", "s", 1),
                                   ("s", "t", 1), ("x2", "t", 1)])
    i = g.index
    assert backward_ops(g).tolist() == [g.names[k] in ("g1", "g2", "s") for k in range(g.num_ops)]
    # with ``updates`` (what forward-only placement uses), t is backward too, and follows its
    # first input x2
    assert backward_ops(g, updates=True).tolist() == [g.names[k] in ("g1", "g2", "s", "t") for k in range(g.num_ops)]
    sub, keep = forward_part(g)
    assert set(sub.names) == {"x1", "x2"}
    device = follow_forward(g, keep, np.array([sub.index[g.names[k]] for k in keep]))  # 0, 1 by name order
    assert device[i["g1"]] == device[i["x1"]] == device[i["s"]]
    assert device[i["g2"]] == device[i["x2"]] == device[i["t"]] != device[i["x1"]]


def test_what_only_feeds_the_updates_and_what_runs_after_them_follow():
    """The learning-rate schedule (lr_src -> lr, read by the update only) and the train op (a
    control input from the update only) are backward with ``updates``: lr and lr_src follow their
    first reader (the update, which follows its variable w), train follows the update. x, named
    as g's forward op, stays forward although g is its only reader."""
    ops = [op("w"), op("lr_src"), op("lr"), op("x"), op("g", forward_op="x"), op("u"), op("train")]
    g = OpGraph.from_records(ops, [("lr_src", "lr", 4), ("w", "x", 1), ("x", "g", 1), ("w", "u", 0),
                                   ("g", "u", 1), ("lr", "u", 4), ("u", "train", 0, CONTROL)])
    i = g.index
    assert [g.names[k] for k in np.flatnonzero(backward_ops(g, updates=True))] == ["lr_src", "lr", "g", "u", "train"]
    assert not backward_ops(g)[[i["lr_src"], i["lr"], i["train"]]].any()
    sub, keep = forward_part(g)
    assert set(sub.names) == {"w", "x"}
    device = follow_forward(g, keep, np.array([1 if g.names[k] == "w" else 0 for k in keep]))
    assert device[[i["lr_src"], i["lr"], i["u"], i["train"]]].tolist() == [1, 1, 1, 1]
    assert device[i["g"]] == device[i["x"]] == 0


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
    # the update and the learning rate it alone reads follow too (``backward_ops`` with ``updates``)
    assert set(sub.names) == set(g.names) - {"ErrorGrad", "Grad", "ApplyGrad", "LearningRate"}
    dev = np.arange(len(keep)) % 2
    device = follow_forward(g, keep, dev)
    i = g.index
    assert device[i["Grad"]] == device[i["MatMul"]]
    assert device[i["ErrorGrad"]] == device[i["Loss"]]
    assert device[i["LearningRate"]] == device[i["ApplyGrad"]]
    for ops in g.colocation_groups.values():
        assert len(set(device[ops].tolist())) == 1


# ------------------------------------------------------------------------------ co-placement rules
def _coplacement_graph() -> OpGraph:
    """a and b (long compute) feed only c; shape (tiny compute) and x feed only r; y feeds only z,
    whose only input it is. Outputs of 10 MB: 1 ms to send at 10 GB/s."""
    mb10 = [10**7]
    ops = [op("a", 2e-3, mb10), op("b", 2e-3, mb10), op("c", 1e-3, mb10), op("shape", 1e-5, mb10),
           op("x", 2e-3, mb10), op("r", 1e-3, mb10), op("y", 2e-3, mb10), op("z", 1e-3, mb10)]
    return OpGraph.from_records(ops, [("a", "c", 10**7), ("b", "c", 10**7), ("shape", "r", 10**7),
                                      ("x", "r", 10**7), ("y", "z", 10**7)])


def test_cost_coplacement_keeps_parallel_producers_apart():
    """§3.2's rule as written joins every op whose output feeds one op only; the "cost" rule
    joins an op only if it is cheap (compute <= 0.1 x its transfer) or the reader waits for it
    anyway (its other inputs are all cheap), so a and b still run side by side."""
    g = _coplacement_graph()
    i = g.index
    comm = CommModel(0.0, 1e-10)
    paper = coplacement_labels(g, rule="paper")
    assert paper[i["a"]] == paper[i["b"]] == paper[i["c"]]
    cost = coplacement_labels(g, rule="cost", comm=comm)
    assert len({cost[i["a"]], cost[i["b"]], cost[i["c"]]}) == 3
    assert cost[i["shape"]] == cost[i["r"]] == cost[i["x"]]  # shape is cheap; r waits for x anyway
    assert cost[i["y"]] == cost[i["z"]]
    # a slower link makes a and b cheap beside their transfer: they join c as the paper's rule does
    slow = coplacement_labels(g, rule="cost", comm=CommModel(0.0, 1e-8))
    assert slow[i["a"]] == slow[i["b"]] == slow[i["c"]]
    # without an interconnect only the second case applies: shape no longer counts as cheap
    bare = coplacement_labels(g, rule="cost")
    assert bare[i["shape"]] != bare[i["r"]] and bare[i["x"]] != bare[i["r"]] and bare[i["y"]] == bare[i["z"]]


def test_coplacement_rule_and_ratio_are_checked():
    g = _coplacement_graph()
    with pytest.raises(ConfigError, match="coplacement rule"):
        coplacement_labels(g, rule="greedy")
    with pytest.raises(ConfigError, match="ratio"):
        coplacement_labels(g, rule="cost", ratio=0.0)


def test_cost_coplacement_does_not_make_the_list_schedulers_slower_on_layered_dags():
    """m-ETF and m-SCT with the graph optimizer on ("cost" co-placement, fusion) vs off, on 30
    layered random DAGs of 120 ops, 4 devices, sequential 134 µs + 0.1754 ns/B transfers (the
    setting of experiments/placer_quality.py): 60 pairs.

    No per-graph bound holds: changing every op's compute time by up to 1% already moves m-ETF's
    step by -9% to +10% on layered DAGs of 200 and 1,000 ops (experiments/results/coplacement.md), so one graph's
    ratio says little. The bound is on the geometric mean of on/off: its standard error over these
    60 pairs is 1.0%, so 1.04 is three standard errors above no effect. §3.2's rule as written
    gives 1.13 here (the test fails with it); the "cost" rule 1.01."""
    c = Cluster.homogeneous(4, 2**50, CommModel(134e-6, 1.754e-10, "sequential"))
    ratios = []
    for seed in range(30):
        g = layered(120, width=16, max_fan_in=3, skip_prob=0.0, compute_mean=4e-4, compute_cv=1.5,
                    output_bytes_mean=1e6, bytes_cv=2.0, seed=seed)
        for name in ("m_etf", "m_sct"):
            off = simulate(g, c, make_placer(name, coplacement=False, fusion=False).place(g, c)).step_time
            on = simulate(g, c, make_placer(name, coplacement_rule="cost").place(g, c)).step_time
            ratios.append(on / off)
    assert np.exp(np.log(ratios).mean()) <= 1.04


@settings(max_examples=5, derandomize=True)
@given(seed=st.integers(0, 2**20))
def test_the_optimizer_does_not_make_the_list_schedulers_slower_on_training_graphs(seed):
    """m-ETF and m-SCT with their defaults (graph optimizer on: the "cost" co-placement rule,
    lossless fusion; deferred sources; forward-only placement, as memory is ample, with updates
    placed as backward ops) vs the optimizer off, on 4 random training steps (``training_graph``,
    8-30 layers) on 4 devices with sequential 134 µs + 0.1754 ns/B transfers: 8 pairs per example.

    Tolerance: one graph's ratio is noise-dominated (1% compute noise moves m-ETF's step by -9% to
    +10%, experiments/results/coplacement.md), so no pair may be more than 10% slower, and the
    geometric mean over the pairs may not exceed 1.02. With the defaults before this rule
    (§3.2's rule, sources and updates placed at time 0) it failed: geometric means of 1.06-1.14
    and pairs up to 1.46x on these graphs; now 0.91-1.00, the worst pair 1.07x."""
    rng = np.random.default_rng(seed)
    c = Cluster.homogeneous(4, 2**50, CommModel(134e-6, 1.754e-10, "sequential"))
    ratios = []
    for _ in range(4):
        g = training_graph(int(rng.integers(2**31)), continuous=True, layers=int(rng.integers(8, 31)))
        for name in ("m_etf", "m_sct"):
            off = simulate(g, c, make_placer(name, coplacement=False, fusion=False).place(g, c)).step_time
            on = simulate(g, c, make_placer(name).place(g, c)).step_time
            ratios.append(on / off)
    assert max(ratios) <= 1.10
    assert np.exp(np.log(ratios).mean()) <= 1.02
