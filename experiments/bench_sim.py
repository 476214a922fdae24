"""Simulator speed: ops simulated per second on layered random DAGs of 10,000 and 50,000 ops
(and the real 2,828-op GNMT profile when present), 4 devices, both comm modes; one placement per
``simulate`` call, and many per ``simulate_many`` call (the batched entry point).

    .venv/bin/python experiments/bench_sim.py [--repeat 20]

Writes experiments/results/bench_sim.md (and prints it). The first call of the simulator
compiles its numba kernel; that is excluded and reported separately.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from rlplace.cluster import Cluster, CommModel
from rlplace.sim import simulate, simulate_many
from rlplace.zoo import default_profile_path, layered, load_baechi_profile

RESULTS = Path(__file__).parent / "results" / "bench_sim.md"


def bench(graph, mode: str, repeat: int) -> dict:
    cluster = Cluster.homogeneous(4, 8 * 2**30, CommModel(134e-6, 1.754e-10, mode))
    placement = np.random.default_rng(0).integers(0, 4, graph.num_ops)
    simulate(graph, cluster, placement)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = simulate(graph, cluster, placement)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    batch = np.random.default_rng(1).integers(0, 4, (16, graph.num_ops))
    simulate_many(graph, cluster, batch[:1])  # warm-up
    batched = []
    for _ in range(max(3, repeat // 4)):
        start = time.perf_counter()
        simulate_many(graph, cluster, batch)
        batched.append((time.perf_counter() - start) / len(batch))
    per_placement = statistics.median(batched)
    return {"graph": graph.name, "ops": graph.num_ops, "edges": graph.num_edges, "mode": mode,
            "median_s": median, "ops_per_s": graph.num_ops / median, "transfers": result.num_transfers,
            "batched_s": per_placement, "batched_ops_per_s": graph.num_ops / per_placement}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    start = time.perf_counter()
    simulate(layered(10, seed=0), Cluster.homogeneous(2, 10**9), np.zeros(10, dtype=int))
    first_call = time.perf_counter() - start

    graphs = [layered(10_000, seed=0), layered(50_000, seed=0)]
    if default_profile_path().is_file():
        graphs.append(load_baechi_profile())
    rows = [bench(g, mode, args.repeat) for g in graphs for mode in ("parallel", "sequential")]

    lines = [
        "# Execution simulator speed",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; random placement on 4 devices; median of {args.repeat} runs.",
        f"First call (numba compile or cache load): {first_call:.2f} s.",
        "",
        "| graph | ops | edges | comm | transfers | time per step (ms) | ops/s | batched: ms per placement | batched ops/s |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
        *(f"| {r['graph']} | {r['ops']} | {r['edges']} | {r['mode']} | {r['transfers']} | "
          f"{r['median_s'] * 1e3:.2f} | {r['ops_per_s']:,.0f} | {r['batched_s'] * 1e3:.2f} | "
          f"{r['batched_ops_per_s']:,.0f} |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
