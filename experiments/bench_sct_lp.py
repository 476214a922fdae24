"""m-SCT's favourite-child LP: time vs graph size for rlplace.placers.baechi.sct_lp's two methods, and
what each LP solution does to the favourite children and to m-SCT's simulated step time.

    .venv/bin/python experiments/bench_sct_lp.py [--sizes 1000 5000 20000 36000] [--repeats 3] [--quick]

Layered random DAGs (rlplace.zoo.layered, seed 0) and the Baechi GNMT profile, on the
``baechi_2080`` cluster (4 devices, sequential transfers). ``simplex`` (the default: constraint
generation, warm-started dual simplex) and ``ipm`` (the whole LP by HiGHS' IPX, no crossover).
LP times are medians of ``--repeats`` calls of each (building, solving and rounding); m_sct runs
with ``lp_method`` set to each. Writes experiments/results/bench_sct_lp.md and bench_sct_lp.json.

The recorded run (2026-11-23) also timed the LP it replaced, SciPy's linprog (HiGHS ``highs-ipm``
and ``highs-ds``) on a copy of ``favorite_children`` as of commit 7d5ac79; that copy is gone
(experiments/studies.md, "m-SCT's LP before sct_lp").
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import highspy  # noqa: F401  (its version goes into the report)
import numpy as np
from tqdm import tqdm

from rlplace.errors import ArgumentParser, run_script
from rlplace.cluster import load_preset
from rlplace.placers import make_placer
from rlplace.placers.baechi import sct_lp
from rlplace.sim import simulate
from rlplace.zoo import default_profile_path, layered, load_baechi_profile

RESULTS = Path(__file__).parent / "results"
OFF = {"coplacement": False, "fusion": False, "forward_only": False}
VARIANTS = ["ipm", "simplex"]
DEFAULT = "simplex"   # what m_sct's default lp_method ("auto") takes on these graphs (no op with over DENSE_ROW pairs)


def solve(variant: str, g, comm, speed: float, threshold: float):
    """(favourites, LP objective (s), extra) of ``sct_lp`` with ``variant``."""
    lp = sct_lp.solve_sct_lp(g, comm, speed, variant)
    fav = np.full(g.num_ops, -1, dtype=np.int64)
    has_parent = np.zeros(g.num_ops, dtype=bool)
    for k in np.flatnonzero(lp.x < threshold).tolist():  # sct_lp.favorite_children's rounding
        i, j = int(lp.src[k]), int(lp.dst[k])
        if fav[i] < 0 and not has_parent[j]:
            fav[i] = j
            has_parent[j] = True
    return fav, lp.makespan, {"rounds": lp.rounds, "columns": lp.columns, "pairs": len(lp.x)}


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def run_m_sct(variant: str, graph, cluster, options: dict, repeats: int = 1) -> dict:
    elapsed, placement = timed(lambda: make_placer("m_sct", lp_method=variant, **options).place(graph, cluster),
                               repeats)
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
        solve(variant, warm, comm, speed, 0.1)
    run_m_sct(DEFAULT, warm, cluster, OFF)

    graphs = [(f"layered{n}", layered(n, seed=0)) for n in sizes]
    if default_profile_path().is_file():
        graphs.insert(0, ("baechi_gnmt", load_baechi_profile()))

    timing, quality = [], []
    for name, graph in tqdm(graphs, desc="graphs"):
        favs = {}
        for variant in VARIANTS:
            elapsed, (fav, objective, extra) = timed(lambda: solve(variant, graph, comm, speed, 0.1), repeats)
            favs[variant] = pairs_of(fav)
            timing.append({"graph": name, "ops": graph.num_ops, "variant": variant, "lp_time": elapsed,
                           "objective": objective, **extra})
        reference = favs[DEFAULT]
        etf = {key: simulate(graph, cluster, make_placer("m_etf", **opts).place(graph, cluster)).step_time
               for key, opts in (("off", OFF), ("on", {}))}
        for variant in VARIANTS:
            row = {"graph": name, "variant": variant, "favourites": len(favs[variant]),
                   "common_with_default": len(favs[variant] & reference), "m_etf_off": etf["off"],
                   "m_etf_on": etf["on"]}
            for key, opts in (("off", OFF), ("on", {})):
                result = run_m_sct(variant, graph, cluster, opts, repeats if variant == DEFAULT else 1)
                row[f"step_{key}"] = result["step_time"]
                row[f"placement_{key}"] = result["placement_time"]
            quality.append(row)

    meta = {"load_before": load_before, "load_after": os.getloadavg(), "repeats": repeats,
            "highspy": _version("highspy")}
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
             f"Cluster `baechi_2080` (4 devices, sequential transfers). highspy {meta['highspy']}. "
             f"This machine, shared: 1-minute load average {load}. Times are medians of {meta['repeats']} calls.", "",
             "## LP time (s): favorite_children, building, solving and rounding", "",
             "| graph | ops | pairs | " + " | ".join(VARIANTS)
             + " | simplex rounds | pairs kept | objective, ipm vs simplex |",
             "|---|---:|---:|" + "---:|" * len(VARIANTS) + "---:|---:|---|"]
    for g in graphs:
        rows = {r["variant"]: r for r in timing if r["graph"] == g}
        simplex, ipm = rows["simplex"], rows["ipm"]
        ref = simplex["objective"]
        rel = f"{(ipm['objective'] - ref) / ref:+.1e}" if ref else "—"
        lines.append(f"| {g} | {simplex['ops']} | {simplex['pairs']} | "
                     + " | ".join(f"{rows[v]['lp_time']:.3f}" for v in VARIANTS)
                     + f" | {simplex['rounds']} | {simplex['columns']} ({simplex['columns'] / max(simplex['pairs'], 1):.0%}) | {rel} |")
    lines += ["", "## Favourite children and m-SCT's simulated step time", "",
              "Step times in ms (simulator) with the graph optimizer off / on; m_sct's placement "
              f"time (s) in brackets ({DEFAULT}: median of {meta['repeats']}). \"common\": "
              f"favourite pairs shared with {DEFAULT} (m_sct's default).", "",
              "| graph | LP | favourites | common | m_sct off | m_sct on | m_etf off | m_etf on |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in quality:
        lines.append(f"| {r['graph']} | {r['variant']} | {r['favourites']} | {r['common_with_default']} | "
                     f"{r['step_off'] * 1e3:.2f} ({r['placement_off']:.2f}) | "
                     f"{r['step_on'] * 1e3:.2f} ({r['placement_on']:.2f}) | "
                     f"{r['m_etf_off'] * 1e3:.2f} | {r['m_etf_on'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
