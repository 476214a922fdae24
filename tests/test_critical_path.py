"""The critical path of a simulated schedule: hand-computed chains, and for every graph and
placement a chain of real dependencies, each link starting when the one before it ends, from
time 0 to the step time."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import op, random_dags
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.graph import OpGraph
from rlplace.schedule import critical_path
from rlplace.sim import simulate


def cluster(n, mode="parallel", latency=1.0, seconds_per_byte=0.1, speeds=None):
    speeds = speeds or [1.0] * n
    return Cluster(tuple(Device(f"d{i}", 10**6, s) for i, s in enumerate(speeds)),
                   CommModel(latency, seconds_per_byte, mode))


def fan() -> OpGraph:
    ops = [op(x, 1.0, out=[10]) for x in "abcd"]
    return OpGraph.from_records(ops, [("a", "b", 10), ("a", "c", 10), ("b", "d", 10), ("c", "d", 10)])


def test_fan_parallel_by_hand():
    # a [0,1]; a->d1, a->d2 [1,3]; b, c [3,4]; c->d1 [4,6]; d [6,7]: d waited for c's transfer
    s = simulate(fan(), cluster(3), [0, 1, 2, 1], trace=True).schedule
    path = critical_path(fan(), s)
    assert path.steps == (("op", 0), ("transfer", 1), ("op", 2), ("transfer", 2), ("op", 3))
    np.testing.assert_array_equal(path.ops, [0, 2, 3])
    np.testing.assert_array_equal(s.transfer_dst_device[path.transfers], [2, 1])


def test_sequential_channel_wait_is_on_the_path():
    # d0's send channel: a->d1 [1,3] then a->d2 [3,5]; c [5,6]; c->d1 [6,8]; d [8,9]
    s = simulate(fan(), cluster(3, "sequential"), [0, 1, 2, 1], trace=True).schedule
    path = critical_path(fan(), s)
    assert path.steps == (("op", 0), ("transfer", 0), ("transfer", 1), ("op", 2), ("transfer", 2), ("op", 3))


def test_device_wait_is_on_the_path():
    # three independent ops on one device run back to back: each waited for the one before
    g = OpGraph.from_records([op(x, 1.0) for x in "abc"], [])
    s = simulate(g, cluster(2), [0, 0, 0], trace=True).schedule
    assert critical_path(g, s).steps == (("op", 0), ("op", 1), ("op", 2))


def test_input_wins_a_tie_with_the_device():
    # b (on d0) waits for a (d0) and for nothing else: the data edge, not "the op before"
    g = OpGraph.from_records([op("a", 1.0), op("b", 1.0)], [("a", "b", 10)])
    s = simulate(g, cluster(1), [0, 0], trace=True).schedule
    assert critical_path(g, s).steps == (("op", 0), ("op", 1))


def test_empty_graph():
    g = OpGraph.from_records([], [])
    assert critical_path(g, simulate(g, cluster(1), np.zeros(0, dtype=int), trace=True).schedule).steps == ()


def _interval(s, step):
    kind, i = step
    return (s.op_start[i], s.op_end[i]) if kind == "op" else (s.transfer_start[i], s.transfer_end[i])


def _is_dependency(g: OpGraph, s, before, after) -> bool:
    (k1, i), (k2, j) = before, after
    if k1 == "op" and k2 == "op":
        return i in g.predecessors(j) or s.op_device[i] == s.op_device[j]
    if k1 == "op":
        return s.transfer_src_op[j] == i
    if k2 == "op":
        readers = g.edge_dst[g.tensor_ptr[s.transfer_tensor[i]]:g.tensor_ptr[s.transfer_tensor[i] + 1]]
        return j in readers and s.op_device[j] == s.transfer_dst_device[i]
    return (s.transfer_src_device[i] == s.transfer_src_device[j]
            or s.transfer_dst_device[i] == s.transfer_dst_device[j])


@given(random_dags(), st.data())
def test_path_is_a_gapless_chain_of_dependencies_from_zero_to_the_step_time(g, data):
    n = data.draw(st.integers(1, 4))
    c = cluster(n, data.draw(st.sampled_from(["parallel", "sequential"])),
                latency=data.draw(st.sampled_from([0.0, 0.3, 2.0])),
                seconds_per_byte=data.draw(st.sampled_from([0.0, 0.01, 0.2])),
                speeds=data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n)))
    dev = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=g.num_ops, max_size=g.num_ops)))
    r = simulate(g, c, dev, trace=True)
    steps = critical_path(g, r.schedule).steps
    assert len(set(steps)) == len(steps)
    intervals = [_interval(r.schedule, step) for step in steps]
    assert intervals[0][0] == pytest.approx(0.0, abs=1e-12)
    assert intervals[-1][1] == pytest.approx(r.step_time, rel=1e-12, abs=1e-12)
    for (before, b), (after, a) in zip(zip(steps, intervals), zip(steps[1:], intervals[1:])):
        assert a[0] == pytest.approx(b[1], rel=1e-12, abs=1e-12)
        assert _is_dependency(g, r.schedule, before, after)


# ------------------------------------------------------------------ the Gantt chart that shows it
def test_gantt_legend_names_the_busiest_op_types_and_the_critical_path():
    from rlplace.report import op_categories, schedule_figure

    types = ["MatMul"] * 3 + ["Add", "Relu", "Conv", "Tanh", "Mul", "Sub", "Exp", "Log"]
    g = OpGraph.from_records([op(f"o{i}", 1.0 + (t == "MatMul"), op_type=t) for i, t in enumerate(types)], [])
    labels, category = op_categories(g, g.compute_time, most=4)
    assert labels[0] == "MatMul" and labels[-1] == "other" and len(labels) == 4
    assert [labels[c] for c in category[:3]] == ["MatMul"] * 3
    s = simulate(g, cluster(2), np.arange(g.num_ops) % 2, trace=True).schedule
    fig = schedule_figure(g, cluster(2), s)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[0] == "MatMul" and "other" in legend
    assert legend[-1].startswith("critical path") and "6 ops" in legend[-1]


def test_gantt_legend_by_layer_when_ops_have_no_types():
    from rlplace.report import op_categories

    g = OpGraph.from_records([op(f"o{i}", layer=i // 2) for i in range(40)], [])
    labels, category = op_categories(g, g.compute_time, most=8)
    assert len(labels) == 8 and labels[0] == "layers 0-2" and labels[-1] == "layers 18-19"
    assert labels[category[-1]] == "layers 18-19" and labels[category[0]] == "layers 0-2"
