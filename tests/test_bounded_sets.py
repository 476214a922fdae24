"""Co-placement sets bounded by a device's memory (``bounded_sets`` of the Baechi placers,
``coplacement_labels(memory_limit=...)``): no set joined by co-placement holds more than the
limit, colocation groups stay whole, and nothing changes where the step fits one device."""

import numpy as np
from conftest import training_graph
from hypothesis import given, settings, strategies as st

from rlplace.cluster import Cluster, CommModel
from rlplace.placers import make_placer
from rlplace.placers.baechi.optimizer import _bounded_union, coplacement_labels
from rlplace.sim import simulate

LINK = CommModel(134e-6, 1.754e-10, "sequential")


def _memory(graph):
    return graph.persistent_bytes + graph.temporary_bytes + graph.output_total


def _partition(labels):
    return sorted(sorted(np.flatnonzero(labels == k).tolist()) for k in np.unique(labels))


def _literal_bounded_union(base, a, b, memory, limit):
    """The rule as written: start from the sets of ``base``, then take the pairs (a[k], b[k]) one
    by one, joining the two sets unless the joined set's memory would exceed ``limit``."""
    where = {}
    for k in np.unique(base):
        s = set(np.flatnonzero(base == k).tolist())
        for op in s:
            where[op] = s
    for x, y in zip(a.tolist(), b.tolist()):
        if where[x] is not where[y] and sum(memory[list(where[x] | where[y])]) <= limit:
            joined = where[x] | where[y]
            for op in joined:
                where[op] = joined
    return sorted(sorted(s) for s in {id(s): s for s in where.values()}.values())


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 30), groups=st.integers(1, 30), pairs=st.integers(0, 60))
def test_bounded_union_is_the_literal_rule(data, n, groups, pairs):
    base = np.unique(np.array(data.draw(st.lists(st.integers(0, groups - 1), min_size=n, max_size=n))),
                     return_inverse=True)[1].reshape(-1)
    ends = st.lists(st.integers(0, n - 1), min_size=pairs, max_size=pairs)
    a, b = np.array(data.draw(ends), dtype=np.int64), np.array(data.draw(ends), dtype=np.int64)
    memory = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype=np.int64)
    limit = data.draw(st.integers(0, 30))  # small numbers: sums equal to the limit come up
    assert _partition(_bounded_union(base, a, b, memory, limit)) == _literal_bounded_union(base, a, b, memory, limit)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), share=st.sampled_from([0.0, 0.05, 0.2, 0.5, 2.0]))
def test_no_coplaced_set_exceeds_the_limit(seed, share):
    graph = training_graph(seed, continuous=True)
    memory = _memory(graph)
    limit = int(share * memory.sum())
    bounded = coplacement_labels(graph, memory_limit=limit)
    colocated = coplacement_labels(graph, coplacement=False)
    whole = coplacement_labels(graph)
    for k in np.unique(bounded):
        ops = np.flatnonzero(bounded == k)
        assert len(np.unique(whole[ops])) == 1  # a part of an unbounded set
        if memory[ops].sum() > limit:  # only a colocation group, kept whole, may exceed it
            assert len(np.unique(colocated[ops])) == 1
    if limit >= memory.sum():
        assert _partition(bounded) == _partition(whole)


def test_colocation_groups_stay_whole_under_any_limit():
    graph = training_graph(3, continuous=True, layers=8)
    colocated = coplacement_labels(graph, coplacement=False)
    bounded = coplacement_labels(graph, memory_limit=0)
    assert _partition(bounded) == _partition(colocated)
    assert _partition(coplacement_labels(graph, memory_limit=2**62)) == _partition(coplacement_labels(graph))


def _cluster(graph, fraction):
    one = Cluster.homogeneous(1, 2**50, LINK)
    peak = simulate(graph, one, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0]
    return Cluster.homogeneous(4, int(peak * fraction), LINK)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["m_topo", "m_etf", "m_sct"]))
def test_the_bound_changes_nothing_where_the_step_fits_one_device(seed, name):
    graph = training_graph(seed, continuous=True)
    cluster = _cluster(graph, 1.0)
    with_bound = make_placer(name).place(graph, cluster).device_of
    without = make_placer(name, bounded_sets=False).place(graph, cluster).device_of
    np.testing.assert_array_equal(with_bound, without)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), fraction=st.sampled_from([0.5, 0.7]), name=st.sampled_from(["m_etf", "m_sct"]))
def test_the_bounded_way_never_makes_a_placer_slower_where_the_step_fits_no_device(seed, fraction, name):
    graph = training_graph(seed, continuous=True, layers=12)
    cluster = _cluster(graph, fraction)
    with_bound = simulate(graph, cluster, make_placer(name).place(graph, cluster).device_of)
    without = simulate(graph, cluster, make_placer(name, bounded_sets=False).place(graph, cluster).device_of)
    assert (with_bound.oom, with_bound.step_time) <= (without.oom, without.step_time * (1 + 1e-12))


def test_bounded_sets_fit_a_step_that_whole_sets_do_not():
    # found by hand: on 4 devices of 0.6x the single-device peak, m-ETF's placements through the
    # optimizer's whole sets and of the plain graph both run out of memory; the bounded sets fit
    graph = training_graph(26, continuous=True, layers=12)
    cluster = _cluster(graph, 0.6)
    assert simulate(graph, cluster, make_placer("m_etf", bounded_sets=False).place(graph, cluster).device_of).oom
    assert not simulate(graph, cluster, make_placer("m_etf").place(graph, cluster).device_of).oom
