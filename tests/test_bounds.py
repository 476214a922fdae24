"""The communication-aware lower bound (rlplace.bounds): the compiled kernel against a literal
one, against the exhaustive bound it relaxes, and never above a simulated step time."""

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import op, random_dags, training_graph
from rlplace.bounds import communication_bound, heads_and_tails
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.sim import lower_bound, simulate
from rlplace.zoo.synthetic import layered

LINKS = [CommModel(0.5, 0.01, "sequential"), CommModel(0.2, 0.05, "parallel"), CommModel(0.0, 0.0, "parallel")]


def neighbours(graph: OpGraph, xfer: np.ndarray, i: int, tails: bool) -> dict[int, float]:
    """The distinct predecessors (successors, for tails) of op ``i`` and each one's longest transfer."""
    out: dict[int, float] = {}
    for e in range(graph.num_edges):
        src, dst, t = int(graph.edge_src[e]), int(graph.edge_dst[e]), int(graph.edge_tensor[e])
        other = dst if tails else src
        if (src if tails else dst) == i:
            out[other] = max(out.get(other, 0.0), float(xfer[t]))
    return out


def literal_levels(graph: OpGraph, cluster: Cluster, tails: bool, exhaustive: bool = False) -> list[float]:
    """rlplace.bounds' heads (or tails) written out: for each op, the smallest over the prefixes
    of its neighbours sorted by a + c of max(largest a + c outside, largest a inside,
    min(smallest level inside, smallest a outside) + total w inside). ``exhaustive``: the
    smallest over every set S of neighbours on the op's device of max(largest a + c outside,
    largest a in S, smallest level in S + total w of S), the bound the prefixes relax."""
    w = graph.compute_time / cluster.speeds.max()
    xfer = np.asarray(cluster.comm.transfer_time(graph.tensor_bytes), dtype=float).reshape(-1)
    n = graph.num_ops
    level = [0.0] * n
    for i in (reversed(range(n)) if tails else range(n)):
        nb = neighbours(graph, xfer, i, tails)
        if not nb:
            continue
        a = {p: level[p] + w[p] for p in nb}
        key = {p: a[p] + c for p, c in nb.items()}
        if exhaustive:
            sets = [set(s) for k in range(len(nb) + 1) for s in combinations(nb, k)]
        else:
            ranked = sorted(nb, key=lambda p: -key[p])
            sets = [set(ranked[:k]) for k in range(len(nb) + 1)]
        candidates = []
        for inside in sets:
            if cluster.num_devices == 1 and len(inside) < len(nb):
                continue
            outside = [p for p in nb if p not in inside]
            if inside:
                first = min(level[p] for p in inside)
                if not exhaustive:
                    first = min([first] + [a[p] for p in outside])
                cost = max(max(a[p] for p in inside), first + sum(w[p] for p in inside))
            else:
                cost = 0.0
            candidates.append(max([cost] + [key[p] for p in outside]))
        level[i] = min(candidates)
    return level


def clusters(devices: int, link: int, uneven: bool) -> Cluster:
    speeds = [1.0 + (0.5 * k if uneven else 0.0) for k in range(devices)]
    return Cluster(tuple(Device(f"/device:GPU:{k}", 2**50, s) for k, s in enumerate(speeds)), LINKS[link])


@settings(max_examples=60, deadline=None)
@given(graph=random_dags(max_ops=10), devices=st.integers(1, 4), link=st.integers(0, 2), uneven=st.booleans())
def test_the_kernel_is_the_literal_bound_and_relaxes_the_exhaustive_one(graph, devices, link, uneven):
    cluster = clusters(devices, link, uneven)
    head, tail = heads_and_tails(graph, cluster)
    np.testing.assert_allclose(head, literal_levels(graph, cluster, False), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tail, literal_levels(graph, cluster, True), rtol=1e-12, atol=1e-12)
    assert np.all(head <= np.array(literal_levels(graph, cluster, False, exhaustive=True)) + 1e-12)


@settings(max_examples=40, deadline=None)
@given(graph=random_dags(max_ops=12), devices=st.integers(1, 4), link=st.integers(0, 2), uneven=st.booleans(),
       seed=st.integers(0, 1000))
def test_no_placement_runs_faster_than_the_bound(graph, devices, link, uneven, seed):
    cluster = clusters(devices, link, uneven)
    bound = communication_bound(graph, cluster)
    assert bound >= lower_bound(graph, cluster) - 1e-12
    rows = np.random.default_rng(seed).integers(0, devices, (30, graph.num_ops))
    for row in rows:
        assert simulate(graph, cluster, row).step_time >= bound * (1 - 1e-12)


PLACERS = ["single", "m_etf", "m_sct", "heft", "celeritas", "critical_path", "learned", "metis"]


@pytest.mark.parametrize("seed", range(4))
def test_no_placer_beats_the_bound_on_training_steps_and_layered_graphs(seed):
    for graph in (training_graph(seed, continuous=True), layered(150, width=6, seed=seed)):
        for link in (CommModel(134e-6, 1.754e-10, "sequential"), CommModel(2e-5, 1e-9, "parallel")):
            cluster = Cluster.homogeneous(2 + seed % 3, 2**50, link)
            bound = communication_bound(graph, cluster)
            for name in PLACERS:
                step = simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time
                assert step >= bound * (1 - 1e-12), (name, step, bound)


def test_a_join_whose_inputs_are_dear_to_move_is_bounded_by_running_them_together():
    """Two 1 s producers feeding a 1 s op over a 10 s link: moving either input costs more than
    running both producers first on the op's device, so the best step is 3 s and the bound
    finds it, where the compute bound says max(2, 3 / 2) = 2."""
    graph = OpGraph.from_records([op("p"), op("q"), op("j")], [("p", "j", 10), ("q", "j", 10)], name="join")
    cluster = Cluster.homogeneous(2, 2**50, CommModel(10.0, 0.0, "parallel"))
    assert lower_bound(graph, cluster) == 2.0
    assert communication_bound(graph, cluster) == 3.0 == simulate(graph, cluster, [0, 0, 0]).step_time
