"""Algorithmic placers: placement time vs graph size, quality on the real GNMT profile and on a
layered DAG, and the smallest memory each needs (issue 4's benchmark).

    .venv/bin/python experiments/bench_placers.py [--sizes 1000 5000 20000 36000] [--quick]

Every placement is judged by the simulator, never by the placer's own estimate. Writes
experiments/results/bench_placers.md, bench_placers.json and placement_time.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.cluster import Cluster, load_preset  # noqa: E402
from rlplace.graph import OpGraph  # noqa: E402
from rlplace.placers import available_placers, make_placer  # noqa: E402
from rlplace.sim import simulate  # noqa: E402
from rlplace.apps.tables.common import OPTIMIZER_OFF, OPTIMIZER_ON, run_placer  # noqa: E402
from rlplace.zoo import default_profile_path, layered, load_baechi_profile  # noqa: E402

RESULTS = Path(__file__).parent / "results"

HEURISTICS = ["m_topo", "m_etf", "m_sct", "order_place", "celeritas", "heft", "metis", "expert"]
BASELINES = ["single", "round_robin", "random"]


def placers() -> list[str]:
    known = set(available_placers())
    return [name for name in BASELINES + HEURISTICS if name in known]


def timing_table(sizes: list[int], cluster: Cluster) -> list[dict]:
    rows = []
    for n in tqdm(sizes, desc="sizes"):
        graph = layered(n, seed=0)
        for name in placers():
            for variant, options in (("off", OPTIMIZER_OFF.get(name)), ("on", OPTIMIZER_ON.get(name))):
                if variant == "on" and options is None:
                    continue
                rows.append({**run_placer(name, graph, cluster, options), "optimizer": variant if options else "-"})
    return rows


def smallest_memory_fraction(name: str, graph: OpGraph, cluster: Cluster, options: dict | None,
                             tolerance: float = 0.01) -> float | None:
    """The smallest fraction of ``single``'s simulated peak memory (per device) at which the
    placer still places without OOM, by bisection to ``tolerance`` (assuming that more memory
    never hurts); None if it runs out of memory even at 1.0."""
    single_peak = simulate(graph, cluster, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0]

    def fits(fraction: float) -> bool:
        return not run_placer(name, graph, cluster.with_memory(int(fraction * single_peak)), options)["oom"]

    if not fits(1.0):
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000, 36000])
    parser.add_argument("--quick", action="store_true", help="sizes 1000 and 5000 only")
    args = parser.parse_args()
    sizes = [1000, 5000] if args.quick else args.sizes
    cluster = load_preset("baechi_2080")
    RESULTS.mkdir(parents=True, exist_ok=True)

    timing = timing_table(sizes, cluster)
    quality = []
    memory = []
    graphs = [layered(2000, seed=0, compute_mean=5e-3, output_bytes_mean=2e5)]
    if default_profile_path().is_file():
        graphs.insert(0, load_baechi_profile())
    for graph in graphs:
        for name in tqdm(placers(), desc=f"quality on {graph.name}"):
            for options in ([OPTIMIZER_OFF[name], OPTIMIZER_ON[name]] if name in OPTIMIZER_OFF else [None]):
                quality.append(run_placer(name, graph, cluster, options))
                if name not in BASELINES:
                    memory.append({"placer": name, "graph": graph.name, "options": options or {},
                                   "fraction": smallest_memory_fraction(name, graph, cluster, options)})

    (RESULTS / "bench_placers.json").write_text(json.dumps(
        {"timing": timing, "quality": quality, "memory": memory}, indent=1))
    text = report(timing, quality, memory, sizes)
    (RESULTS / "bench_placers.md").write_text(text)
    plot_timing(timing, RESULTS / "placement_time.png")
    print(text)


def report(timing: list[dict], quality: list[dict], memory: list[dict], sizes: list[int]) -> str:
    def label(row):
        return row["placer"] + ("" if row.get("optimizer", "-") == "-" else f" (optimizer {row['optimizer']})")

    lines = ["# Algorithmic placers", "",
             "Cluster `baechi_2080` (4 × 8 GiB, sequential transfers, 134 µs + 0.0001754 µs/B). "
             "Placement time on this 2-core machine; step times from the simulator.", "",
             "## Placement time (s) vs graph size (layered random DAGs)", "",
             "| placer | " + " | ".join(f"{n} ops" for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    labels = list(dict.fromkeys(label(r) for r in timing))
    for lab in labels:
        cells = [next((f"{r['placement_time']:.3f}" for r in timing if label(r) == lab and r["ops"] == n), "")
                 for n in sizes]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    for graph in dict.fromkeys(r["graph"] for r in quality):
        rows = [r for r in quality if r["graph"] == graph]
        single = next(r["step_time"] for r in rows if r["placer"] == "single")
        lines += ["", f"## Simulated step time on {graph}", "",
                  "| placer | options | step time (ms) | vs single | OOM | placement time (s) |",
                  "|---|---|---:|---:|---|---:|"]
        for r in rows:
            opts = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
            lines.append(f"| {r['placer']} | {opts} | {r['step_time'] * 1e3:.3f} | "
                         f"{r['step_time'] / single:.2f}× | {'yes' if r['oom'] else 'no'} | {r['placement_time']:.3f} |")
    lines += ["", "## Smallest memory per device without OOM (fraction of single's simulated peak)", "",
              "| placer | graph | options | fraction |", "|---|---|---|---:|"]
    for r in memory:
        opts = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
        frac = "OOM at 1.0" if r["fraction"] is None else f"{r['fraction']:.2f}"
        lines.append(f"| {r['placer']} | {r['graph']} | {opts} | {frac} |")
    return "\n".join(lines) + "\n"


def plot_timing(timing: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for lab in dict.fromkeys(r["placer"] + ("" if r["optimizer"] == "-" else f" ({r['optimizer']})") for r in timing):
        rows = [r for r in timing if r["placer"] + ("" if r["optimizer"] == "-" else f" ({r['optimizer']})") == lab]
        ax.plot([r["ops"] for r in rows], [max(r["placement_time"], 1e-5) for r in rows], marker="o", label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ops")
    ax.set_ylabel("placement time (s)")
    ax.set_title("Placement time vs graph size (4 devices)")
    ax.legend(fontsize="x-small", ncol=2)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
