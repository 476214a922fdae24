"""Fidelity of the simulator against real TensorFlow (issue 3, item 7): CPU-sized GNMT and
Inception-V3 on 2 logical CPU devices; 30+ placements each, measured with TFBackend and
simulated with the profiled costs and the fitted CommModel; Spearman rank correlation and median
relative error of simulated vs measured step time, and a scatter plot.

    .venv/bin/python experiments/fidelity.py [--models gnmt inception_v3] [--random 12]

Placements: single (each device), expert, round_robin, every other registered placer (the
heuristics, with default options), ``random`` (seeds 0..N-1), and two families that spread the
step times: ``random_p`` (each colocation unit on device 1 with probability p) and ``prefix_f``
(the first fraction f of the units, in topological order, on device 0, the rest on device 1).

Conditions shared by profile and measurement: one thread inside an op (``intra_op_threads=1``);
the profile runs one op at a time on one device; TFBackend gives the two logical devices two
inter-op threads. Writes experiments/results/fidelity.{json,md,png}.

Two simulations per placement: (1) the issue's protocol, the CommModel fitted by the
interconnect benchmark (``parallel`` transfers); (2) a CommModel calibrated in the graph: the
latency and mode (grid search) that best fit three calibration placements (``CALIBRATION``,
which are then left out of that row's scores).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
CONF = Path(__file__).resolve().parents[1] / "conf"
FIXED = ("single", "random", "round_robin", "expert")
SEARCH = ("local_search", "annealing")  # search placers: not one placement of their own
CALIBRATION = ("single_0", "round_robin", "random_s0")
LATENCIES = np.geomspace(1e-6, 1e-4, 41)


def model_knobs(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{name}.yaml"))


def placements(graph, cluster, num_random: int) -> dict:
    from rlplace.coarsen import CoarseGraph
    from rlplace.placers import available_placers, make_placer

    out = {"single_0": make_placer("single", device=0).place(graph, cluster),
           "single_1": make_placer("single", device=1).place(graph, cluster),
           "expert": make_placer("expert").place(graph, cluster),
           "round_robin": make_placer("round_robin").place(graph, cluster)}
    for name in available_placers():
        if name not in FIXED + SEARCH:
            out[name] = make_placer(name, seed=0).place(graph, cluster)
    for seed in range(num_random):
        out[f"random_s{seed}"] = make_placer("random", seed=seed).place(graph, cluster)
    units = CoarseGraph.colocation(graph)
    rng = np.random.default_rng(0)
    for p in (0.02, 0.05, 0.1, 0.15, 0.3):
        out[f"random_p{p}"] = units.expand((rng.random(units.num_groups) < p).astype(np.int64))
    for f in (0.1, 0.25, 0.5, 0.75, 0.9):
        out[f"prefix_{f}"] = units.expand((np.arange(units.num_groups) >= f * units.num_groups).astype(np.int64))
    return out


def family(label: str) -> str:
    for prefix in ("single", "random_p", "random_s", "prefix"):
        if label.startswith(prefix):
            return prefix
    return label if label in ("expert", "round_robin") else "heuristic"


def run_model(name: str, backend, comm, num_random: int, rounds: int) -> dict:
    from rlplace.cluster import Cluster
    from rlplace.sim import simulate
    from rlplace.tf.profile import profile
    from rlplace.zoo import build_tf_model

    knobs = model_knobs(name)
    backend.model = knobs
    start = time.perf_counter()
    prof = profile(build_tf_model(**knobs), warmup=5, steps=5, inter_op_threads=1, intra_op_threads=1)
    graph = prof.graph
    cluster = Cluster.homogeneous(2, 4 * 2**30, comm, prefix="/device:CPU:", name="local_cpu_fitted")
    profile_time = time.perf_counter() - start
    placed: dict = {}
    for label, p in placements(graph, cluster, num_random).items():
        if p not in placed.values():  # the same placement under another name: measured once
            placed[label] = p
    measured: dict[str, list] = {k: [] for k in placed}
    rng = np.random.default_rng(1)
    for _ in range(rounds):  # shuffled rounds: a drift in the machine's load hits all placements alike
        backend.clear_cache()
        for k in rng.permutation(list(placed)):
            measured[k].append(backend.evaluate(graph, cluster, placed[k]))
    rows = []
    for label, p in placed.items():
        sim, times = simulate(graph, cluster, p), [r.step_time for r in measured[label]]
        rows.append({"placement": label, "family": family(label), "simulated": sim.step_time,
                     "measured": float(np.median(times)), "measured_rounds": times,
                     "round_spread": float((max(times) - min(times)) / np.median(times)),
                     "num_transfers": measured[label][0].num_transfers, "ops_on_1": int(p.device_of.sum())})
    calibrated = _calibrate(graph, placed, rows)
    for r in rows:
        c = Cluster.homogeneous(2, 4 * 2**30, calibrated["comm"], prefix="/device:CPU:")
        r["simulated_calibrated"] = simulate(graph, c, placed[r["placement"]]).step_time
    real_t = np.array([r["measured"] for r in rows])
    multi = np.array([r["ops_on_1"] not in (0, graph.num_ops) for r in rows])
    held_out = np.array([r["placement"] not in CALIBRATION for r in rows])
    scores = {"fitted": _scores(np.array([r["simulated"] for r in rows]), real_t, multi),
              "calibrated": _scores(np.array([r["simulated_calibrated"] for r in rows])[held_out],
                                    real_t[held_out], multi[held_out])}
    calibrated["comm"] = vars(calibrated["comm"])
    return {"model": name, "knobs": knobs, "ops": graph.num_ops, "placements": len(rows),
            "profile": {"step_time": prof.step_time, "compute_sum": float(graph.compute_time.sum()),
                        "critical_path": graph.critical_path(), "seconds": profile_time},
            **scores["fitted"], "calibrated": {**calibrated, **scores["calibrated"]},
            "round_spread_median": float(np.median([r["round_spread"] for r in rows])),
            "transfer_fit": _transfer_fit(rows, multi), "rows": rows}


def _scores(sim_t: np.ndarray, real_t: np.ndarray, multi: np.ndarray) -> dict:
    from scipy.stats import spearmanr

    return {"spearman": float(spearmanr(sim_t, real_t).statistic),
            "median_relative_error": float(np.median(np.abs(sim_t - real_t) / real_t)),
            "spearman_multi_device": float(spearmanr(sim_t[multi], real_t[multi]).statistic),
            "scored": int(len(sim_t))}


def _calibrate(graph, placed: dict, rows: list[dict]) -> dict:
    """The latency and transfer mode whose simulation best fits the calibration placements
    (least median |log(simulated / measured)|)."""
    from rlplace.cluster import Cluster, CommModel
    from rlplace.sim import simulate

    measured = {r["placement"]: r["measured"] for r in rows}
    best = None
    for mode in ("parallel", "sequential"):
        for latency in LATENCIES:
            cluster = Cluster.homogeneous(2, 4 * 2**30, CommModel(float(latency), 0.0, mode))
            err = np.median([abs(np.log(simulate(graph, cluster, placed[k]).step_time / measured[k]))
                             for k in CALIBRATION])
            if best is None or err < best[0]:
                best = (err, CommModel(float(latency), 0.0, mode))
    return {"comm": best[1], "calibration_error": float(best[0]), "calibration_set": list(CALIBRATION)}


def _transfer_fit(rows: list[dict], multi: np.ndarray) -> dict:
    """Least squares over the multi-device placements: measured - simulated ~ a + b * transfers,
    the part of the step time the simulator misses, per transfer."""
    x = np.array([r["num_transfers"] for r in rows], dtype=float)[multi]
    y = np.array([r["measured"] - r["simulated"] for r in rows])[multi]
    (b, a), *_ = np.linalg.lstsq(np.column_stack([x, np.ones_like(x)]), y, rcond=None)
    return {"intercept": float(a), "seconds_per_transfer": float(b)}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 10), squeeze=False)
    for col, res in enumerate(results):
        for row, (key, scores, what) in enumerate((
                ("simulated", res, "benchmark-fitted CommModel"),
                ("simulated_calibrated", res["calibrated"], "CommModel calibrated in the graph"))):
            ax = axes[row][col]
            for fam in sorted({r["family"] for r in res["rows"]}):
                rs = [r for r in res["rows"] if r["family"] == fam]
                ax.scatter([r[key] * 1e3 for r in rs], [r["measured"] * 1e3 for r in rs], label=fam, s=24)
            values = [v for r in res["rows"] for v in (r[key], r["measured"])]
            lo, hi = min(values) * 1e3 * 0.8, max(values) * 1e3 * 1.2
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
            ax.set(xscale="log", yscale="log", xlabel=f"simulated step time (ms), {what}",
                   ylabel="measured step time (ms)",
                   title=f"{res['model']} ({res['ops']} ops): Spearman {scores['spearman']:.2f}, "
                         f"median rel. error {scores['median_relative_error']:.0%}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(results: list[dict], times, fit, elapsed: float, load: tuple) -> str:
    lines = ["# Simulator fidelity: simulated vs measured step time (2 logical CPU devices)", "",
             f"Written by `experiments/fidelity.py`. Run took {elapsed:.0f} s on this 2-core machine "
             f"(load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end: other sessions ran too).", "",
             f"Interconnect benchmark (rlplace.tf.comm, in the measuring worker, 2 inter-op threads): "
             f"latency {fit.latency * 1e6:.2f} µs, {fit.seconds_per_byte:.2e} s/B, R² {fit.r2:.3f}; "
             f"a two-device step also pays {times.step_overhead * 1e6:.1f} µs once.", "",
             "| model | ops | placements | fitted comm: Spearman | two-device only | median rel. error | "
             "calibrated comm | held out | Spearman | two-device only | median rel. error | "
             "single device measured / simulated | measured - simulated per transfer | "
             "(max - min) / median over the rounds, median over placements |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        single = [r for r in res["rows"] if r["family"] == "single"]
        ratio = np.mean([r["measured"] / r["simulated"] for r in single])
        cal = res["calibrated"]
        lines.append(
            f"| {res['model']} | {res['ops']} | {res['placements']} | {res['spearman']:.3f} | "
            f"{res['spearman_multi_device']:.3f} | {res['median_relative_error']:.1%} | "
            f"{cal['comm']['latency'] * 1e6:.1f} µs, {cal['comm']['mode']} | {cal['scored']} | {cal['spearman']:.3f} | "
            f"{cal['spearman_multi_device']:.3f} | {cal['median_relative_error']:.1%} | {ratio:.2f} | "
            f"{res['transfer_fit']['seconds_per_transfer'] * 1e6:.1f} µs | "
            f"{res['round_spread_median']:.0%} |")
    for res in results:
        lines += ["", f"## {res['model']} — knobs {res['knobs']}", "",
                  f"Profile (one device, one op at a time, one thread per op, traced): step "
                  f"{res['profile']['step_time'] * 1e3:.2f} ms, per-op compute sum "
                  f"{res['profile']['compute_sum'] * 1e3:.2f} ms, critical path "
                  f"{res['profile']['critical_path'] * 1e3:.2f} ms. Measured: the median over the rounds.", "",
                  "| placement | ops on device 1 | transfers | simulated, fitted (ms) | simulated, calibrated (ms) "
                  "| measured (ms) | rounds (ms) |", "|---|---|---|---|---|---|---|"]
        for r in sorted(res["rows"], key=lambda r: r["measured"]):
            mark = " (calibration)" if r["placement"] in CALIBRATION else ""
            lines.append(f"| {r['placement']}{mark} | {r['ops_on_1']} | {r['num_transfers']} | "
                         f"{r['simulated'] * 1e3:.2f} | {r['simulated_calibrated'] * 1e3:.2f} | {r['measured'] * 1e3:.2f} | "
                         + ", ".join(f"{t * 1e3:.1f}" for t in r["measured_rounds"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gnmt", "inception_v3"])
    parser.add_argument("--random", type=int, default=12, help="uniform random placements per model")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each placement (median)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rlplace.cluster import Cluster
    from rlplace.tf.backend import TFBackend
    from rlplace.tf.comm import fit_comm

    start = time.perf_counter()
    probe = Cluster.homogeneous(2, 4 * 2**30, prefix="/device:CPU:")
    with TFBackend(model=None, warmup=5, steps=5, intra_op_threads=1) as backend:
        times = backend.time_transfers(probe, repeats=30)
        fit = fit_comm(times.sizes, times.seconds)
        results = [run_model(name, backend, fit.comm_model(), args.random, args.rounds) for name in args.models]
    elapsed, load = time.perf_counter() - start, os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fidelity.json").write_text(json.dumps(
        {"transfer_fit": {"latency": fit.latency, "seconds_per_byte": fit.seconds_per_byte, "r2": fit.r2,
                          "sizes": times.sizes, "seconds": times.seconds, "step_overhead": times.step_overhead},
         "elapsed": elapsed, "load_average": load, "results": results}, indent=1))
    (args.out / "fidelity.md").write_text(report(results, times, fit, elapsed, load))
    plot(results, args.out / "fidelity.png")
    for res in results:
        cal = res["calibrated"]
        print(f"{res['model']}: {res['placements']} placements; fitted comm: Spearman {res['spearman']:.3f}, "
              f"median relative error {res['median_relative_error']:.1%}; calibrated comm "
              f"({cal['comm']['latency'] * 1e6:.1f} µs, {cal['comm']['mode']}): Spearman {cal['spearman']:.3f}, "
              f"median relative error {cal['median_relative_error']:.1%}")
    print(f"{elapsed:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
