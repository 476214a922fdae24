"""Why the simulator's throughput falls on large graphs (issue 15 item 2): CPU time per op of
``simulate`` on layered DAGs of 1,000-100,000 ops (the same generator, so the same work per
op), beside the bytes of the execution model's state (``rlplace.schedule.new_model``: graph
arrays, per-op, per-tensor and per-device state) and this machine's cache sizes. Random
placements on baechi_2080, medians of 3 runs of about 2M simulated ops each. Writes
experiments/results/sim_cache.{md,json} (~2 min).

    .venv/bin/python experiments/sim_cache.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlplace.cluster import load_preset  # noqa: E402
from rlplace.schedule.model import new_model  # noqa: E402
from rlplace.sim import simulate  # noqa: E402
from rlplace.zoo import layered  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (1000, 2000, 5000, 10000, 20000, 50000, 100000)
OPS_PER_RUN = 2_000_000


def state_bytes(model) -> int:
    """Bytes of every array in the model (nested named tuples of arrays)."""
    if isinstance(model, np.ndarray):
        return model.nbytes
    if isinstance(model, tuple):
        return sum(state_bytes(part) for part in model)
    return 0


def per_op_seconds(n: int) -> float:
    graph, cluster = layered(n, seed=0), load_preset("baechi_2080")
    rng = np.random.default_rng(0)
    placements = [rng.integers(0, cluster.num_devices, n) for _ in range(4)]
    simulate(graph, cluster, placements[0])
    runs = []
    for _ in range(3):
        reps = max(1, OPS_PER_RUN // n)
        start = time.process_time()
        for r in range(reps):
            simulate(graph, cluster, placements[r % 4])
        runs.append((time.process_time() - start) / reps / n)
    return statistics.median(runs)


def caches() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return "; ".join(line.split(":")[0] + ":" + line.split(":")[1].strip().split(" (")[0]
                     for line in out.splitlines() if line.startswith(("L1d", "L2", "L3")))


def main() -> None:
    cluster = load_preset("baechi_2080")
    rows = []
    for n in SIZES:
        model_bytes = state_bytes(new_model(layered(n, seed=0), cluster))
        seconds = per_op_seconds(n)
        rows.append({"ops": n, "state_bytes": model_bytes, "seconds_per_op": seconds})
        print(rows[-1], flush=True)
    base = rows[0]["seconds_per_op"]
    lines = ["# Simulator time per op against the size of its state", "",
             f"`experiments/sim_cache.py`: CPU time of `simulate` per op on layered DAGs (random placements, "
             f"baechi_2080), median of 3 runs; state = every array of the execution model. Machine: "
             f"{platform.machine()}, caches {caches()}; load average {os.getloadavg()[0]:.1f} at the end "
             "(other jobs share the 2 cores and the L3 cache).", "",
             "| ops | state (MB) | ns per op | ops/s | vs 1,000 ops |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['ops']:,} | {r['state_bytes'] / 1e6:.2f} | {r['seconds_per_op'] * 1e9:.0f} | "
              f"{1 / r['seconds_per_op']:,.0f} | {r['seconds_per_op'] / base:.2f}× |" for r in rows]
    (RESULTS / "sim_cache.json").write_text(json.dumps({"caches": caches(), "rows": rows}, indent=1))
    (RESULTS / "sim_cache.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
