import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError, PlacementError
from rlplace.placers import Placer, available_placers, make_placer
from rlplace.zoo import layered, linear_regression

BASELINES = ["single", "round_robin", "random"]


def test_registry():
    assert set(BASELINES) <= set(available_placers())
    with pytest.raises(ConfigError, match="unknown placer 'magic'"):
        make_placer("magic")
    with pytest.raises(ConfigError, match="placer 'single': bad options"):
        make_placer("single", colour="red")


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_place_every_op_once_and_keep_colocation(name):
    c = Cluster.homogeneous(3, 10**9)
    for g in (linear_regression(), layered(300, seed=3)):
        placer = make_placer(name, seed=5)
        assert isinstance(placer, Placer)
        p = placer.place(g, c)
        assert len(p) == g.num_ops
        p.validate(g, c)


def test_round_robin_cycles_over_units_and_random_follows_the_seed():
    g, c = linear_regression(), Cluster.homogeneous(3, 10**9)
    units = CoarseGraph.colocation(g)
    assert units.num_groups == g.num_ops - 2
    rr = make_placer("round_robin").place(g, c)
    assert np.bincount(rr.device_of, minlength=3).sum() == g.num_ops
    assert set(rr.device_of.tolist()) == {0, 1, 2}
    a, b = make_placer("random", seed=1).place(g, c), make_placer("random", seed=1).place(g, c)
    assert a == b
    big = layered(400, seed=0)
    assert make_placer("random", seed=1).place(big, c) != make_placer("random", seed=2).place(big, c)
    assert set(make_placer("single", device=2).place(g, c).device_of.tolist()) == {2}
    with pytest.raises(ConfigError, match="single: device 7 out of range"):
        make_placer("single", device=7).place(g, c)


def test_coarse_graph_expand_and_labels():
    g = layered(50, seed=0)
    cg = CoarseGraph.from_labels(g, np.arange(g.num_ops) // 10)
    assert cg.num_groups == 5 and list(cg.members(0)) == list(range(10))
    p = cg.expand(np.array([0, 1, 0, 1, 0]))
    assert list(p.device_of[:20]) == [0] * 10 + [1] * 10
    with pytest.raises(PlacementError, match="one device per group"):
        cg.expand([0, 1])


def test_quotient_of_the_identity_grouping_simulates_like_the_graph():
    from rlplace.sim import simulate

    g = layered(400, seed=9)
    c = Cluster.homogeneous(3, 10**9)
    q = CoarseGraph.from_labels(g, np.arange(g.num_ops)).quotient()
    assert q.num_ops == g.num_ops and q.num_edges == g.num_edges
    dev = np.random.default_rng(0).integers(0, 3, g.num_ops)
    a, b = simulate(g, c, dev), simulate(q, c, dev)
    assert a.step_time == pytest.approx(b.step_time)
    assert a.num_transfers == b.num_transfers and a.transfer_bytes == b.transfer_bytes


def test_quotient_sums_costs_sends_a_tensor_once_and_keeps_colocation():
    from conftest import op
    from rlplace.graph import OpGraph

    ops = [op("a", 1.0, out=[10], persistent=3, temporary=7), op("b", 2.0, out=[20], temporary=5),
           op("c", 4.0, out=[1]), op("d", 1.0, out=[1], colocation_group="v"), op("e", 1.0, out=[1], colocation_group="v")]
    g = OpGraph.from_records(ops, [("a", "b", 10), ("a", "c", 10), ("b", "c", 20), ("c", "d", 1), ("d", "e", 1)])
    cg = CoarseGraph.from_labels(g, [0, 0, 1, 2, 3])  # {a, b}, {c}, {d}, {e}
    q = cg.quotient()
    assert q.names == ["a", "c", "d", "e"]
    rec = q.op_record(0)
    assert (rec["compute_time"], rec["persistent_bytes"], rec["temporary_bytes"]) == (3.0, 3, 7)
    assert rec["op_type"] == "Fused" and rec["output_bytes"] == [10, 20]  # a's and b's tensors leave
    assert q.colocation_group[q.index["d"]] == q.colocation_group[q.index["e"]] == "v"
    c = Cluster.homogeneous(2, 10**9)
    p = cg.expand([0, 1, 1, 1])
    assert simulate_bytes(g, c, p) == simulate_bytes(q, c, np.array([0, 1, 1, 1]))


def simulate_bytes(graph, cluster, placement):
    from rlplace.sim import simulate

    return simulate(graph, cluster, placement).transfer_bytes


def test_quotient_refuses_a_grouping_that_makes_a_cycle():
    from rlplace.errors import GraphError

    g = linear_regression()
    with pytest.raises(GraphError, match="cycle"):
        CoarseGraph.colocation(g).quotient()
    CoarseGraph.from_labels(g, [0 if n in ("Step", "UpdateStep") else i + 1
                                for i, n in enumerate(g.names)]).quotient()


def test_groups_are_numbered_so_that_quotient_op_j_is_group_j():
    from conftest import op
    from rlplace.graph import OpGraph

    # group A = {n0, n2} comes first by first op, but n1 -> n2 makes B = {n1} precede it
    g = OpGraph.from_records([op(f"n{i}") for i in range(4)], [("n1", "n2", 10)])
    cg = CoarseGraph.from_labels(g, [7, 3, 7, 5])
    assert cg.group_of.tolist() == [1, 0, 1, 2]
    q = cg.quotient()
    assert q.names == ["n1", "n0", "n3"] and q.edge_records() == [["n1", "n0", 10, 0]]
    big = layered(300, seed=11)
    blocks = CoarseGraph.from_labels(big, np.arange(big.num_ops) // 7)
    first = np.full(blocks.num_groups, big.num_ops)
    np.minimum.at(first, blocks.group_of, np.arange(big.num_ops))
    assert blocks.quotient().names == [big.names[i] for i in first]
    # a grouping with a cycle keeps first-op numbering (and its quotient is refused)
    cyclic = CoarseGraph.from_labels(linear_regression(), CoarseGraph.colocation(linear_regression()).group_of)
    assert cyclic.group_of.tolist() == CoarseGraph.colocation(linear_regression()).group_of.tolist()


@settings(max_examples=30, derandomize=True)
@given(seed=st.integers(0, 2**20), continuous=st.booleans(), coplacement=st.booleans(), block=st.integers(1, 6))
def test_quotient_is_the_graph_its_own_records_make(seed, continuous, coplacement, block):
    """The quotient of a topologically numbered grouping is built from arrays, without
    ``from_records``' checks and sorting: it must be exactly the graph ``from_records`` makes of
    its ops and edges (validated, same op order, same edge order, same tensors), for the graph
    optimizer's groupings and for runs of ``block`` ops by index."""
    from conftest import training_graph
    from rlplace.placers.baechi.optimizer import GraphOptimizer
    from rlplace.graph import OpGraph

    g = training_graph(seed, continuous)
    blocks = CoarseGraph.from_labels(g, np.arange(g.num_ops) // block)
    for cg in (GraphOptimizer(coplacement=coplacement).optimize(g), blocks):
        q = cg.quotient()
        ref = OpGraph.from_records([q.op_record(i) for i in range(q.num_ops)], q.edge_records(), name=q.name)
        assert q.names == ref.names and q.output_bytes == ref.output_bytes
        assert q.colocation_group == ref.colocation_group and q.op_type == ref.op_type and q.layer == ref.layer
        for key in ("compute_time", "persistent_bytes", "temporary_bytes", "forward_op", "edge_src", "edge_dst",
                    "edge_bytes", "edge_src_output", "in_edges", "in_ptr", "out_ptr", "tensor_src", "tensor_port",
                    "tensor_bytes", "tensor_output_bytes", "unread_output_bytes"):
            assert np.array_equal(getattr(q, key), getattr(ref, key)), key
            assert getattr(q, key).dtype == getattr(ref, key).dtype, key
