"""m-SCT's favourite-child LP (Baechi, SoCC'20, §2.4, §4.2-4.3), solved with HiGHS via highspy.

SCT (Hanen & Munier, ETFA'95, §3.2) picks each op's *favourite child* from an integer program,
Baechi's Eq. 2: per edge i -> j a 0/1 variable x_ij (0: j is i's favourite child), start times
s_i >= 0 and the makespan w; minimise w subject to s_j >= s_i + p_i + c_ij x_ij per edge,
w >= s_i + p_i, at most one favourite child per op (sum of x over i's out-edges >= out-degree - 1)
and at most one favourite parent per op (the same over in-edges). Baechi relaxes x to [0, 1],
solves the LP with an interior-point method (§4.2, Mosek) and calls an edge favourite when
x_ij < 0.1 (§4.3: rounding at 0.5 gave ops several favourites). Here p_i is the op's compute time
at the cluster's mean speed and c_ij the transfer time of the costliest tensor on the edge
(parallel edges are one variable); times are divided by max(p, c) before solving.

Two ways to solve it (``method``), and ``"auto"`` (the default), which takes ``"simplex"`` unless
an op has more than ``DENSE_ROW`` (1,000) pairs as source or as destination, then ``"ipm"``: such
an op's favourite row is dense, and the dual simplex then pivots about once per pair at a cost
that grows with the row, quadratic in the fan-out. On star graphs (one op feeding all others,
baechi_2080) the simplex takes 0.40 / 1.5 / 3.8 s at 1,000 / 3,000 / 5,000 ops and about 85 s
per solve at 30,000 (m-SCT 342 s), IPX 0.04 / 0.13 / 0.26 s and 0.8 s at 10,000, with the same
m-SCT step time; no zoo model has an op with more than about 200 (BERT-12 202, Inception-V3 196,
GNMT-4 81), so ``"auto"`` is the simplex there.

``"simplex"`` (``"highs-ds"`` and ``"highs"`` mean the same): constraint generation
that keeps the LP's optimum. Write y = 1 - x (a pair's favourite weight; at most 1 per op out
and in). The LP over a set K of pairs only (their y and precedence rows) plus the valid bounds
s_i >= head0(i) and w >= s_i + tail0(i) (the compute-only paths to and from i) is a relaxation
of the whole LP: its optimum w_K is a lower bound of the whole optimum w*. Its solution, with the
budgets the ops have left handed out greedily to the pairs outside K (most critical first:
y_e = min(what is left at i, at j)), is a feasible solution of the whole LP, and its makespan L
(a longest-path pass) an upper bound. When L = w_K that solution is optimal; otherwise the pairs
on paths longer than w_K + 0.99 (L - w_K) (all pairs on paths longer than w_K once w_K stops
rising) join K and the restricted LP is solved again, warm-started (HiGHS dual simplex, Devex
pricing: exact steepest-edge weights cost more than the few pivots a round needs). K ends with
under a tenth of the pairs on layered graphs of 5,000-36,000 ops (about half at 1,000, a quarter
on the GNMT profile), and all rounds take well under a second where the whole LP takes seconds
(experiments/results/bench_sct_lp.md).

``"ipm"`` (``"highs-ipm"``): the whole LP, HiGHS' interior-point solver IPX without crossover
(Baechi's choice of solver). Its answer is a point inside the optimal face, not a vertex: an
edge whose x the optimum leaves free gets a middling value and is no favourite. It is nearly as
slow as SciPy's ``highs-ipm`` (about 12 s at 20,000 ops): IPX's iterations, not crossover, take
the time.

Both return an optimal solution of the same LP; they differ in which one, hence in the
favourites (experiments/results/bench_sct_lp.md compares them and their m-SCT step times).
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numba
import numpy as np

from rlplace.cluster import CommModel
from rlplace.errors import ConfigError, GraphError, PlacementError
from rlplace.graph import OpGraph

LP_METHODS = ("auto", "simplex", "ipm", "highs-ds", "highs-ipm", "highs")
DENSE_ROW = 1000  # "auto": an op with more pairs than this (out or in) makes the simplex quadratic
_SOLVER = {"simplex": "simplex", "highs-ds": "simplex", "highs": "simplex",
           "ipm": "ipm", "highs-ipm": "ipm"}

# highspy.Highs() writes HiGHS' banner to stdout when it is built, before output can be switched
# off; the bare binding it wraps (exported by highspy 1.16) does not.
_Highs = getattr(highspy, "_Highs", highspy.Highs)
_INF = highspy.kHighsInf

# HiGHS options per method. Output off. The HiGHS thread scheduler is shared by the whole
# process and cannot be resized once started, and both solvers used here run on one thread
# (the serial dual simplex, IPX), so ``threads`` is left alone.
_OPTIONS = {
    "simplex": {"solver": "simplex", "simplex_strategy": 1, "simplex_dual_edge_weight_strategy": 1},
    # Relative duality gap 1e-7 (default 1e-8): the objective to 1e-7, one or two iterations
    # fewer; x is rounded at 0.1, far above what the last digits change. Feasibility
    # tolerances stay at their default 1e-7, on an LP whose coefficients are at most 1.
    "ipm": {"solver": "ipx", "run_crossover": "off", "ipm_optimality_tolerance": 1e-7},
}
_THETA = 0.99  # constraint generation: add edges on paths longer than w_K + THETA (L - w_K)
_GAP = 1e-7  # stop when L - w_K <= GAP * max(w_K, max(p, c)) (the solvers' tolerances are 1e-7)


@dataclass(frozen=True)
class SctLp:
    """An optimal solution of the favourite-child LP (Baechi Eq. 2 relaxed).

    ``src``, ``dst``: the distinct (source, destination) op pairs with an edge, sorted; ``x``
    the LP value per pair (0: favourite). ``makespan`` (s): the LP objective of ``x`` (the
    longest path with delays p_i + c_ij x_ij); ``lower_bound`` (s): the restricted LP's optimum
    (the whole LP's for ``"ipm"``), a lower bound of the LP optimum up to the solver's
    tolerances, so the optimum lies in [lower_bound, makespan] (1e-7 apart, relative, or 1e-7 of
    max(p, c) absolute).
    ``rounds``: restricted LPs solved; ``columns``: pairs with a variable in the last one."""

    src: np.ndarray
    dst: np.ndarray
    x: np.ndarray
    makespan: float
    lower_bound: float
    rounds: int
    columns: int


def favorite_children(graph: OpGraph, comm: CommModel, speed: float = 1.0,
                      threshold: float = 0.1, method: str = "auto") -> np.ndarray:
    """The favourite child of each op (-1: none) from the LP relaxation of SCT's ILP (Baechi
    Eq. 2, §2.4): pairs with x < ``threshold`` (§4.3) are favourite; where rounding would give an
    op two favourites, the first pair (by source, then destination) wins. ``method``: one of
    LP_METHODS (see the module docstring)."""
    if not 0 < threshold <= 1:
        raise ConfigError(f"favorite_children: threshold must be in (0, 1], got {threshold!r}")
    lp = solve_sct_lp(graph, comm, speed, method)
    fav = np.full(graph.num_ops, -1, dtype=np.int64)
    has_parent = np.zeros(graph.num_ops, dtype=bool)
    for k in np.flatnonzero(lp.x < threshold).tolist():
        i, j = int(lp.src[k]), int(lp.dst[k])
        if fav[i] < 0 and not has_parent[j]:
            fav[i] = j
            has_parent[j] = True
    return fav


def solve_sct_lp(graph: OpGraph, comm: CommModel, speed: float = 1.0, method: str = "auto") -> SctLp:
    """Solve the favourite-child LP of ``graph`` (compute times at ``speed``, transfers by
    ``comm``) with ``method`` (one of LP_METHODS)."""
    if method not in LP_METHODS:
        raise ConfigError(f"m_sct: lp_method must be one of {LP_METHODS}, got {method!r}")
    n = graph.num_ops
    pairs, inverse = np.unique(graph.edge_src * n + graph.edge_dst, return_inverse=True)
    src, dst = pairs // n, pairs % n
    if np.any(src >= dst):
        raise GraphError(f"graph {graph.name!r}: ops are not in topological order")
    c = np.zeros(len(pairs))
    np.maximum.at(c, inverse.reshape(-1), comm.transfer_time(graph.tensor_bytes[graph.edge_tensor]))
    p = np.asarray(graph.compute_time, dtype=np.float64) / speed
    scale = max(float(p.max(initial=0.0)), float(c.max(initial=0.0)))
    if scale <= 0:  # nothing takes time: every x is optimal; no favourites
        return SctLp(src, dst, np.ones(len(pairs)), 0.0, 0.0, 0, 0)
    p, c = p / scale, c / scale
    if method == "auto":
        densest = max(np.bincount(src).max(initial=0), np.bincount(dst).max(initial=0))
        method = "ipm" if densest > DENSE_ROW else "simplex"
    solver = _SOLVER[method]
    try:
        if solver == "ipm":
            y, makespan, lower, rounds, columns = _whole(src, dst, p, c)
        else:
            y, makespan, lower, rounds, columns = _generate(src, dst, p, c)
    except _LpFailed as exc:
        raise PlacementError(f"m_sct: the favorite-child LP of graph {graph.name!r} failed ({exc})") from None
    return SctLp(src, dst, 1.0 - y, makespan * scale, lower * scale, rounds, columns)


class _LpFailed(Exception):
    pass


def _whole(src, dst, p, c):
    """The whole LP by IPX, no crossover."""
    by_dst = np.argsort(dst, kind="stable")
    head0, tail0 = _longest(src, dst, by_dst, np.zeros(len(src)), p)
    lower = float((head0 + tail0).max())
    # the plain LP: s_i >= 0, w >= s_i + p_i at sinks (IPX is slower with the valid bounds on
    # every op); w >= the compute-only critical path covers the ops without pairs
    sink = np.bincount(src, minlength=len(p)) == 0
    model = _Restricted(src, dst, p, c, np.zeros(len(p)), np.where(sink, p, -_INF), lower, _OPTIONS["ipm"])
    y = np.zeros(len(src))
    if len(src):
        model.add(np.arange(len(src)))
        lower, y[:] = model.solve()
        np.clip(y, 0.0, 1.0, out=y)
    head, tail = _longest(src, dst, by_dst, c * (1.0 - y), p)
    return y, float((head + tail).max()), lower, 1, len(src)


def _generate(src, dst, p, c):
    """Constraint generation (module docstring): y per pair, makespan, lower bound, rounds,
    pairs kept."""
    m = len(src)
    by_dst = np.argsort(dst, kind="stable")
    head0, tail0 = _longest(src, dst, by_dst, np.zeros(m), p)
    lower = float((head0 + tail0).max())  # the compute-only critical path
    order = np.lexsort((-c, -(head0[src] + p[src] + c + tail0[dst])))  # most critical first
    model = _Restricted(src, dst, p, c, head0, tail0, lower, _OPTIONS["simplex"])
    y = _complete(order, src, dst, c, model.kept, np.zeros(m), len(p))
    rounds, stalled = 0, False
    while True:
        delay = c * (1.0 - y)
        head, tail = _longest(src, dst, by_dst, delay, p)
        makespan = float((head + tail).max())
        if makespan - lower <= _GAP * max(lower, 1.0):  # times are in units of max(p, c)
            break
        through = head[src] + p[src] + delay + tail[dst]  # the longest path through each pair
        cut = lower if stalled else lower + _THETA * (makespan - lower)
        new = np.flatnonzero(~model.kept & (through > cut))
        if len(new) == 0:  # the longest path is all in K: what is left is the solver's tolerance
            break
        model.add(new)
        value, yk = model.solve()
        stalled = value - lower <= _GAP * max(lower, 1.0)
        lower = max(lower, value)
        y = np.zeros(m)
        y[model.kept] = np.clip(yk, 0.0, 1.0)
        y = _complete(order, src, dst, c, model.kept, y, len(p))
        rounds += 1
    return y, makespan, lower, rounds, int(model.kept.sum())


class _Restricted:
    """The LP restricted to the pairs in ``kept`` (K), as one HiGHS model that grows.

    Columns: w, then s_i and y_e as ops and pairs join. Rows: s_i - w <= -tail0(i) per op
    that has a kept pair (where tail0(i) is finite); s_i - s_j - c_e y_e <= -p_i - c_e per kept pair (s_j >= s_i + p_i +
    c_e x_e); sum of y over an op's kept out-pairs (in-pairs) <= 1 once it has two. Bounds:
    w >= the compute-only critical path, s_i >= head0(i), 0 <= y_e <= 1."""

    def __init__(self, src, dst, p, c, head0, tail0, lower, options):
        n, m = len(p), len(src)
        self.src, self.dst, self.p, self.c, self.head0, self.tail0 = src, dst, p, c, head0, tail0
        self.h = _Highs()
        self.h.setOptionValue("output_flag", False)
        for key, value in options.items():
            self.h.setOptionValue(key, value)
        self.kept = np.zeros(m, dtype=bool)
        self.scol, self.ycol = np.full(n, -1), np.full(m, -1)
        self.orow, self.irow = np.full(n, -1), np.full(n, -1)
        self.kout, self.kin = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.h.addVars(1, np.array([lower]), np.array([_INF]))
        self.h.changeColCost(0, 1.0)
        self.ncol, self.nrow = 1, 0

    def _rows(self, upper, counts, index, value) -> np.ndarray:
        k = len(upper)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
        self.h.addRows(k, np.full(k, -_INF), np.asarray(upper, dtype=np.float64), len(index), starts,
                       np.asarray(index, dtype=np.int32), np.asarray(value, dtype=np.float64))
        rows = self.nrow + np.arange(k)
        self.nrow += k
        return rows

    def add(self, edges: np.ndarray) -> None:
        """Add the pairs ``edges`` (sorted, none kept yet) to K."""
        src, dst, c = self.src, self.dst, self.c
        es, ed = src[edges], dst[edges]
        nodes = np.unique(np.concatenate([es, ed]))
        nodes = nodes[self.scol[nodes] < 0]
        k = len(nodes)
        if k:
            self.h.addVars(k, self.head0[nodes], np.full(k, _INF))
            self.scol[nodes] = self.ncol + np.arange(k)
            self.ncol += k
            tails = nodes[self.tail0[nodes] > -_INF]
            self._rows(-self.tail0[tails], np.full(len(tails), 2),
                       np.column_stack([self.scol[tails], np.zeros(len(tails), dtype=np.int64)]).ravel(),
                       np.tile([1.0, -1.0], len(tails)))
        q = len(edges)
        prow = self._rows(-self.p[es] - c[edges], np.full(q, 2),
                          np.column_stack([self.scol[es], self.scol[ed]]).ravel(), np.tile([1.0, -1.0], q))
        # y columns: in their precedence row and in the degree rows that exist already
        rows = np.column_stack([prow, self.orow[es], self.irow[ed]])
        vals = np.column_stack([-c[edges], np.ones(q), np.ones(q)])
        mask = rows >= 0
        counts = mask.sum(axis=1)
        self.h.addCols(q, np.zeros(q), np.zeros(q), np.ones(q), int(counts.sum()),
                       np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32),
                       rows[mask].astype(np.int32), vals[mask])
        self.ycol[edges] = self.ncol + np.arange(q)
        self.ncol += q
        self.kept[edges] = True
        np.add.at(self.kout, es, 1)
        np.add.at(self.kin, ed, 1)
        # degree rows for ops that now have two or more kept out-pairs (in-pairs)
        need = (self.kout >= 2) & (self.orow < 0)
        if need.any():
            members = np.flatnonzero(self.kept & need[src])  # sorted by source
            ops = np.flatnonzero(need)
            self.orow[ops] = self._rows(np.ones(len(ops)), self.kout[ops], self.ycol[members], np.ones(len(members)))
        need = (self.kin >= 2) & (self.irow < 0)
        if need.any():
            members = np.flatnonzero(self.kept & need[dst])
            members = members[np.argsort(dst[members], kind="stable")]
            ops = np.flatnonzero(need)
            self.irow[ops] = self._rows(np.ones(len(ops)), self.kin[ops], self.ycol[members], np.ones(len(members)))

    def solve(self) -> tuple[float, np.ndarray]:
        """Optimum and y of the kept pairs (in pair order)."""
        self.h.run()
        status = self.h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise _LpFailed(self.h.modelStatusToString(status))
        values = np.asarray(self.h.getSolution().col_value)
        return float(self.h.getInfo().objective_function_value), values[self.ycol[self.kept]]


# ------------------------------------------------------------------------------ kernels

@numba.njit(cache=True)
def _longest(src, dst, by_dst, delay, p):  # pragma: no cover - compiled
    """head[i]: the longest path ending where op i starts; tail[i]: the longest from i's start
    to the end (p_i included). Pair e costs p[src] + delay[e]; pairs are sorted by source and
    ops are in topological order (src < dst), ``by_dst`` sorts the pairs by destination."""
    n = len(p)
    head = np.zeros(n)
    for k in range(len(by_dst)):
        e = by_dst[k]
        v = head[src[e]] + p[src[e]] + delay[e]
        if v > head[dst[e]]:
            head[dst[e]] = v
    tail = p.copy()
    for e in range(len(src) - 1, -1, -1):
        v = p[src[e]] + delay[e] + tail[dst[e]]
        if v > tail[src[e]]:
            tail[src[e]] = v
    return head, tail


@numba.njit(cache=True)
def _complete(order, src, dst, c, kept, y, n):  # pragma: no cover - compiled
    """Hand out what the kept pairs leave of each op's favourite budget (1 out, 1 in) to the
    other pairs in ``order``: y_e = min(left at src, left at dst). Pairs without a transfer
    cost get none (they gain nothing from it)."""
    out_left = np.ones(n)
    in_left = np.ones(n)
    for e in range(len(src)):
        if kept[e]:
            out_left[src[e]] -= y[e]
            in_left[dst[e]] -= y[e]
    for k in range(len(order)):
        e = order[k]
        if kept[e]:
            continue
        v = min(out_left[src[e]], in_left[dst[e]])
        if v > 0 and c[e] > 0:
            y[e] = v
            out_left[src[e]] -= v
            in_left[dst[e]] -= v
        else:
            y[e] = 0.0
    return y
