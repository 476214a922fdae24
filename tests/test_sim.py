"""The execution simulator against docs/design.md's semantics: hand-computed schedules and memory,
and properties that must hold for every graph and placement."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import op, random_dags, typed_dags
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.errors import PlacementError
from rlplace.graph import OpGraph
from rlplace.schedule import new_model
from rlplace.sim import _event_loop, simulate, simulate_many
from rlplace.zoo import layered


def cluster(n, mode="parallel", latency=1.0, seconds_per_byte=0.1, memory=10**6, speeds=None):
    speeds = speeds or [1.0] * n
    return Cluster(tuple(Device(f"d{i}", memory, s) for i, s in enumerate(speeds)),
                   CommModel(latency, seconds_per_byte, mode))


def diamond() -> OpGraph:
    """a -> b, a -> c, b -> d, c -> d; d's output is read by nobody."""
    ops = [op("a", 1.0, out=[10], temporary=5, persistent=100), op("b", 2.0, out=[10]),
           op("c", 1.0, out=[20]), op("d", 1.0, out=[4])]
    return OpGraph.from_records(ops, [("a", "b", 10), ("a", "c", 10), ("b", "d", 10), ("c", "d", 20)])


def test_diamond_by_hand():
    # a:d0 [0,1]; a->d1 [1,3]; b:d0 [1,3]; c:d1 [3,4]; c->d0 [4,7]; d:d0 [7,8]
    # d0 memory: 100 persistent +5 temp +10 out (115) ... +10 b out (120) ... a freed at 3 once b
    # ended and its transfer is done (110), c's copy arrives at 4 (130), d starts at 7 (+4: 134).
    # d1: a's copy at 1 (10), c starts at 3 (+20: 30), a's copy freed at 4, c's output at 7.
    g = diamond()
    for mode in ("parallel", "sequential"):  # the two transfers never overlap: same result
        r = simulate(g, cluster(2, mode), [0, 0, 1, 0], trace=True)
        assert r.step_time == 8.0
        np.testing.assert_array_equal(r.peak_memory, [134, 30])
        np.testing.assert_array_equal(r.busy_time, [4.0, 1.0])
        assert (r.num_transfers, r.transfer_bytes) == (2, 30)
        s = r.schedule
        np.testing.assert_array_equal(s.op_start, [0, 1, 3, 7])
        np.testing.assert_array_equal(s.op_end, [1, 3, 4, 8])
        np.testing.assert_array_equal(s.transfer_start, [1, 4])
        np.testing.assert_array_equal(s.transfer_end, [3, 7])


def fan() -> OpGraph:
    """a feeds b and c; d reads b and c. Placed a:d0, b:d1, c:d2, d:d1, a sends twice."""
    ops = [op(x, 1.0, out=[10]) for x in "abcd"]
    return OpGraph.from_records(ops, [("a", "b", 10), ("a", "c", 10), ("b", "d", 10), ("c", "d", 10)])


def test_fan_parallel_by_hand():
    # a [0,1]; a->d1 and a->d2 both [1,3]; b, c [3,4]; c->d1 [4,6]; d [6,7]
    r = simulate(fan(), cluster(3, "parallel"), [0, 1, 2, 1], trace=True)
    assert r.step_time == 7.0
    np.testing.assert_array_equal(r.schedule.transfer_start, [1, 1, 4])
    np.testing.assert_array_equal(r.peak_memory, [10, 30, 20])


def test_fan_sequential_by_hand():
    # d0's send channel serves a->d1 [1,3] then a->d2 [3,5]; c runs [5,6]; c->d1 [6,8]; d [8,9].
    # d2 holds a's copy from 3 (transfer start), c's output until its transfer ends at 8.
    r = simulate(fan(), cluster(3, "sequential"), [0, 1, 2, 1], trace=True)
    assert r.step_time == 9.0
    s = r.schedule
    np.testing.assert_array_equal(s.transfer_start, [1, 3, 6])
    np.testing.assert_array_equal(s.transfer_end, [3, 5, 8])
    np.testing.assert_array_equal(s.op_start, [0, 3, 5, 8])
    np.testing.assert_array_equal(r.peak_memory, [10, 30, 20])


def test_receive_channel_is_shared_in_sequential_mode():
    # two producers on d0 and d1 send to d2 at the same time: the second waits for the first
    ops = [op("p", 1.0, out=[10]), op("q", 1.0, out=[10]), op("r", 1.0, out=[1])]
    g = OpGraph.from_records(ops, [("p", "r", 10), ("q", "r", 10)])
    par = simulate(g, cluster(3, "parallel"), [0, 1, 2])
    seq = simulate(g, cluster(3, "sequential"), [0, 1, 2], trace=True)
    assert par.step_time == 1 + 2 + 1
    assert seq.step_time == 1 + 2 + 2 + 1
    np.testing.assert_array_equal(np.sort(seq.schedule.transfer_start), [1, 3])


def test_tensor_is_sent_once_per_destination_and_cached():
    ops = [op("a", 1.0, out=[50]), op("b"), op("c"), op("e")]
    g = OpGraph.from_records(ops, [("a", "b", 50), ("a", "c", 50), ("a", "e", 50)])
    r = simulate(g, cluster(3), [0, 1, 1, 2], trace=True)
    assert r.num_transfers == 2 and r.transfer_bytes == 100
    assert sorted(r.schedule.transfer_dst_device.tolist()) == [1, 2]
    # b and c both read the one cached copy on d1: c waits only for b, not for a second transfer
    assert r.schedule.op_start[g.index["c"]] == r.schedule.op_end[g.index["b"]]


def test_ready_order_then_lower_index_breaks_ties():
    ops = [op("root", 1.0)] + [op(f"x{i}", 1.0) for i in range(3)]
    g = OpGraph.from_records(ops, [("root", f"x{i}", 10) for i in range(3)])
    r = simulate(g, cluster(1), [0, 0, 0, 0], trace=True)
    np.testing.assert_array_equal(r.schedule.op_start, [0, 1, 2, 3])


def test_oom_is_detected_and_step_time_still_reported():
    g = diamond()
    fits = simulate(g, cluster(2, memory=134), [0, 0, 1, 0])
    assert not fits.oom and fits.oom_devices == ()
    tight = simulate(g, Cluster((Device("d0", 133), Device("d1", 10**6)), CommModel(1.0, 0.1)), [0, 0, 1, 0])
    assert tight.oom and tight.oom_devices == (0,)
    assert tight.step_time == fits.step_time == 8.0


def test_device_speed_scales_compute():
    g = diamond()
    r = simulate(g, cluster(2, speeds=[2.0, 1.0]), [0, 0, 0, 0])
    assert r.step_time == pytest.approx(g.total_compute / 2)


def test_bad_placements_are_rejected():
    g = diamond()
    with pytest.raises(PlacementError, match="shape"):
        simulate(g, cluster(2), [0, 0, 0])
    with pytest.raises(PlacementError, match="op 'c': device index 5 out of range"):
        simulate(g, cluster(2), [0, 0, 5, 0])
    for bad in ([0, 0.5, 1, 0], ["a", "b", "a", "a"]):   # before: truncated to device 0 / a ValueError
        with pytest.raises(PlacementError, match="device indices \\(integers\\)"):
            simulate(g, cluster(2), bad)
    with pytest.raises(PlacementError, match="device indices \\(integers\\)"):
        simulate_many(g, cluster(2), [[0, 0, 1, 1], [0, 0, 1.5, 1]])


def test_empty_graph():
    g = OpGraph.from_records([], [])
    r = simulate(g, cluster(2), np.zeros(0, dtype=int))
    assert r.step_time == 0.0 and not r.oom


@given(random_dags(), st.data())
def test_all_on_one_device_equals_its_compute_sum(g, data):
    n = data.draw(st.integers(1, 4))
    d = data.draw(st.integers(0, n - 1))
    speed = data.draw(st.sampled_from([0.5, 1.0, 3.0]))
    speeds = [1.0] * n
    speeds[d] = speed
    r = simulate(g, cluster(n, data.draw(st.sampled_from(["parallel", "sequential"])), speeds=speeds),
                 np.full(g.num_ops, d))
    assert r.step_time == pytest.approx(g.total_compute / speed, rel=1e-12, abs=1e-12)
    assert r.num_transfers == 0


def _check_schedule(g: OpGraph, c: Cluster, dev: np.ndarray, r):
    s = r.schedule
    dur = g.compute_time / c.speeds[dev]
    eps = 1e-9
    np.testing.assert_allclose(s.op_end - s.op_start, dur)
    # lower bounds of docs/design.md
    longest = np.zeros(g.num_ops)
    for i in range(g.num_ops):
        longest[i] = dur[i] + max((longest[p] for p in g.predecessors(i)), default=0.0)
    assert r.step_time >= longest.max(initial=0.0) - eps
    busy = np.bincount(dev, weights=dur, minlength=c.num_devices)
    np.testing.assert_allclose(r.busy_time, busy)
    assert r.step_time >= busy.max() - eps
    # one transfer per (tensor, destination), never to the producer's own device
    keys = list(zip(s.transfer_src_op.tolist(), s.transfer_src_output.tolist(), s.transfer_dst_device.tolist()))
    assert len(keys) == len(set(keys))
    assert np.all(s.transfer_src_device != s.transfer_dst_device)
    arrival = {k: end for k, end in zip(keys, s.transfer_end)}
    ready = np.zeros(g.num_ops)
    for e in range(g.num_edges):
        src, dst, port = int(g.edge_src[e]), int(g.edge_dst[e]), int(g.edge_src_output[e])
        avail = s.op_end[src] if dev[src] == dev[dst] else arrival[(src, port, int(dev[dst]))]
        assert s.op_start[dst] >= avail - eps
        ready[dst] = max(ready[dst], avail)
    for x, (src, _, _) in enumerate(keys):
        assert s.transfer_start[x] >= s.op_end[src] - eps
        length = c.comm.transfer_time(s.transfer_bytes[x])
        assert s.transfer_end[x] - s.transfer_start[x] == pytest.approx(length)
    # a device runs one op at a time and never idles while it has a ready op
    for d in range(c.num_devices):
        ops = np.flatnonzero(dev == d)
        order = ops[np.lexsort((s.op_end[ops], s.op_start[ops]))]
        assert np.all(s.op_start[order][1:] >= s.op_end[order][:-1] - eps)
        for i in ops:  # from i's ready time to its start, some op covers every instant
            t, progressed = ready[i], True
            while t < s.op_start[i] - eps and progressed:
                progressed = False
                for j in ops:
                    if s.op_start[j] <= t + eps and s.op_end[j] > t + eps:
                        t, progressed = s.op_end[j], True
            assert t >= s.op_start[i] - eps, f"device {d} idled while op {i} was ready"
    if c.comm.mode == "sequential":  # one send and one receive at a time per device
        for ends in (s.transfer_src_device, s.transfer_dst_device):
            for d in range(c.num_devices):
                xs = np.flatnonzero(ends == d)
                xs = xs[np.argsort(s.transfer_start[xs], kind="stable")]
                assert np.all(s.transfer_start[xs][1:] >= s.transfer_end[xs][:-1] - eps)


@given(random_dags(), st.data())
def test_schedule_invariants_on_random_graphs_and_placements(g, data):
    n = data.draw(st.integers(1, 4))
    mode = data.draw(st.sampled_from(["parallel", "sequential"]))
    speeds = data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n))
    c = cluster(n, mode, latency=data.draw(st.sampled_from([0.0, 0.3, 2.0])),
                seconds_per_byte=data.draw(st.sampled_from([0.0, 0.01, 0.2])), speeds=speeds)
    dev = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=g.num_ops, max_size=g.num_ops)))
    r = simulate(g, c, dev, trace=True)
    _check_schedule(g, c, dev, r)
    assert r.step_time == pytest.approx(max(r.schedule.op_end.max(), r.schedule.transfer_end.max(initial=0)))


@given(random_dags(), st.data())
def test_peak_memory_bounds(g, data):
    n = data.draw(st.integers(1, 3))
    dev = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=g.num_ops, max_size=g.num_ops)))
    r = simulate(g, cluster(n, data.draw(st.sampled_from(["parallel", "sequential"]))), dev)
    persistent = np.bincount(dev, weights=g.persistent_bytes, minlength=n)
    # at least the persistent bytes plus the largest single op's allocation; at most everything
    per_op = g.persistent_bytes * 0 + g.temporary_bytes + g.output_total
    for d in range(n):
        ops = dev == d
        low = persistent[d] + (per_op[ops].max() if ops.any() else 0)
        received = g.tensor_bytes[np.unique(g.edge_tensor[(dev[g.edge_dst] == d) & (dev[g.edge_src] != d)])].sum()
        high = persistent[d] + per_op[ops].sum() + received
        assert low <= r.peak_memory[d] <= high


def test_same_input_same_result():
    g = layered(500, seed=1)
    c = cluster(4, "sequential", latency=1e-4, seconds_per_byte=1e-9)
    dev = np.random.default_rng(0).integers(0, 4, g.num_ops)
    a, b = simulate(g, c, dev, trace=True), simulate(g, c, dev, trace=True)
    assert a.step_time == b.step_time
    np.testing.assert_array_equal(a.schedule.op_start, b.schedule.op_start)
    np.testing.assert_array_equal(a.peak_memory, b.peak_memory)


def test_invariants_on_a_large_layered_graph():
    g = layered(3000, seed=2)
    for mode in ("parallel", "sequential"):
        c = cluster(4, mode, latency=1e-4, seconds_per_byte=2e-10)
        dev = np.random.default_rng(3).integers(0, 4, g.num_ops)
        r = simulate(g, c, dev, trace=True)
        assert r.num_transfers > 0
        s = r.schedule
        # spot-check the expensive invariants on the first 300 ops only
        sub = slice(0, 300)
        assert np.all(s.op_end[sub] >= s.op_start[sub])
        assert r.step_time >= g.critical_path() - 1e-9


@given(random_dags(), st.data())
def test_partial_placement_runs_the_graph_induced_by_the_placed_ops(g, data):
    n = data.draw(st.integers(1, 3))
    c = cluster(n, data.draw(st.sampled_from(["parallel", "sequential"])), memory=100)
    dev = np.array(data.draw(st.lists(st.integers(-1, n - 1), min_size=g.num_ops, max_size=g.num_ops)))
    placed = np.flatnonzero(dev >= 0)
    r = simulate(g, c, dev, trace=True, partial=True)
    sub = simulate(g.subgraph(placed), c, dev[placed], trace=True)
    assert r.step_time == sub.step_time
    np.testing.assert_array_equal(r.peak_memory, sub.peak_memory)
    assert r.oom == sub.oom and r.num_transfers == sub.num_transfers
    np.testing.assert_array_equal(r.schedule.op_end[placed], sub.schedule.op_end)
    assert not r.schedule.op_end[dev < 0].any()


@given(typed_dags(), st.integers(1, 3), st.sampled_from(["parallel", "sequential"]),
       st.sampled_from(["default", "tf_reuse"]), st.data())
def test_a_feature_compiled_in_changes_nothing_where_it_is_not_used(g, ndev, mode, memory_model, data):
    """The event loop is compiled per feature set (buffer sharing, partial placement) so that the
    common path does none of their work: the loop with a feature gives the same step times and
    peaks on complete placements, and, with buffer sharing, under the default memory model."""
    c = replace(cluster(ndev, mode, memory=100), memory_model=memory_model)
    rows = np.array(data.draw(st.lists(st.lists(st.integers(0, ndev - 1), min_size=g.num_ops, max_size=g.num_ops),
                                       min_size=1, max_size=3)), dtype=np.int64)
    m = new_model(g, c)
    results = []
    for reuse, partial in [(memory_model == "tf_reuse", False), (True, False), (True, True),
                           (memory_model == "tf_reuse", True)]:
        step_time, peak = np.zeros(len(rows)), np.zeros((len(rows), ndev), dtype=np.int64)
        _event_loop(reuse, partial)(m, rows, step_time, peak)
        results.append((step_time.tolist(), peak.tolist()))
    assert all(r == results[0] for r in results)


def test_a_partial_placement_is_refused_unless_asked_for():
    g = diamond()
    with pytest.raises(PlacementError, match="device index -1"):
        simulate(g, cluster(2), np.array([0, -1, 0, 0]))
    full, partial = (simulate(g, cluster(2), np.array([0, 1, 0, 0]), partial=p) for p in (False, True))
    assert partial.step_time == full.step_time == 8.0
    np.testing.assert_array_equal(partial.peak_memory, full.peak_memory)
