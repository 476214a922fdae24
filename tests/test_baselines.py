"""The classic baselines expert, metis and heft: hand-checked cases and properties."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import op, random_dags
from rlplace.cluster import Cluster, CommModel, Device, load_preset
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.placers.baselines import HeftPlacer
from rlplace.sim import simulate
from rlplace.zoo import fork_join, layered, linear_regression, load_baechi_profile

PLACERS = ["expert", "metis", "heft"]


def with_colocation_and_layers(g: OpGraph, groups: list[int | None], layers: list) -> OpGraph:
    ops = [g.op_record(i) for i in range(g.num_ops)]
    for rec, group, layer in zip(ops, groups, layers):
        if group is not None:
            rec["colocation_group"] = f"g{group}"
        if layer is not None:
            rec["layer"] = layer
    return OpGraph.from_records(ops, g.edge_records(), name=g.name)


@st.composite
def annotated_dags(draw):
    """random_dags() with colocation groups (which may make cycles between groups) and layer
    tags (integers, strings or none)."""
    g = draw(random_dags())
    groups = draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=g.num_ops, max_size=g.num_ops))
    layers = draw(st.lists(st.one_of(st.none(), st.integers(0, 5), st.just("emb")),
                           min_size=g.num_ops, max_size=g.num_ops))
    return with_colocation_and_layers(g, groups, layers)


@given(annotated_dags(), st.integers(1, 5), st.sampled_from(PLACERS))
def test_every_op_placed_once_and_colocation_never_split(g, num_devices, name):
    c = Cluster.homogeneous(num_devices, 10**9, CommModel(latency=0.5, seconds_per_byte=0.01))
    p = make_placer(name, seed=1).place(g, c)
    assert len(p) == g.num_ops
    p.validate(g, c)


# ------------------------------------------------------------------------------------ expert
def test_expert_splits_layers_into_contiguous_blocks_and_untagged_ops_follow():
    ops = [op("input"), op("emb", layer=0), op("l0", layer=0), op("l1", layer=1), op("l2", layer=2),
           op("l3", layer=3), op("l4", layer=4), op("softmax", layer=4), op("loss"), op("loss_grad"),
           op("var", colocation_group="v"), op("apply", colocation_group="v"), op("misc", layer="x")]
    edges = [("input", "emb", 1), ("emb", "l0", 1), ("l0", "l1", 1), ("l1", "l2", 1), ("l2", "l3", 1),
             ("l3", "l4", 1), ("l4", "softmax", 1), ("input", "loss", 1), ("softmax", "loss", 1),
             ("loss", "loss_grad", 1), ("var", "l3", 1), ("loss_grad", "apply", 1), ("var", "apply", 1),
             ("l2", "misc", 1)]
    g = OpGraph.from_records(ops, edges)
    p = make_placer("expert").place(g, Cluster.homogeneous(4, 10**9))
    got = dict(zip(g.names, p.device_of.tolist()))
    # 5 layers on 4 devices: layer r on floor(4 r / 5) = 0, 0, 1, 2, 3.
    assert [got[n] for n in ("emb", "l0", "l1", "l2", "l3", "l4", "softmax")] == [0, 0, 0, 1, 2, 3, 3]
    assert got["input"] == 0  # untagged, no predecessor
    assert got["loss"] == 3 and got["loss_grad"] == 3  # first tagged predecessor is softmax, then inherited
    assert got["misc"] == 1  # a string tag is no tag: follows l2
    assert got["var"] == got["apply"] == 0  # the group follows its first op, var (no predecessor)

    two = make_placer("expert").place(g, Cluster.homogeneous(2, 10**9))
    assert dict(zip(g.names, two.device_of.tolist()))["l1"] == 0  # floor(2 * 1 / 5)
    assert dict(zip(g.names, two.device_of.tolist()))["l3"] == 1  # floor(2 * 3 / 5)


def test_expert_puts_an_untagged_graph_on_device_0_and_a_branch_per_device():
    c = Cluster.homogeneous(4, 10**9)
    assert not make_placer("expert").place(linear_regression(), c).device_of.any()
    g = fork_join(branches=4, branch_length=3)  # branch b tagged layer b; source and sink untagged
    got = dict(zip(g.names, make_placer("expert").place(g, c).device_of.tolist()))
    assert [got[f"b{b}_{k}"] for b in range(4) for k in range(3)] == [b for b in range(4) for _ in range(3)]
    assert got["source"] == 0 and got["sink"] == 0  # sink follows b0_2, its lowest-index predecessor


# ------------------------------------------------------------------------------------- metis
def per_device(values, placement, n):
    return np.bincount(placement.device_of, weights=values, minlength=n)


def test_metis_cuts_fewer_bytes_than_round_robin_and_balances():
    g = layered(600, width=8, seed=4)
    c = Cluster.homogeneous(4, 10**12)
    metis, rr = make_placer("metis").place(g, c), make_placer("round_robin").place(g, c)
    assert simulate(g, c, metis).transfer_bytes < 0.5 * simulate(g, c, rr).transfer_bytes
    compute = per_device(g.compute_time, metis, 4)
    assert compute.max() <= 1.1 * g.total_compute / 4

    memory = (g.persistent_bytes + g.temporary_bytes + g.output_total).astype(float)
    by_memory = make_placer("metis", balance="memory").place(g, c)
    assert per_device(memory, by_memory, 4).max() <= 1.1 * memory.sum() / 4


def test_metis_small_graphs_isolated_ops_and_colocation_cycles():
    c = Cluster.homogeneous(4, 10**9)
    g = OpGraph.from_records([op("a"), op("b"), op("c")], [("a", "b", 5)])
    assert sorted(make_placer("metis").place(g, c).device_of.tolist()) == [0, 1, 2]  # 3 units, 4 devices
    lone = OpGraph.from_records([op(f"x{i}", compute_time=1.0 + i % 2) for i in range(9)], [])
    p = make_placer("metis").place(lone, Cluster.homogeneous(3, 10**9))
    assert per_device(lone.compute_time, p, 3).max() <= 5  # total 13: best 5, 4, 4
    lr = linear_regression()  # colocation groups that make a cycle of units
    make_placer("metis").place(lr, Cluster.homogeneous(2, 10**9)).validate(lr, Cluster.homogeneous(2, 10**9))
    with pytest.raises(ConfigError, match="metis: balance must be one of"):
        make_placer("metis", balance="bytes").place(g, c)


def test_same_seed_same_placement():
    g, c = layered(800, seed=2), load_preset("baechi_2080")
    for name in PLACERS:
        assert make_placer(name, seed=7).place(g, c) == make_placer(name, seed=7).place(g, c)


# -------------------------------------------------------------------------------------- heft
def test_heft_spreads_a_fork_join_and_beats_single():
    g = fork_join(branches=4, branch_length=5, compute_time=1e-3, output_bytes=10**6)
    c = Cluster.homogeneous(4, 10**9, CommModel(latency=1e-5, seconds_per_byte=1e-11))
    p = make_placer("heft").place(g, c)
    devices = dict(zip(g.names, p.device_of.tolist()))
    assert sorted({devices[f"b{b}_0"] for b in range(4)}) == [0, 1, 2, 3]  # one branch per device
    assert all(devices[f"b{b}_{k}"] == devices[f"b{b}_0"] for b in range(4) for k in range(5))
    # source, 5 branch ops, sink: 7 ms of compute plus two 20 µs transfers on the critical path
    assert simulate(g, c, p).step_time == pytest.approx(7e-3 + 4e-5)
    assert simulate(g, c, p).step_time < 0.4 * simulate(g, c, make_placer("single").place(g, c)).step_time


def test_heft_inserts_into_an_idle_slot():
    """Two devices, 2 s per transfer. Ranks: B 7, A 6, C 1.5, D 1. B goes on device 0 [0, 5],
    A on device 1 [0, 4]; C waits for A's tensor until 6 and runs on device 0 [6, 7.5], leaving
    device 0 idle in [5, 6]; D (reads B), placed last, fills that slot."""
    ops = [op("A", 4.0, out=[0]), op("B", 5.0, out=[0]), op("C", 1.5, out=[0]), op("D", 1.0, out=[0])]
    g = OpGraph.from_records(ops, [("A", "C", 0), ("B", "C", 0), ("B", "D", 0)])
    s = HeftPlacer().schedule(g, Cluster.homogeneous(2, 10**9, CommModel(latency=2.0)))
    assert [g.names[i] for i in s.order] == ["B", "A", "C", "D"]
    assert s.device.tolist() == [1, 0, 0, 0]
    assert s.start.tolist() == [0.0, 0.0, 6.0, 5.0]
    assert s.finish.tolist() == [4.0, 5.0, 7.5, 6.0]


def test_heft_pins_a_colocation_group_to_its_first_placed_op():
    """a and b run in parallel on devices 0 and 1 ([0, 5]); var (reads a) is placed first and pins
    the group to device 0, so apply (reads b) waits there for b's tensor (1 s) instead of
    running on device 1 at 5."""
    ops = [op("a", 5.0), op("b", 5.0), op("var", 0.1, colocation_group="v"), op("apply", 0.1, colocation_group="v")]
    g = OpGraph.from_records(ops, [("a", "var", 1), ("b", "apply", 1)])
    s = HeftPlacer().schedule(g, Cluster.homogeneous(2, 10**9, CommModel(latency=1.0)))
    assert s.device[g.index["var"]] == s.device[g.index["apply"]]
    assert s.device.tolist() == [0, 1, 0, 0]
    assert s.start[g.index["apply"]] == 6.0


@given(annotated_dags(), st.integers(1, 4), st.sampled_from(["parallel", "sequential"]), st.booleans())
def test_heft_schedule_is_a_valid_schedule(g, num_devices, mode, contention_free):
    speeds = [1.0, 2.0, 0.5, 1.5][:num_devices]
    c = Cluster([Device(f"d{i}", 10**9, v) for i, v in enumerate(speeds)],
                CommModel(latency=0.3, seconds_per_byte=0.02, mode=mode))
    s = HeftPlacer(contention_free=contention_free).schedule(g, c)
    position = np.empty(g.num_ops, dtype=np.int64)
    position[s.order] = np.arange(g.num_ops)
    assert sorted(s.order.tolist()) == list(range(g.num_ops))
    assert np.all(position[g.edge_src] < position[g.edge_dst])  # decreasing rank is topological
    duration = g.compute_time / c.speeds[s.device]
    np.testing.assert_allclose(s.finish - s.start, duration)
    remote = s.device[g.edge_src] != s.device[g.edge_dst]
    arrive = s.finish[g.edge_src] + np.where(remote, c.comm.transfer_time(g.tensor_bytes[g.edge_tensor]), 0.0)
    assert np.all(s.start[g.edge_dst] >= arrive - 1e-9)
    for d in range(num_devices):  # no two ops overlap on a device
        mine = np.flatnonzero((s.device == d) & (duration > 0))
        order = mine[np.argsort(s.start[mine])]
        assert np.all(s.start[order][1:] >= s.finish[order][:-1] - 1e-9)
    if mode == "sequential" and not contention_free:  # planned on the cluster's own channels
        t = s.schedule
        for ends in (t.transfer_src_device, t.transfer_dst_device):
            for d in range(num_devices):
                mine = np.flatnonzero((ends == d) & (t.transfer_end > t.transfer_start))
                order = mine[np.argsort(t.transfer_start[mine])]
                assert np.all(t.transfer_start[order][1:] >= t.transfer_end[order][:-1] - 1e-9)


# ------------------------------------------------------------------------------ GNMT profile
def test_each_placer_is_valid_on_the_gnmt_profile(baechi_profile):
    g, c = load_baechi_profile(baechi_profile), load_preset("baechi_2080")
    for name in PLACERS:
        p = make_placer(name, seed=0).place(g, c).validate(g, c)
        r = simulate(g, c, p)
        assert np.isfinite(r.step_time) and r.step_time >= g.critical_path()
