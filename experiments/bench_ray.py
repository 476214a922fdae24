"""Parallel evaluation on Ray workers (rlplace.distributed) on a local Ray instance of 2 CPUs.

1. Throughput of simulated evaluations of a 5,000-op layered DAG (4 devices): in-process
   (no Ray) and on 1 and 2 Ray workers, in batches of 8 placements (8 samples per policy step).
2. A slow backend (each evaluation sleeps 1 s, then simulates): wall time of one batch of 8
   samples on 1, 2 and 4 workers, against the ideal 8 s / N.

    .venv/bin/python experiments/bench_ray.py [--batches 40] [--repeat 2]

Writes experiments/results/bench_ray.md and .json (and prints the tables). Workers are started
and sent the graph by a warm-up batch that is not timed. The load average of the machine (other
processes share its 2 cores) is recorded with every measurement.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray

from rlplace.errors import ArgumentParser, run_script
from rlplace.backends import Backend, SimBackend
from rlplace.cluster import load_preset
from rlplace.distributed import RayBackend
from rlplace.placement import Placement
from rlplace.zoo import layered

RESULTS = Path(__file__).parent / "results"
BATCH = 8


@dataclass
class SleepyBackend(Backend):
    """The simulator after a fixed sleep: a stand-in for a real measurement."""

    delay: float = 1.0

    def evaluate(self, graph, cluster, placement):
        time.sleep(self.delay)
        return SimBackend().evaluate(graph, cluster, placement)


def load() -> float:
    return os.getloadavg()[0]


def placements(graph, cluster, count: int, seed: int) -> list[Placement]:
    rng = np.random.default_rng(seed)
    return [Placement(rng.integers(0, cluster.num_devices, graph.num_ops)) for _ in range(count)]


def throughput(graph, cluster, batches: int) -> list[dict]:
    """Placements per second, in-process and on 1 and 2 workers, batches of BATCH."""
    work = [placements(graph, cluster, BATCH, seed) for seed in range(batches)]
    rows = []
    sim = SimBackend()
    sim.evaluate(graph, cluster, work[0][0])  # numba kernel loaded
    before, start = load(), time.perf_counter()
    for batch in work:
        for p in batch:
            sim.evaluate(graph, cluster, p)
    rows.append(_row("in-process (no Ray)", 0, batches * BATCH, time.perf_counter() - start, before))
    for workers in (1, 2):
        with RayBackend("sim", workers=workers) as backend:
            backend.evaluate_batch(graph, cluster, work[0])  # warm-up: graph shipped, kernels loaded
            before, start = load(), time.perf_counter()
            for batch in work:
                backend.evaluate_batch(graph, cluster, batch)
            rows.append(_row("Ray", workers, batches * BATCH, time.perf_counter() - start, before))
    return rows


def _row(how: str, workers: int, count: int, seconds: float, load_before: float) -> dict:
    return {"how": how, "workers": workers, "placements": count, "seconds": seconds,
            "per_second": count / seconds, "ms_per_placement": 1e3 * seconds / count,
            "load_before": load_before, "load_after": load()}


def slow_backend(graph, cluster, delay: float, repeat: int) -> list[dict]:
    """Wall time of one batch of BATCH samples, each evaluation sleeping ``delay`` s."""
    work = placements(graph, cluster, BATCH, seed=1000)
    rows = []
    for workers in (1, 2, 4):
        with RayBackend(lambda: SleepyBackend(delay), workers=workers) as backend:
            backend.evaluate_batch(graph, cluster, work[:workers])  # warm-up: every worker has the graph
            walls, loads = [], []
            for _ in range(repeat):
                loads.append(load())
                start = time.perf_counter()
                backend.evaluate_batch(graph, cluster, work)
                walls.append(time.perf_counter() - start)
        wall = statistics.median(walls)
        ideal = BATCH * delay / workers
        rows.append({"workers": workers, "walls": walls, "wall": wall, "ideal": ideal,
                     "efficiency": ideal / wall, "load_before": loads, "load_after": load()})
    return [{**row, "speedup": rows[0]["wall"] / row["wall"]} for row in rows]


def markdown(meta: dict, fast: list[dict], slow: list[dict]) -> str:
    lines = ["# Parallel evaluation on Ray workers", "",
             f"Machine: {meta['machine']}, {meta['cpus']} CPUs, CPython {meta['python']}, Ray {meta['ray']}; "
             f"local Ray instance `ray.init(num_cpus=2)`; graph {meta['graph']} ({meta['ops']} ops, "
             f"{meta['edges']} edges), cluster {meta['cluster']}; random placements, batches of {BATCH}. "
             f"Load average (1 min) before and after each measurement in the tables: the 2 cores are "
             f"shared with other processes.", "",
             "## 1. Throughput of simulated evaluations (5,000-op graph)", "",
             "| evaluation | workers | placements | seconds | placements/s | ms per placement | load before → after |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in fast:
        lines.append(f"| {r['how']} | {r['workers'] or '–'} | {r['placements']} | {r['seconds']:.2f} | "
                     f"{r['per_second']:.0f} | {r['ms_per_placement']:.2f} | {r['load_before']:.1f} → {r['load_after']:.1f} |")
    lines += ["", f"## 2. Slow backend ({meta['delay']:g} s per evaluation), one batch of {BATCH} samples", "",
              f"| workers | wall (s), median | runs (s) | ideal {BATCH * meta['delay']:g} s / N | speedup vs 1 worker | ideal speedup | "
              "efficiency (ideal / wall) | load before runs → after |",
              "|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in slow:
        lines.append(f"| {r['workers']} | {r['wall']:.2f} | {', '.join(f'{w:.2f}' for w in r['walls'])} | "
                     f"{r['ideal']:.2f} | {r['speedup']:.2f} | {r['workers']} | {100 * r['efficiency']:.0f}% | "
                     f"{', '.join(f'{x:.1f}' for x in r['load_before'])} → {r['load_after']:.1f} |")
    local, one, two = fast
    lines += ["", f"Ray's round trip costs {one['ms_per_placement'] - local['ms_per_placement']:.2f} ms per evaluation "
              f"(1 worker against in-process), next to {local['ms_per_placement']:.2f} ms of simulation: 2 workers "
              f"give {two['per_second'] / local['per_second']:.2f}× the in-process throughput. With "
              f"{meta['delay']:g}-s evaluations the speedup is "
              + ", ".join(f"{r['speedup']:.2f} of {r['workers']}" for r in slow[1:]) + " (ideal N)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--delay", type=float, default=1.0)
    args = parser.parse_args()

    graph, cluster = layered(5000, seed=0), load_preset("baechi_2080")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "ray": ray.__version__, "graph": graph.name, "ops": graph.num_ops, "edges": graph.num_edges,
            "cluster": cluster.name, "delay": args.delay}
    fast = throughput(graph, cluster, args.batches)
    slow = slow_backend(graph, cluster, args.delay, args.repeat)
    ray.shutdown()
    text = markdown(meta, fast, slow)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_ray.md").write_text(text)
    (RESULTS / "bench_ray.json").write_text(json.dumps({"meta": meta, "throughput": fast, "slow": slow}, indent=1))
    print(text)


if __name__ == "__main__":
    run_script(main)
