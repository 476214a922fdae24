import numpy as np
import pytest
from conftest import op, random_dags
from hypothesis import given, strategies as st

from rlplace.cluster import Cluster, CommModel, load_preset
from rlplace.errors import ConfigError
from rlplace.graph import CONTROL, OpGraph
from rlplace.placers import make_placer
from rlplace.placers.baechi.sct_lp import favorite_children
from rlplace.schedule import memory_peaks
from rlplace.sim import simulate
from rlplace.zoo import chain, layered, linear_regression

BAECHI = ["m_topo", "m_etf", "m_sct"]
OFF = dict(coplacement=False, fusion=False, forward_only=False)
SCHEDULERS = ["m_etf", "m_sct"]


def _units(n_dev: int, memory: int, latency: float, mode: str = "parallel") -> Cluster:
    return Cluster.homogeneous(n_dev, memory, CommModel(latency=latency, mode=mode))


def test_fig1_sct_ooms_where_m_sct_succeeds():
    """Baechi Fig. 1's property (the figure itself is not recoverable from the text): with
    infinite memory SCT keeps the favorite-child chain on one device (makespan 6); with 4 memory
    units per device that placement OOMs, while m-SCT excludes the full device and finishes in 7."""
    unit = 1000
    g = chain(6, compute_time=1.0, output_bytes=0, persistent_bytes=unit)
    roomy, tight = _units(2, 100 * unit, 1.0), _units(2, 4 * unit, 1.0)
    sct = make_placer("m_sct", **OFF).place(g, roomy)
    assert simulate(g, roomy, sct).step_time == pytest.approx(6.0)
    assert simulate(g, tight, sct).oom
    m_sct = make_placer("m_sct", **OFF).place(g, tight)
    r = simulate(g, tight, m_sct)
    assert not r.oom and r.step_time == pytest.approx(7.0)


def _fig6_graph() -> OpGraph:
    g = linear_regression(compute_time=1.0)
    keep = ["Grad", "Step", "UpdateStep"]
    ops = [{k: v for k, v in g.op_record(g.index[n]).items() if k != "forward_op"} for n in keep]
    return OpGraph.from_records(ops, [("Step", "UpdateStep", 8), ("Grad", "UpdateStep", 0, CONTROL)])


def test_fig6_fusion_cuts_the_step_from_7_to_3_time_units():
    g, c = _fig6_graph(), _units(2, 10**6, 5.0)
    before = make_placer("m_etf", **OFF, single_fallback=False).place(g, c)  # the paper's m-ETF
    after = make_placer("m_etf", coplacement=False, fusion=True, single_fallback=False).place(g, c)
    assert simulate(g, c, before).step_time == pytest.approx(7.0)
    assert simulate(g, c, after).step_time == pytest.approx(3.0)
    # one device also runs it in 3: without fusion, the fallback finds that placement
    assert simulate(g, c, make_placer("m_etf", **OFF).place(g, c)).step_time == pytest.approx(3.0)


def test_favorite_child_lp_picks_the_costlier_edge():
    ops = [op("a", 1.0, out=[1, 20]), op("b", 1.0), op("c", 1.0)]  # LP optimum: x_ac = 1/21
    g = OpGraph.from_records(ops, [("a", "b", 1, 0), ("a", "c", 20, 1)])
    for method in ("simplex", "ipm", "highs-ipm", "highs-ds"):
        fav = favorite_children(g, CommModel(seconds_per_byte=1.0), threshold=0.1, method=method)
        assert fav[g.index["a"]] == g.index["c"] and fav[g.index["b"]] == -1
    ops = [op("a"), op("b"), op("c")]
    g = OpGraph.from_records(ops, [("a", "c", 1), ("b", "c", 1)])
    fav = favorite_children(g, CommModel(latency=1.0))
    assert (fav >= 0).sum() <= 1  # c is the favorite child of one parent at most


def _with_colocation(g: OpGraph, labels, forward=None) -> OpGraph:
    """``g`` with colocation group ``g<label>`` for labels >= 0 and, optionally, the forward op
    of index ``forward[i]`` (None: none)."""
    ops = []
    for i in range(g.num_ops):
        rec = g.op_record(i)
        if labels[i] >= 0:
            rec["colocation_group"] = f"g{labels[i]}"
        if forward is not None and forward[i] is not None:
            rec["forward_op"] = g.names[forward[i]]
        ops.append(rec)
    return OpGraph.from_records(ops, [tuple(e) for e in g.edge_records()], name=g.name)


@pytest.mark.parametrize("name", BAECHI)
@given(g=random_dags(), seed=st.integers(0, 5), optimize=st.booleans(), mode=st.sampled_from(["parallel", "sequential"]),
       memory=st.sampled_from([10, 60, 10**6]))
def test_every_op_placed_once_colocation_kept_never_crashes(name, g, seed, optimize, mode, memory):
    labels = np.random.default_rng(seed).integers(-3, 3, g.num_ops)
    g = _with_colocation(g, labels)
    c = _units(3, memory, 0.5, mode)
    p = make_placer(name, **({} if optimize else OFF)).place(g, c)
    assert len(p) == g.num_ops
    p.validate(g, c)  # range, length, no split colocation group
    simulate(g, c, p)


@pytest.mark.parametrize("name", BAECHI)
@given(g=random_dags(), data=st.data(), memory=st.sampled_from([60, 10**6]))
def test_backward_ops_follow_their_forward_op_on_any_graph(name, g, data, memory):
    """Random forward/backward pairs (a forward op comes earlier), gradient sums and colocation
    groups: the placement is valid, and a backward op outside colocation groups is on its
    forward op's device, whether forward-only placement applies (ample memory) or not. In
    whole-step placement co-placement pairs them (§3.3), so there the optimizer's own placement
    with whole sets is checked: neither the plain placement its fallback may keep nor the one
    through sets bounded by memory (``bounded_sets``) pairs them all."""
    n = g.num_ops
    forward = [data.draw(st.none() | st.integers(0, i - 1)) if i else None for i in range(n)]
    labels = data.draw(st.lists(st.integers(-3, 1), min_size=n, max_size=n))
    g = _with_colocation(g, labels, forward)
    c = _units(2, memory, 0.5)
    p = make_placer(name, optimizer_fallback=memory > 60, bounded_sets=memory > 60).place(g, c)
    p.validate(g, c)
    for i in np.flatnonzero(g.forward_op >= 0):
        f = g.forward_op[i]
        if g.colocation_group[i] is None and g.colocation_group[f] is None and g.forward_op[f] < 0:
            assert p[i] == p[f], (g.names[i], g.names[f])


@pytest.mark.parametrize("name", BAECHI)
def test_deterministic(name):
    g, c = layered(600, seed=4), load_preset("baechi_2080")
    assert make_placer(name).place(g, c) == make_placer(name).place(g, c)
    assert make_placer(name, **OFF).place(g, c) == make_placer(name, **OFF).place(g, c)


@pytest.mark.parametrize("name", SCHEDULERS)
def test_memory_respected_when_a_feasible_placement_exists(name):
    # four chains of weights; one device holds one chain only
    unit = 1000
    ops, edges = [], []
    for b in range(4):
        for k in range(5):
            ops.append(op(f"b{b}_{k}", 1.0, out=[unit], persistent=2 * unit))
            if k:
                edges.append((f"b{b}_{k - 1}", f"b{b}_{k}", unit))
    g = OpGraph.from_records(ops, edges)
    c = _units(4, 13 * unit, 0.1)
    assert simulate(g, c, np.zeros(g.num_ops, dtype=np.int64)).oom
    for opt in ({}, OFF):
        assert not simulate(g, c, make_placer(name, **opt).place(g, c)).oom


@pytest.mark.parametrize("name", SCHEDULERS)
def test_beats_round_robin_and_random_when_computation_outweighs_communication(name):
    g, c = layered(1000, seed=0), load_preset("baechi_2080")  # ~1 ms ops, ~0.3 ms transfers
    others = [simulate(g, c, make_placer(b, seed=0).place(g, c)).step_time for b in ("round_robin", "random")]
    for opt in ({}, OFF):
        assert simulate(g, c, make_placer(name, **opt).place(g, c)).step_time < min(others)


@pytest.mark.parametrize("name", SCHEDULERS)
@pytest.mark.parametrize("fraction", [0.4, 0.3])
def test_layered_dag_at_a_fraction_of_single_peak_memory(name, fraction):
    g, c = layered(2000, seed=1), load_preset("baechi_2080")
    single = simulate(g, c, np.zeros(g.num_ops, dtype=np.int64)).peak_memory[0]
    tight = c.with_memory(int(single * fraction))
    assert simulate(g, tight, np.zeros(g.num_ops, dtype=np.int64)).oom
    for opt in ({}, OFF):
        assert not simulate(g, tight, make_placer(name, **opt).place(g, tight)).oom


def test_memory_too_tight_places_best_effort():
    g = layered(300, seed=2)
    c = load_preset("baechi_2080").with_memory(10**6)
    for name in BAECHI:
        p = make_placer(name).place(g, c).validate(g, c)
        assert simulate(g, c, p).oom


def test_forward_only_places_backward_ops_with_their_forward_op():
    g, c = linear_regression(), _units(3, 10**9, 1e-4)
    p = make_placer("m_etf", coplacement=False, fusion=False, forward_only=True).place(g, c).validate(g, c)
    i = g.index
    assert p[i["Grad"]] == p[i["MatMul"]] and p[i["ErrorGrad"]] == p[i["Loss"]]


def test_gradient_sum_does_not_join_parallel_branches():
    """Two heavy forward ops whose gradients meet in one sum (each gradient's only reader):
    co-placement joins each gradient to its forward op but not the two branches (§3.2-3.3), so
    both placers run them in parallel, whether they place the forward ops only or every op."""
    ops = [op("x1", 10.0), op("x2", 10.0), op("g1", 1.0, forward_op="x1"), op("g2", 1.0, forward_op="x2"),
           op("s", 0.1)]
    g = OpGraph.from_records(ops, [("x1", "g1", 10), ("x2", "g2", 10), ("g1", "s", 10), ("g2", "s", 10)])
    c = _units(2, 10**9, 1e-3)
    i = g.index
    for name in SCHEDULERS:
        for forward_only in (True, False):
            p = make_placer(name, forward_only=forward_only).place(g, c).validate(g, c)
            assert p[i["x1"]] != p[i["x2"]]
            assert p[i["g1"]] == p[i["x1"]] and p[i["g2"]] == p[i["x2"]]
            assert simulate(g, c, p).step_time < 15.0  # serial: 22.1


def test_bad_options():
    g, c = chain(3), _units(2, 10**6, 0.0)
    with pytest.raises(ConfigError, match="memory_fraction"):
        make_placer("m_etf", memory_fraction=0).place(g, c)
    with pytest.raises(ConfigError, match="sct_threshold"):
        make_placer("m_sct", sct_threshold=2.0).place(g, c)
    with pytest.raises(ConfigError, match="lp_method"):
        make_placer("m_sct", lp_method="barrier").place(g, c)
    with pytest.raises(ConfigError, match="fusion"):
        make_placer("m_etf", fusion_rule="greedy").place(g, c)


def test_gnmt_profile(baechi_profile):
    from rlplace.zoo import load_baechi_profile

    g, c = load_baechi_profile(baechi_profile), load_preset("baechi_2080")
    single = simulate(g, c, np.zeros(g.num_ops, dtype=np.int64))
    for name in BAECHI:
        for opt in ({}, OFF):
            r = simulate(g, c, make_placer(name, **opt).place(g, c).validate(g, c))
            assert not r.oom and r.step_time <= 2.5 * single.step_time
    # 40% of single's peak is below the largest op's own allocation: no placement can fit
    biggest = int((g.temporary_bytes + g.output_total).max())
    assert biggest > 0.4 * single.peak_memory[0]
    tight = c.with_memory(int(0.8 * single.peak_memory[0]))
    assert simulate(g, tight, np.zeros(g.num_ops, dtype=np.int64)).oom
    for name in SCHEDULERS:
        for opt in ({}, OFF):
            assert not simulate(g, tight, make_placer(name, **opt).place(g, tight)).oom


def test_sequential_communication_waits_in_the_queue():
    # a fans out to b, c on other devices; with one send channel the second transfer waits
    ops = [op("a", 1.0, out=[0]), op("b", 5.0), op("c", 5.0), op("d", 5.0)]
    g = OpGraph.from_records(ops, [("a", "b", 0), ("a", "c", 0), ("a", "d", 0)])
    par, seq = _units(3, 10**6, 1.0, "parallel"), _units(3, 10**6, 1.0, "sequential")
    for c in (par, seq):
        p = make_placer("m_etf", **OFF).place(g, c)
        assert len(set(p.device_of.tolist())) == 3
    assert simulate(g, seq, make_placer("m_etf", **OFF).place(g, seq)).step_time == pytest.approx(8.0)
    assert simulate(g, par, make_placer("m_etf", **OFF).place(g, par)).step_time == pytest.approx(7.0)


def test_memory_rounds_reuse_the_optimizer_and_the_lp(monkeypatch):
    """The graph optimizer and m-SCT's LP do not depend on the memory budget, so the memory-fit
    rounds (nothing fits here, so every round runs) compute them once per placement: the
    optimizer once per grouping (whole sets, and sets bounded by memory for ``bounded_sets``), the
    LP once per graph placed (the two quotients, and the op graph for ``optimizer_fallback``)."""
    import rlplace.placers.baechi.placer as baechi

    calls = {"lp": 0, "optimizer": 0, "rounds": 0}
    lp, optimize, within = baechi.favorite_children, baechi.GraphOptimizer.optimize, baechi._BaechiPlacer._place_within

    def counted(key, f):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return f(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(baechi, "favorite_children", counted("lp", lp))
    monkeypatch.setattr(baechi.GraphOptimizer, "optimize", counted("optimizer", optimize))
    monkeypatch.setattr(baechi._BaechiPlacer, "_place_within", counted("rounds", within))
    g = layered(300, seed=2)
    tiny = Cluster.homogeneous(4, 10**6, load_preset("baechi_2080").comm)
    placer = make_placer("m_sct")
    placer.place(g, tiny)
    rounds = calls["rounds"]
    assert rounds > 3 and calls["lp"] == 3 and calls["optimizer"] == 2
    placer.place(g, tiny)  # a new call computes them again
    assert calls == {"lp": 6, "optimizer": 4, "rounds": 2 * rounds}


@pytest.mark.parametrize("name", SCHEDULERS)
def test_the_kept_schedule_is_of_the_placement_returned(name, monkeypatch):
    """Nothing fits in 300 kB per device, so every memory round runs and ``fit_to_memory``
    returns the round that overflows least, here not the last: the own schedule, its peak
    memory and the planned peak kept are that round's."""
    import rlplace.placers.baechi.placer as baechi

    rounds = []
    within = baechi._BaechiPlacer._place_within

    def recorded(self, *args):
        device, planned = within(self, *args)
        rounds.append((device.copy(), planned.copy()))
        return device, planned

    monkeypatch.setattr(baechi._BaechiPlacer, "_place_within", recorded)
    g = layered(20, seed=0)
    c = Cluster.homogeneous(4, 3 * 10**5, load_preset("baechi_2080").comm)
    placed = make_placer(name, **OFF).place(g, c)
    device = placed.device_of
    returned = [i for i, (d, _) in enumerate(rounds) if np.array_equal(d, device)]
    assert returned and returned[0] < len(rounds) - 1 and not np.array_equal(rounds[-1][0], device)
    np.testing.assert_array_equal(placed.schedule.op_device, device)
    np.testing.assert_array_equal(placed.planned_peak, rounds[returned[0]][1])
    np.testing.assert_array_equal(placed.peak_memory, memory_peaks(g, 4, placed.schedule))


def _variable_group_graph() -> OpGraph:
    """x (2 s) makes a 10-byte tensor; the colocation group {w, f, g}: the variable w (a source,
    no compute), f reading x only, g reading f and w."""
    ops = [op("x", 2.0, [10]), op("w", 0.0, [1], colocation_group="v"), op("f", 1.0, [1], colocation_group="v"),
           op("g", 1.0, [1], colocation_group="v")]
    return OpGraph.from_records(ops, [("x", "f", 10), ("f", "g", 1), ("w", "g", 1)])


@pytest.mark.parametrize("name", SCHEDULERS)
def test_deferred_sources_let_the_group_follow_its_inputs(name):
    """§3.1 puts the group where its first op goes: w, ready at time 0 while x runs on device 0,
    would take the group to the idle device 1, and f would then wait for x's tensor (4 s to
    send): step 2 + 4 + 1 + 1 = 8. w waits instead until f decides the group's device: f runs
    after x on device 0, no transfer, step 4."""
    g, c = _variable_group_graph(), _units(2, 10**9, 4.0)
    deferred = make_placer(name, **OFF).place(g, c)
    assert len(set(deferred.device_of.tolist())) == 1
    assert simulate(g, c, deferred).step_time == pytest.approx(4.0)


@given(g=random_dags(), seed=st.integers(0, 2**16), mode=st.sampled_from(["parallel", "sequential"]))
def test_deferred_sources_place_every_op_and_keep_groups(g, seed, mode):
    """Where every ready op is a waiting source (a group whose members all need one), they go
    as usual: every op is placed, no group is split, the own schedule is a schedule of it."""
    rng = np.random.default_rng(seed)
    g = _with_colocation(g, rng.integers(-2, 3, g.num_ops))
    c = _units(3, 10**9, 0.5, mode)
    for name in SCHEDULERS:
        placed = make_placer(name, **OFF).place(g, c)
        device = placed.device_of
        assert np.all((device >= 0) & (device < 3))
        for ops in g.colocation_groups.values():
            assert len(set(device[ops].tolist())) == 1
        np.testing.assert_array_equal(placed.schedule.op_device, device)
