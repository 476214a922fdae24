"""m-SCT's favourite-child LP: time vs graph size, old (SciPy linprog) vs new
(rlplace.placers.sct_lp through highspy), and what each LP solution does to the favourite
children and to m-SCT's simulated step time.

    .venv/bin/python experiments/bench_sct_lp.py [--sizes 1000 5000 20000 36000] [--repeats 3] [--quick]

Layered random DAGs (rlplace.zoo.layered, seed 0) and the Baechi GNMT profile, on the
``baechi_2080`` cluster (4 devices, sequential transfers). "Old" is rlplace's
``baechi.favorite_children`` as of commit 7d5ac79, copied below (SciPy's HiGHS: ``highs-ipm``,
IPX with crossover, the default; ``highs-ds``, dual simplex). "New" is
``sct_lp.favorite_children``: ``simplex`` (constraint generation, warm-started dual simplex)
and ``ipm`` (the whole LP by IPX, no crossover). LP times are medians of ``--repeats`` calls
of each favorite_children (building, solving and rounding). Writes
experiments/results/bench_sct_lp.md and bench_sct_lp.json.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import highspy  # noqa: F401  (its version goes into the report)
import numpy as np
import scipy
import scipy.sparse as sp
from scipy.optimize import linprog
from tqdm import tqdm

import rlplace.placers.baechi as baechi
from rlplace.errors import ArgumentParser, run_script
from rlplace.cluster import load_preset
from rlplace.placers import make_placer
from rlplace.placers import sct_lp
from rlplace.sim import simulate
from rlplace.zoo import default_profile_path, layered, load_baechi_profile

RESULTS = Path(__file__).parent / "results"
OFF = {"coplacement": False, "fusion": False, "forward_only": False}
VARIANTS = ["old highs-ipm", "old highs-ds", "new ipm", "new simplex"]


def old_favorite_children(graph, comm, speed=1.0, threshold=0.1, method="highs-ipm"):
    """rlplace.placers.baechi.favorite_children at commit 7d5ac79 (the same LP, SciPy's
    linprog), returning the favourites and the LP optimum in seconds."""
    n = graph.num_ops
    fav = np.full(n, -1, dtype=np.int64)
    if graph.num_edges == 0:
        return fav, float(graph.compute_time.max(initial=0.0)) / speed
    pairs, inverse = np.unique(graph.edge_src * n + graph.edge_dst, return_inverse=True)
    src, dst = pairs // n, pairs % n
    m = len(pairs)
    c = np.zeros(m)
    np.maximum.at(c, inverse.reshape(-1), comm.transfer_time(graph.tensor_bytes[graph.edge_tensor]))
    p = graph.compute_time / speed
    scale = max(float(p.max()), float(c.max()))
    if scale <= 0:
        return fav, 0.0
    p, c = p / scale, c / scale
    outdeg, indeg = np.bincount(src, minlength=n), np.bincount(dst, minlength=n)
    sinks = np.flatnonzero(outdeg == 0)
    multi_out, multi_in = np.flatnonzero(outdeg >= 2), np.flatnonzero(indeg >= 2)
    s0, w = m, m + n
    e = np.arange(m)
    out_row = np.full(n, -1)
    out_row[multi_out] = m + len(sinks) + np.arange(len(multi_out))
    in_row = np.full(n, -1)
    in_row[multi_in] = m + len(sinks) + len(multi_out) + np.arange(len(multi_in))
    eo, ei = e[out_row[src] >= 0], e[in_row[dst] >= 0]
    rows = np.concatenate([e, e, e, m + np.arange(len(sinks)), m + np.arange(len(sinks)),
                           out_row[src[eo]], in_row[dst[ei]]])
    cols = np.concatenate([s0 + src, s0 + dst, e, s0 + sinks, np.full(len(sinks), w), eo, ei])
    vals = np.concatenate([np.ones(m), -np.ones(m), c, np.ones(len(sinks)), -np.ones(len(sinks)),
                           -np.ones(len(eo)), -np.ones(len(ei))])
    nrows = m + len(sinks) + len(multi_out) + len(multi_in)
    a_ub = sp.csr_matrix((vals, (rows, cols)), shape=(nrows, m + n + 1))
    b_ub = np.concatenate([-p[src], -p[sinks], 1.0 - outdeg[multi_out], 1.0 - indeg[multi_in]])
    objective = np.zeros(m + n + 1)
    objective[w] = 1.0
    upper = np.full(m + n + 1, np.inf)
    upper[:m] = 1.0
    res = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=np.column_stack([np.zeros(m + n + 1), upper]),
                  method=method)
    has_parent = np.zeros(n, dtype=bool)
    for k in np.flatnonzero(res.x[:m] < threshold).tolist():
        i, j = int(src[k]), int(dst[k])
        if fav[i] < 0 and not has_parent[j]:
            fav[i] = j
            has_parent[j] = True
    return fav, float(res.fun) * scale


def solver(variant: str):
    """favorite_children(graph, comm, speed, threshold) -> (favourites, LP objective (s), extra)."""
    kind, method = variant.split()
    if kind == "old":
        return lambda g, comm, speed, threshold: (*old_favorite_children(g, comm, speed, threshold, method), {})

    def new(g, comm, speed, threshold):
        lp = sct_lp.solve_sct_lp(g, comm, speed, method)
        fav = np.full(g.num_ops, -1, dtype=np.int64)
        has_parent = np.zeros(g.num_ops, dtype=bool)
        for k in np.flatnonzero(lp.x < threshold).tolist():  # sct_lp.favorite_children's rounding
            i, j = int(lp.src[k]), int(lp.dst[k])
            if fav[i] < 0 and not has_parent[j]:
                fav[i] = j
                has_parent[j] = True
        return fav, lp.makespan, {"rounds": lp.rounds, "columns": lp.columns, "pairs": len(lp.x)}
    return new


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def with_lp(variant: str):
    """m_sct's LP swapped for ``variant`` (baechi.favorite_children is looked up at call time)."""
    fn = solver(variant)
    return lambda g, comm, speed=1.0, threshold=0.1, method=None: fn(g, comm, speed, threshold)[0]


def run_m_sct(variant: str, graph, cluster, options: dict, repeats: int = 1) -> dict:
    saved = baechi.favorite_children
    baechi.favorite_children = with_lp(variant)
    try:
        elapsed, placement = timed(lambda: make_placer("m_sct", **options).place(graph, cluster), repeats)
    finally:
        baechi.favorite_children = saved
    return {"placement_time": elapsed, "step_time": simulate(graph, cluster, placement).step_time}


def pairs_of(fav: np.ndarray) -> set[tuple[int, int]]:
    return {(int(i), int(fav[i])) for i in np.flatnonzero(fav >= 0)}


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000, 36000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="sizes 1000 and 2000, one repeat")
    args = parser.parse_args()
    sizes, repeats = ([1000, 2000], 1) if args.quick else (args.sizes, args.repeats)
    cluster = load_preset("baechi_2080")
    comm, speed = cluster.comm, float(cluster.speeds.mean())
    load_before = os.getloadavg()

    warm = layered(300, seed=1)  # numba compilation, HiGHS start-up
    for variant in VARIANTS:
        solver(variant)(warm, comm, speed, 0.1)
    run_m_sct("new simplex", warm, cluster, OFF)

    graphs = [(f"layered{n}", layered(n, seed=0)) for n in sizes]
    if default_profile_path().is_file():
        graphs.insert(0, ("baechi_gnmt", load_baechi_profile()))

    timing, quality = [], []
    for name, graph in tqdm(graphs, desc="graphs"):
        favs = {}
        for variant in VARIANTS:
            fn = solver(variant)
            elapsed, (fav, objective, extra) = timed(lambda: fn(graph, comm, speed, 0.1), repeats)
            favs[variant] = pairs_of(fav)
            timing.append({"graph": name, "ops": graph.num_ops, "variant": variant, "lp_time": elapsed,
                           "objective": objective, **extra})
        reference = favs["old highs-ipm"]
        etf = {key: simulate(graph, cluster, make_placer("m_etf", **opts).place(graph, cluster)).step_time
               for key, opts in (("off", OFF), ("on", {}))}
        for variant in VARIANTS:
            row = {"graph": name, "variant": variant, "favourites": len(favs[variant]),
                   "common_with_old_ipm": len(favs[variant] & reference), "m_etf_off": etf["off"],
                   "m_etf_on": etf["on"]}
            for key, opts in (("off", OFF), ("on", {})):
                result = run_m_sct(variant, graph, cluster, opts, repeats if variant == "new simplex" else 1)
                row[f"step_{key}"] = result["step_time"]
                row[f"placement_{key}"] = result["placement_time"]
            quality.append(row)

    meta = {"load_before": load_before, "load_after": os.getloadavg(), "repeats": repeats,
            "highspy": _version("highspy"), "scipy": scipy.__version__}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_sct_lp.json").write_text(json.dumps({"meta": meta, "timing": timing, "quality": quality},
                                                          indent=1))
    text = report(meta, timing, quality)
    (RESULTS / "bench_sct_lp.md").write_text(text)
    print(text)


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def report(meta: dict, timing: list[dict], quality: list[dict]) -> str:
    graphs = list(dict.fromkeys(r["graph"] for r in timing))
    load = " → ".join(f"{a:.1f}" for a in (meta["load_before"][0], meta["load_after"][0]))
    lines = ["# m-SCT's favourite-child LP", "",
             f"Cluster `baechi_2080` (4 devices, sequential transfers). highspy {meta['highspy']}, "
             f"SciPy {meta['scipy']}. This 2-core machine, shared: 1-minute load average {load}. "
             f"Times are medians of {meta['repeats']} calls.", "",
             "## LP time (s): favorite_children, building, solving and rounding", "",
             "| graph | ops | pairs | old highs-ipm | old highs-ds | new ipm | new simplex "
             "| simplex rounds | pairs kept | objective vs old highs-ipm (ipm, simplex) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for g in graphs:
        rows = {r["variant"]: r for r in timing if r["graph"] == g}
        ref = rows["old highs-ipm"]["objective"]
        simplex, ipm = rows["new simplex"], rows["new ipm"]
        rel = ", ".join(f"{(rows[v]['objective'] - ref) / ref:+.1e}" for v in ("new ipm", "new simplex"))
        lines.append(f"| {g} | {simplex['ops']} | {simplex['pairs']} | "
                     + " | ".join(f"{rows[v]['lp_time']:.3f}" for v in VARIANTS)
                     + f" | {simplex['rounds']} | {simplex['columns']} ({simplex['columns'] / max(simplex['pairs'], 1):.0%}) | {rel} |")
    lines += ["", "## Favourite children and m-SCT's simulated step time", "",
              "Step times in ms (simulator) with the graph optimizer off / on; m_sct's placement "
              f"time (s) in brackets (new simplex: median of {meta['repeats']}). \"common\": "
              "favourite pairs shared with old highs-ipm (today's default).", "",
              "| graph | LP | favourites | common | m_sct off | m_sct on | m_etf off | m_etf on |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in quality:
        lines.append(f"| {r['graph']} | {r['variant']} | {r['favourites']} | {r['common_with_old_ipm']} | "
                     f"{r['step_off'] * 1e3:.2f} ({r['placement_off']:.2f}) | "
                     f"{r['step_on'] * 1e3:.2f} ({r['placement_on']:.2f}) | "
                     f"{r['m_etf_off'] * 1e3:.2f} | {r['m_etf_on'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
