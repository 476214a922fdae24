"""Simulator speed: ops simulated per second on layered random DAGs of 10,000 and 50,000 ops
(and the real 2,828-op GNMT profile when present), 4 devices, both comm modes; one placement per
``simulate`` call and 16 per ``simulate_many`` call (the batched entry point); and today's
simulator against an older one (default 124cfbc, before the shared execution model), loaded with
``git show`` and alternated with today's in this process.

    .venv/bin/python experiments/bench_sim.py [--rounds 7] [--before 124cfbc]

Times are CPU time of this thread (``time.thread_time``): the machine is shared, so wall time
measures the other jobs too. Each round takes the minimum over a few calls of each simulator in
turn; the table gives medians over rounds and the median of the per-round ratios. Writes
experiments/results/bench_sim.md (and prints it). The first call of the simulator compiles its
numba kernel (or loads it from the cache); that is excluded and reported separately.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.cluster import Cluster, CommModel  # noqa: E402
from rlplace.sim import simulate, simulate_many  # noqa: E402
from rlplace.zoo import default_profile_path, layered, load_baechi_profile  # noqa: E402

from experiments.before import load_module_at  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "bench_sim.md"
BEFORE = "124cfbc"  # the simulator before the shared execution model (rlplace/schedule/)
BATCH = 16


def cpu_time(call, repeat: int) -> float:
    """The least CPU time of ``repeat`` calls (s)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return best


def bench(graph, mode: str, rounds: int, before) -> dict:
    """Seconds per placement of ``BATCH`` random placements: one ``simulate`` call each, today's
    and ``before``'s, and one ``simulate_many`` call for all."""
    cluster = Cluster.homogeneous(4, 8 * 2**30, CommModel(134e-6, 1.754e-10, mode))
    batch = np.random.default_rng(0).integers(0, 4, (BATCH, graph.num_ops))
    results = [simulate(graph, cluster, row) for row in batch]  # warm-up
    if [before.simulate(graph, cluster, row).step_time for row in batch] != [r.step_time for r in results] \
            or not np.array_equal(simulate_many(graph, cluster, batch).step_time, [r.step_time for r in results]):
        raise RuntimeError(f"{graph.name} {mode}: the simulators disagree")
    calls = {"today": lambda: [simulate(graph, cluster, row) for row in batch],
             "before": lambda: [before.simulate(graph, cluster, row) for row in batch],
             "batched": lambda: simulate_many(graph, cluster, batch)}
    repeat = max(2, 200_000 // (graph.num_ops * BATCH))
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for key, call in calls.items():
            times[key].append(cpu_time(call, repeat) / BATCH)
    today, old, batched = (statistics.median(times[k]) for k in calls)
    return {"graph": graph.name, "ops": graph.num_ops, "edges": graph.num_edges, "mode": mode,
            "transfers": round(statistics.mean(r.num_transfers for r in results)), "today_s": today,
            "before_s": old, "batched_s": batched,
            "ratio": statistics.median(t / b for t, b in zip(times["today"], times["before"])),
            "batched_ratio": statistics.median(b / t for t, b in zip(times["today"], times["batched"]))}


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", default=BEFORE)
    args = parser.parse_args()

    start = time.perf_counter()
    simulate(layered(10, seed=0), Cluster.homogeneous(2, 10**9), np.zeros(10, dtype=int))
    first_call = time.perf_counter() - start

    graphs = [layered(10_000, seed=0), layered(50_000, seed=0)]
    if default_profile_path().is_file():
        graphs.append(load_baechi_profile())
    with tempfile.TemporaryDirectory() as work:
        before = load_module_at(args.before, "rlplace/sim.py", Path(work))
        rows = [bench(g, mode, args.rounds, before) for g in graphs for mode in ("parallel", "sequential")]

    lines = [
        "# Execution simulator speed",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; {BATCH} random placements on 4 devices, simulated one per call "
        f"(today's simulator and {args.before}'s) and all in one `simulate_many` call. CPU time of this "
        f"thread per placement, each round the least of a few runs, medians over {args.rounds} rounds "
        f"alternating the three in one process; ratios are medians of the per-round ratios.",
        f"First call (numba compile or cache load): {first_call:.2f} s.",
        "",
        f"| graph | ops | edges | comm | transfers (mean) | time per step (ms) | ops/s | {args.before} (ms) | "
        f"today / {args.before} | batched ({BATCH}): ms per placement | batched ops/s | batched / single |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(f"| {r['graph']} | {r['ops']} | {r['edges']} | {r['mode']} | {r['transfers']} | "
          f"{r['today_s'] * 1e3:.2f} | {r['ops'] / r['today_s']:,.0f} | {r['before_s'] * 1e3:.2f} | "
          f"{r['ratio']:.2f} | {r['batched_s'] * 1e3:.2f} | {r['ops'] / r['batched_s']:,.0f} | "
          f"{r['batched_ratio']:.2f} |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    run_script(main)
