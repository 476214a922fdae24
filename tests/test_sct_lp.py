"""m-SCT's favourite-child LP (rlplace.placers.baechi.sct_lp) against SciPy's linprog on the same LP,
built here from the op records (Baechi Eq. 2 relaxed, as sct_lp's docstring states it)."""

import numpy as np
import pytest
from conftest import op
from hypothesis import given, strategies as st
from scipy.optimize import linprog

from rlplace.cluster import CommModel, load_preset
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placers.baechi.sct_lp import DENSE_ROW, LP_METHODS, favorite_children, solve_sct_lp
from rlplace.zoo import layered

METHODS = ["simplex", "ipm"]
# The LP optimum to 1e-6 relative, or 1e-6 of the largest time absolute (for optima near 0):
# sct_lp solves the LP with times divided by the largest, to HiGHS' tolerances of 1e-7 (absolute
# feasibility; relative duality gap, or the gap between the constraint generation's bounds), and
# linprog has its own 1e-7.
RTOL, ATOL = 1e-6, 1e-6


@st.composite
def lp_cases(draw, max_ops=12):
    """Small DAGs whose ops have two outputs; an (i, j) pair may carry both (parallel edges,
    the LP keeps the costlier), plus a transfer model and a device speed."""
    n = draw(st.integers(1, max_ops))
    compute = [draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0])) for _ in range(n)]
    out = [[draw(st.integers(0, 50)), draw(st.integers(0, 50))] for _ in range(n)]
    triples = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 1)),
                           max_size=3 * n))
    edges = sorted((i, j, port) for i, j, port in triples if i < j)
    comm = CommModel(latency=draw(st.sampled_from([0.0, 0.5, 2.0])),
                     seconds_per_byte=draw(st.sampled_from([0.0, 0.01, 0.1])))
    speed = draw(st.sampled_from([0.5, 1.0, 2.0]))
    graph = OpGraph.from_records([op(f"n{i}", compute[i], out=out[i]) for i in range(n)],
                                 [(f"n{i}", f"n{j}", out[i][port], port) for i, j, port in edges], name="case")
    return graph, compute, out, edges, comm, speed


def _reference(compute, out, edges, comm, speed):
    """The LP in seconds: x per distinct (i, j) pair, s_i, w. min w s.t. s_i + p_i + c_ij x_ij <= s_j,
    s_i + p_i <= w for every op, sum of x over i's out-pairs >= out-degree - 1 and over j's
    in-pairs >= in-degree - 1, 0 <= x <= 1, s >= 0. Returns linprog's optimum and the pairs
    with their c."""
    n = len(compute)
    p = np.asarray(compute) / speed
    cost = {}
    for i, j, port in edges:
        cost[(i, j)] = max(cost.get((i, j), 0.0), float(comm.transfer_time(out[i][port])))
    pairs = sorted(cost)
    m = len(pairs)
    nvar = m + n + 1
    w = m + n
    rows, rhs = [], []
    for k, (i, j) in enumerate(pairs):
        r = np.zeros(nvar)
        r[m + i], r[m + j], r[k] = 1.0, -1.0, cost[(i, j)]
        rows.append(r)
        rhs.append(-p[i])
    for i in range(n):
        r = np.zeros(nvar)
        r[m + i], r[w] = 1.0, -1.0
        rows.append(r)
        rhs.append(-p[i])
    for side in (0, 1):
        for v in range(n):
            ks = [k for k, pair in enumerate(pairs) if pair[side] == v]
            if ks:
                r = np.zeros(nvar)
                r[ks] = -1.0
                rows.append(r)
                rhs.append(1.0 - len(ks))
    bounds = [(0, 1)] * m + [(0, None)] * (n + 1)
    objective = np.zeros(nvar)
    objective[w] = 1.0
    res = linprog(objective, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return res.fun, pairs, cost, p


def _makespan_of(x, pairs, cost, p):
    """The longest path with op times p and pair delays c_ij x_ij (ops in index order)."""
    finish = p.copy()
    for k, (i, j) in sorted(enumerate(pairs), key=lambda item: item[1][1]):
        finish[j] = max(finish[j], finish[i] + cost[(i, j)] * x[k] + p[j])
    return float(finish.max(initial=0.0))


@pytest.mark.parametrize("method", METHODS)
@given(case=lp_cases())
def test_optimum_matches_linprog_and_x_is_an_optimal_solution(method, case):
    graph, compute, out, edges, comm, speed = case
    optimum, pairs, cost, p = _reference(compute, out, edges, comm, speed)
    atol = ATOL * max([*p, *cost.values(), 0.0])
    lp = solve_sct_lp(graph, comm, speed, method)
    assert lp.makespan == pytest.approx(optimum, rel=RTOL, abs=atol)
    assert lp.lower_bound == pytest.approx(optimum, rel=RTOL, abs=atol)
    assert [(int(i), int(j)) for i, j in zip(lp.src, lp.dst)] == pairs
    # x itself is feasible and its makespan is the one reported
    assert np.all((lp.x >= -1e-9) & (lp.x <= 1 + 1e-9))
    for side in (lp.src, lp.dst):
        assert np.all(np.bincount(side, weights=1 - lp.x, minlength=graph.num_ops) <= 1 + 1e-6)
    assert _makespan_of(lp.x, pairs, cost, p) == pytest.approx(lp.makespan, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("method", METHODS)
@given(case=lp_cases(), threshold=st.sampled_from([0.1, 0.5, 1.0]))
def test_favourites_are_valid(method, case, threshold):
    """Each op has at most one favourite child, is the favourite of at most one parent, and its
    favourite is a successor with x < threshold; a pair under the threshold is skipped only
    when an earlier pair took its source's or destination's slot."""
    graph, _, _, edges, comm, speed = case
    fav = favorite_children(graph, comm, speed, threshold, method)
    lp = solve_sct_lp(graph, comm, speed, method)
    assert fav.shape == (graph.num_ops,)
    chosen = {(i, int(fav[i])) for i in range(graph.num_ops) if fav[i] >= 0}
    x = {(int(i), int(j)): v for i, j, v in zip(lp.src, lp.dst, lp.x)}
    assert all(pair in x and x[pair] < threshold for pair in chosen)
    children = fav[fav >= 0]
    assert len(children) == len(set(children.tolist()))
    has_parent = set(children.tolist())
    for (i, j), v in x.items():
        if v < threshold and (i, j) not in chosen:
            assert fav[i] >= 0 or j in has_parent


@pytest.mark.parametrize("method", LP_METHODS)
def test_graph_without_edges(method):
    g = OpGraph.from_records([op("a", 1.0), op("b", 3.0), op("c", 0.5)], [])
    fav = favorite_children(g, CommModel(latency=1.0), 2.0, method=method)
    assert fav.tolist() == [-1, -1, -1]
    lp = solve_sct_lp(g, CommModel(latency=1.0), 2.0, method)
    assert len(lp.x) == 0 and lp.makespan == pytest.approx(1.5)


@pytest.mark.parametrize("method", METHODS)
def test_the_costlier_edge_is_the_favourite(method):
    ops = [op("a", 1.0, out=[1, 20]), op("b", 1.0), op("c", 1.0)]  # LP optimum: x_ac = 1/21
    g = OpGraph.from_records(ops, [("a", "b", 1, 0), ("a", "c", 20, 1)])
    fav = favorite_children(g, CommModel(seconds_per_byte=1.0), threshold=0.1, method=method)
    assert fav.tolist() == [g.index["c"], -1, -1]


@pytest.mark.parametrize("seed", [0, 1])
def test_constraint_generation_keeps_the_optimum_of_a_layered_graph(seed):
    """On a layered graph the restricted LP keeps only part of the pairs, over several rounds,
    and still ends at linprog's optimum of the whole LP."""
    g = layered(400, seed=seed)
    comm = load_preset("baechi_2080").comm
    records = [g.op_record(i) for i in range(g.num_ops)]
    compute = [r["compute_time"] for r in records]
    out = [r["output_bytes"] for r in records]
    edges = [(int(i), int(j), 0) for i, j in zip(g.edge_src, g.edge_dst)]  # one output per op
    optimum, *_ = _reference(compute, out, edges, comm, 1.0)
    lp = solve_sct_lp(g, comm, 1.0, "simplex")
    assert lp.rounds >= 1 and lp.columns < len(lp.x)
    assert lp.makespan == pytest.approx(optimum, rel=RTOL)
    assert solve_sct_lp(g, comm, 1.0, "ipm").makespan == pytest.approx(optimum, rel=RTOL)


def test_aliases_and_determinism():
    g = layered(150, seed=2)
    comm = load_preset("baechi_2080").comm
    simplex = favorite_children(g, comm, method="simplex")
    for alias in ("highs-ds", "highs"):
        assert np.array_equal(favorite_children(g, comm, method=alias), simplex)
    assert np.array_equal(favorite_children(g, comm, method="simplex"), simplex)
    assert np.array_equal(favorite_children(g, comm, method="highs-ipm"), favorite_children(g, comm, method="ipm"))


def star(children: int) -> OpGraph:
    ops = [{"name": f"op{i}", "compute_time": 1e-4, "persistent_bytes": 0, "temporary_bytes": 0,
            "output_bytes": [4000]} for i in range(children + 1)]
    return OpGraph.from_records(ops, [("op0", f"op{i}", 4000) for i in range(1, children + 1)], name="star")


@pytest.mark.parametrize("fan_out", [True, False])
def test_auto_solves_with_ipm_only_where_an_op_has_a_dense_row(fan_out):
    """"auto" is the simplex unless an op has more than DENSE_ROW pairs (out or in), where the
    simplex grows quadratically; then IPX, which solves the whole LP in one round."""
    comm = load_preset("baechi_2080").comm
    g = layered(300, seed=2)
    auto, simplex = solve_sct_lp(g, comm, method="auto"), solve_sct_lp(g, comm, method="simplex")
    assert np.array_equal(auto.x, simplex.x) and auto.rounds == simplex.rounds
    dense = star(DENSE_ROW + 1)
    if not fan_out:  # every op feeding one: the dense row is a destination's
        dense = OpGraph.from_records([{**dense.op_record(i), "name": f"op{i}"} for i in range(dense.num_ops)],
                                     [(f"op{i}", f"op{dense.num_ops - 1}", 4000) for i in range(dense.num_ops - 1)])
    auto, ipm = solve_sct_lp(dense, comm, method="auto"), solve_sct_lp(dense, comm, method="ipm")
    assert np.array_equal(auto.x, ipm.x) and auto.columns == len(auto.src) == DENSE_ROW + 1
    assert auto.makespan == pytest.approx(solve_sct_lp(dense, comm, method="simplex").makespan, rel=1e-6)


def test_bad_method_or_threshold_is_a_config_error():
    g = layered(20, seed=0)
    with pytest.raises(ConfigError, match="lp_method"):
        favorite_children(g, CommModel(), method="interior-point")
    with pytest.raises(ConfigError, match="lp_method"):
        solve_sct_lp(g, CommModel(), method="revised simplex")
    with pytest.raises(ConfigError, match="threshold"):
        favorite_children(g, CommModel(), threshold=0.0)
