"""Operator fusion (Baechi §3.3) loses no parallelism and keeps the simulator's costs.

Baechi's degree rule ("src out-degree <= 1 or dst in-degree <= 1") only rules out cycles. A fused
node starts when all its inputs are in and releases its outputs when all its ops are done, so the
rule let through contractions that make the graph the placer schedules slower than the graph the
simulator runs: an optimizer update fused into its weight's read made every forward reader of the
weight wait for the update; a producer fused into its only reader could no longer run before the
reader's other inputs arrived. The quotient also dropped the bytes a fused node holds inside
(tensors passed between its ops, unread outputs). These tests pin each cause, and the properties
the ``lossless`` rule guarantees on random training-like graphs.
"""

import networkx as nx
import numpy as np
import pytest
from conftest import op, training_graph
from hypothesis import given, strategies as st

from rlplace.cluster import Cluster, CommModel
from rlplace.coarsen import CoarseGraph, group_working_bytes
from rlplace.errors import ConfigError
from rlplace.graph import CONTROL, OpGraph
from rlplace.placers import make_placer
from rlplace.placers.baechi.optimizer import GraphOptimizer, coplacement_labels, deferred_sets, forward_part, fuse
from rlplace.sim import simulate


def _longest_path(g: OpGraph) -> float:
    finish = np.zeros(g.num_ops)
    for i in range(g.num_ops):
        ins = g.in_edges[g.in_ptr[i]:g.in_ptr[i + 1]]
        finish[i] = finish[g.edge_src[ins]].max(initial=0.0) + g.compute_time[i]
    return float(finish.max(initial=0.0))


def _units(n: int, latency: float, seconds_per_byte: float = 0.0) -> Cluster:
    return Cluster.homogeneous(n, 10**12, CommModel(latency, seconds_per_byte))


def _place(name: str, g: OpGraph, c: Cluster, rule: str | None, **options):
    """Place with fusion under ``rule`` (None: fusion off) and simulate; returns (step, devices,
    the step of the placer's own schedule of the graph it placed). The optimizer's own placement:
    its fallback to the plain graph (tests/test_optimizer_fallback.py) would hide what the rule does."""
    placer = make_placer(name, fusion=rule is not None, fusion_rule=rule or "lossless", optimizer_fallback=False,
                         **options)
    p = placer.place(g, c)
    p.validate(g, c)  # every op placed once, no colocation group split
    return simulate(g, c, p).step_time, p.device_of, p.schedule.step_time


# ------------------------------------------------------------------------------ the causes
def test_degree_rule_makes_the_other_readers_of_a_producer_wait_for_the_reader_fused_into_it():
    """A weight's read feeds its (heavy) update, colocated with it, and a forward op. The degree
    rule fuses the update into the read (its only input): in the graph m-ETF schedules, the forward
    op now waits 10 units for the update, so m-ETF keeps it and its successor on the read's device
    (22) instead of running them beside the update (12.5). The lossless rule leaves them apart."""
    g = OpGraph.from_records([op("read", 1.0, colocation_group="w"), op("update", 10.0, colocation_group="w"),
                              op("use", 1.0), op("next", 10.0)],
                             [("read", "update", 10), ("read", "use", 10), ("use", "next", 10)])
    coplace = coplacement_labels(g, coplacement=False)
    degree, lossless = fuse(g, coplace, rule="degree"), fuse(g, coplace)
    assert degree.num_groups == 3 and lossless.num_groups == 4
    assert _longest_path(degree.quotient()) == 22.0 > _longest_path(g) == 12.0
    c = _units(2, 0.5)
    off = _place("m_etf", g, c, None, coplacement=False, forward_only=False)[0]
    assert off == pytest.approx(12.5)
    assert _place("m_etf", g, c, "degree", coplacement=False, forward_only=False)[0] == pytest.approx(22.0)
    assert _place("m_etf", g, c, "lossless", coplacement=False, forward_only=False)[0] == pytest.approx(off)


@pytest.mark.parametrize("name", ["m_etf", "m_sct"])
def test_degree_rule_makes_a_producer_wait_for_the_other_inputs_of_its_only_reader(name):
    """u's only reader is v (same set); v also needs x, from another branch. Fused by the degree
    rule, u cannot start before x arrives: the placer sees a 22-unit chain and puts everything on
    one device; un-fused (and under the lossless rule) u and x run in parallel (12.5)."""
    g = OpGraph.from_records([op("a", 1.0), op("u", 10.0, colocation_group="s"), op("v", 1.0, colocation_group="s"),
                              op("b", 1.0), op("x", 10.0)],
                             [("a", "u", 10), ("u", "v", 10), ("b", "x", 10), ("x", "v", 10)])
    coplace = coplacement_labels(g, coplacement=False)
    assert fuse(g, coplace, rule="degree").num_groups == 4 and fuse(g, coplace).num_groups == 5
    assert _longest_path(fuse(g, coplace, rule="degree").quotient()) == 22.0 > _longest_path(g) == 12.0
    c = _units(2, 0.5)
    off = _place(name, g, c, None, coplacement=False, forward_only=False)[0]
    assert off == pytest.approx(12.5)
    assert _place(name, g, c, "degree", coplacement=False, forward_only=False)[0] == pytest.approx(22.0)
    assert _place(name, g, c, "lossless", coplacement=False, forward_only=False)[0] == pytest.approx(off)


def _groups(g: OpGraph, cg: CoarseGraph) -> list[set[str]]:
    return sorted(({g.names[i] for i in cg.members(k)} for k in range(cg.num_groups)), key=sorted)


def test_lossless_rule_fuses_where_nothing_waits():
    """Each contraction the lossless rule makes, and its counterpart that would make something wait."""
    def grouped(ops, edges):
        g = OpGraph.from_records(ops, edges)
        cg = fuse(g, coplacement_labels(g, coplacement=False))
        assert _longest_path(cg.quotient()) == pytest.approx(_longest_path(g))  # nothing waits longer
        return [grp for grp in _groups(g, cg) if len(grp) > 1]

    s = {"colocation_group": "s"}
    # a chain link: a's only reader is b, b's only input is a
    assert grouped([op("x"), op("a", **s), op("b", **s), op("y")],
                   [("x", "a", 1), ("a", "b", 1), ("b", "y", 1)]) == [{"a", "b"}]
    # u's only reader v also reads k (same set), done at 0.6 before u can start at 1: u joins v
    sk = [op("x"), op("z", 0.1), op("k", 0.5, **s), op("u", **s), op("v", **s)]
    ek = [("x", "u", 1), ("z", "k", 1), ("k", "v", 1), ("u", "v", 1)]
    assert grouped(sk, ek) == [{"u", "v"}]
    sk[2] = op("k", 2.0, **s)  # k now ends at 2.1, after u could start: u would wait for it
    assert grouped(sk, ek) == []
    # v's only input is u; u's other reader w (same set) reads v too, so it starts after v anyway
    sw = [op("x"), op("u", **s), op("v", **s), op("w", **s)]
    assert grouped(sw, [("x", "u", 1), ("u", "v", 1), ("u", "w", 1), ("v", "w", 1)]) == [{"u", "v", "w"}]
    # ... but if w does not read v it could start at 2, before v ends at 3: it would wait
    assert grouped(sw, [("x", "u", 1), ("u", "v", 1), ("u", "w", 1)]) == []


def test_sources_join_only_to_defer_their_set():
    """A variable's read, its slot and its update share a colocation group, which the gradient
    enters from outside. The degree rule fuses the read into the variable and the slot into the
    update, as §3.3 allows. The lossless rule joins a source only where that defers its set's
    placement to a member with an input from outside (``deferred_sets``): here that member, the
    update, waits for the gradient of the variable's own read (a path leaves the set and comes
    back), so nothing joins and the set is placed by its sources, as §3.1 says. In a forward
    part (no gradient, no update) the set {var, read, mm} is entered by x: var joins read and
    both join mm, so the set is placed when x is ready. A source of a set with no input from
    outside ({c, d}) stays a node of its own: nothing outside would decide the set's device,
    and a fused source group would hold its device at time 0, where the list scheduler runs the
    other sources. A set with one source (Baechi Fig. 6's step and its increment) has its source
    joined to its only reader, so the set is placed when the reader is ready."""
    w = {"colocation_group": "w"}
    ops = [op("x"), op("var", 0.1, **w), op("read", 0.1, **w), op("mm", 5.0), op("grad", 5.0, forward_op="mm"),
           op("slot", 0.1, **w), op("update", 1.0, **w)]
    edges = [("var", "read", 0), ("x", "mm", 1), ("read", "mm", 1), ("mm", "grad", 1), ("x", "grad", 1),
             ("var", "update", 0), ("slot", "update", 0), ("grad", "update", 1)]
    g = OpGraph.from_records(ops, edges)
    coplace = coplacement_labels(g, coplacement=False)
    assert {"var", "read"} in _groups(g, fuse(g, coplace, rule="degree"))
    assert {"slot", "update"} in _groups(g, fuse(g, coplace, rule="degree"))
    assert all(len(grp) == 1 for grp in _groups(g, fuse(g, coplace)))
    forward = OpGraph.from_records([op("x"), op("var", 0.1, **w), op("read", 0.1, **w), op("mm", 5.0, **w),
                                    op("c", 0.1, colocation_group="k"), op("d", 0.1, colocation_group="k")],
                                   [("var", "read", 0), ("x", "mm", 1), ("read", "mm", 1), ("c", "d", 1)])
    cg = fuse(forward, coplacement_labels(forward, coplacement=False))
    assert [sorted(grp) for grp in _groups(forward, cg) if len(grp) > 1] == [["mm", "read", "var"]]
    q = cg.quotient()
    assert nx.is_directed_acyclic_graph(nx.DiGraph(list(zip(q.edge_src.tolist(), q.edge_dst.tolist()))))
    # Fig. 6: Step is the only source of its set; UpdateStep also waits for Grad
    st = {"colocation_group": "step"}
    g6 = OpGraph.from_records([op("grad"), op("step", **st), op("update_step", **st)],
                              [("step", "update_step", 8), ("grad", "update_step", 0, CONTROL)])
    assert {"step", "update_step"} in _groups(g6, fuse(g6, coplacement_labels(g6, coplacement=False)))


def test_deferred_sets_wait_only_for_members_that_do_not_wait_for_the_sources():
    """Set a {var, read, mm} is entered by x at mm, which waits for var through read (inside
    the set): deferred when the sources are to join the members they feed (``fuse``), not when
    they stay ops of their own (a held var would hold mm). Set b {w, u} is entered at u by h,
    which waits for w: never deferred. Set c has no input from outside: never deferred."""
    a, b = {"colocation_group": "a"}, {"colocation_group": "b"}
    g = OpGraph.from_records([op("x"), op("var", **a), op("read", **a), op("mm", **a), op("w", **b), op("h"),
                              op("u", **b), op("c")],
                             [("x", "mm", 1), ("var", "read", 1), ("read", "mm", 1), ("w", "h", 1), ("h", "u", 1)])
    set_of = np.unique(coplacement_labels(g, coplacement=False), return_inverse=True)[1].reshape(-1)
    i = g.index
    for joined, expected in ((True, True), (False, False)):
        deferred = deferred_sets(g, set_of, joined=joined)
        assert deferred[set_of[i["var"]]] == expected
        assert not deferred[set_of[i["w"]]] and not deferred[set_of[i["c"]]] and not deferred[set_of[i["x"]]]


def test_unknown_rule_is_a_config_error():
    g = OpGraph.from_records([op("a"), op("b")], [("a", "b", 1)])
    with pytest.raises(ConfigError, match="fusion rule"):
        fuse(g, np.zeros(2, dtype=np.int64), rule="greedy")
    with pytest.raises(ConfigError, match="fusion rule"):
        GraphOptimizer(fusion_rule="greedy").optimize(g)


def test_quotient_holds_what_a_fused_chain_holds():
    """a -> b -> c fused; a's 100-byte output is read by b, b's 50 bytes by c, c's 10 bytes leave.
    While b runs its ops hold 100 + 30 (b's temporary) + 50 = 180 bytes besides the output that
    leaves: the fused node's temporary bytes. The old quotient took the largest temporary (30)
    and dropped the tensors passed inside, so a placer saw 40 bytes where the simulator sees 180."""
    s = {"colocation_group": "s"}
    g = OpGraph.from_records([op("x", out=[1]), op("a", out=[100], **s), op("b", out=[50], temporary=30, **s),
                              op("c", out=[10], **s), op("d", out=[1])],
                             [("x", "a", 1), ("a", "b", 100), ("b", "c", 50), ("c", "d", 10)])
    cg = fuse(g, coplacement_labels(g, coplacement=False))
    assert [len(cg.members(k)) for k in range(cg.num_groups)] == [1, 3, 1]
    q = cg.quotient()
    assert q.temporary_bytes[1] == 180 and q.output_bytes[1] == [10]
    assert group_working_bytes(g, cg.group_of).tolist() == [0, 180, 1]
    c = _units(2, 0.0)
    for dev in ([0, 0, 0], [0, 0, 1], [1, 0, 1]):
        ours = simulate(q, c, np.array(dev)).peak_memory
        theirs = simulate(g, c, cg.expand(dev)).peak_memory
        # the node holds its output (10) from its start and its input (1) to its end
        assert np.all(ours >= theirs) and np.all(ours <= theirs + 10 + 1)


def test_quotient_of_single_ops_keeps_their_exact_memory():
    """A group of one op allocates what the op allocates, unread outputs included (the old quotient
    dropped an output no edge reads, so its peak was 20 bytes short)."""
    g = OpGraph.from_records([op("a", out=[10, 20], temporary=5), op("b", out=[1], persistent=3), op("c", out=[4])],
                             [("a", "b", 10, 0), ("b", "c", 1)])
    q = CoarseGraph.from_labels(g, np.arange(g.num_ops)).quotient()
    c = _units(2, 0.0)
    for dev in ([0, 0, 0], [0, 1, 0], [1, 0, 1]):
        assert simulate(q, c, np.array(dev)).peak_memory.tolist() == simulate(g, c, np.array(dev)).peak_memory.tolist()


# ------------------------------------------------------------------------------ properties
@given(seed=st.integers(0, 2**32 - 1), continuous=st.booleans(), coplacement=st.booleans(),
       forward_only=st.booleans())
def test_fusion_never_lengthens_the_critical_path_nor_splits_a_set(seed, continuous, coplacement, forward_only):
    """On random training-like graphs the graph the placer schedules is never slower than the one
    the simulator runs: its longest compute-only path (Baechi's and our lower bound on the step) is
    the op graph's, longer at most by the compute of the sources joined to their reader (Fig. 6).
    The degree rule made it longer in 706 of 2,400 such graphs, up to 2.2×. Fusion never makes a
    cycle (the quotient builds), never mixes co-placement sets and never splits a colocation group."""
    g = training_graph(seed, continuous)
    if forward_only:
        g = forward_part(g)[0]
    cg = GraphOptimizer(coplacement=coplacement).optimize(g)
    q = cg.quotient()
    size = np.bincount(cg.group_of)
    joined = (np.diff(g.in_ptr) == 0) & (size[cg.group_of] > 1)
    lp, lq = _longest_path(g), _longest_path(q)
    assert lp * (1 - 1e-9) <= lq <= lp * (1 + 1e-9) + g.compute_time[joined].sum()
    for k in range(cg.num_groups):
        assert len(np.unique(cg.coplace[cg.members(k)])) == 1
    for ops in g.colocation_groups.values():
        assert len({q.colocation_group[j] for j in np.unique(cg.group_of[ops])}) == 1
    assert q.total_compute == pytest.approx(g.total_compute)
    assert int(q.persistent_bytes.sum()) == int(g.persistent_bytes.sum())


def test_placers_with_fusion_are_not_slower_than_without_on_training_graphs():
    """m-ETF and m-SCT with fusion on vs off (co-placement and forward-only placement each on and
    off) on 40 random training-like graphs, on 3 devices at 1 GB/s and 2 at 10 GB/s (640 pairs).

    No per-graph bound can hold for any fusion that changes the graph a list scheduler sees:
    m-ETF breaks near-ties among idle devices by microseconds, so changing every op's compute time
    by a millionth already moves the un-fused step by more than 5% in 1.75% of such graphs (up to
    4.9×, 1,600 pairs), and absorbing Fig. 6's source, which the paper wants, moves which device
    gets a set. So the tolerance is on how often fusion makes things more than 5% slower: at most
    2% of the pairs, about what a millionth of noise does. What fusion can make slower is the
    schedule of the graph the placer places: with forward-only placement that is the forward
    part (``Placed.schedule``), and the backward ops that follow their forward ops move the step by
    as much again whichever device a tie gave (up to 1.40× here with forward schedules within
    0.7% of each other), so those pairs compare the placer's schedule and the others the step.
    By that measure the degree rule is more than 5% slower in 19 of these 640 pairs (3.0%, up
    to 2.47×), the lossless rule in 12 (1.9%, up to 1.40×: 11 of them whole-step placements with
    co-placement, where a set whose sources joined its entered member is placed where that
    member's input is, and the paper's placement by the sources at time 0 happened to spread
    better). The placements are valid: every op placed once, no colocation group split; over all
    640 pairs the step's geometric mean may not exceed 1.005 (lossless: 0.949)."""
    clusters = [_units(3, 0.0, 1e-9), _units(2, 0.0, 1e-10)]
    ratios, steps = [], []
    for seed in range(40):
        g = training_graph(seed, continuous=seed % 2 == 1)
        for c in clusters:
            for name in ("m_etf", "m_sct"):
                for coplacement in (False, True):
                    for forward_only in (False, True):
                        options = dict(coplacement=coplacement, forward_only=forward_only)
                        off, _, off_own = _place(name, g, c, None, **options)
                        on, _, on_own = _place(name, g, c, "lossless", **options)
                        ratios.append(on_own / off_own if forward_only else on / off)
                        steps.append(on / off)
    ratios = np.array(ratios)
    assert len(ratios) == 640
    assert np.sum(ratios > 1.05) <= 0.02 * len(ratios)
    assert np.exp(np.log(steps).mean()) <= 1.005
