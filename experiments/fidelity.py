"""Fidelity of the calibrated simulator against real TensorFlow (issue 19, items 1-3):
CPU-sized GNMT and Inception-V3 on 2 logical CPU devices, and a user's own Keras model
(``keras.applications.MobileNetV2(weights=None)`` at a small input size) through
``rlplace-calibrate``.

    .venv/bin/python experiments/fidelity.py [--models gnmt inception_v3] [--rounds 3] [--no-keras]

For each zoo model: profile it on one device (one op at a time, one thread per op), time
transfers between the two logical devices in TFBackend's worker and fit the CommModel
(``rlplace.tf.comm``, the simulator *before* calibration), measure the calibration design
(``rlplace.calibration.design``: single device, cuts, random placements at several mixing rates,
heuristics) in interleaved rounds (``rlplace.calibration.protocol``), fit the simulator on two
thirds of each family and score it on the rest and by 3-fold cross-validation
(``rlplace.calibration.study``), beside the noise ceiling of the same placements. The Keras
model runs ``rlplace-calibrate`` as a user would and its ``calibration.json`` is read back.
Writes experiments/results/fidelity.{json,md,png}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from rlplace.errors import ArgumentParser, run_script

RESULTS = Path(__file__).parent / "results"
CONF = Path(__file__).resolve().parents[1] / "rlplace" / "conf"
CV_FOLDS = 3
HEURISTICS = ("round_robin", "expert", "metis", "m_etf", "m_topo", "heft", "celeritas")
KERAS = ["model=keras", "model.name=keras.applications:MobileNetV2", "model.batch_size=2",
         "+model.args={weights: null, input_shape: [64, 64, 3], classes: 10, alpha: 0.35}"]


def model_knobs(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{name}.yaml"))


def run_model(name: str, backend, comm, rounds: int, seed: int, saved: Path) -> tuple[dict, object]:
    """Profile, measure and calibrate one zoo model; the graph, the cluster and the
    measurements go to ``saved`` first (``--refit`` fits them again without measuring)."""
    from rlplace.calibration.design import design
    from rlplace.calibration.files import write_graph, write_preset
    from rlplace.calibration.protocol import measure
    from rlplace.cluster import Cluster
    from rlplace.tf.profile import profile
    from rlplace.zoo import build_tf_model

    knobs = model_knobs(name)
    backend.model = knobs
    start = time.perf_counter()
    prof = profile(build_tf_model(**knobs), warmup=5, steps=5, inter_op_threads=1, intra_op_threads=1)
    graph = prof.graph
    cluster = Cluster.homogeneous(2, 4 * 2**30, comm, prefix="/device:CPU:", name="local_cpu_fitted")
    plan = design(graph, cluster, mixing_seeds=3, heuristics=HEURISTICS, seed=seed)
    measured = measure(backend, graph, cluster, plan, rounds=rounds, warmup=1, seed=seed)
    saved.mkdir(parents=True, exist_ok=True)
    write_graph(saved / "graph.json.gz", graph)
    write_preset(saved / "measured_cluster.yaml", cluster)
    (saved / "measurements.json").write_text(json.dumps(measured.as_dict()))
    extra = {"knobs": knobs, "profile": {"step_time": prof.step_time, "compute_sum": float(graph.compute_time.sum()),
                                         "critical_path": graph.critical_path()},
             "seconds_measuring": time.perf_counter() - start}
    (saved / "extra.json").write_text(json.dumps(extra))
    return refit(name, saved, seed)


def refit(name: str, saved: Path, seed: int, reused: bool = False) -> tuple[dict, object]:
    from rlplace.calibration.protocol import Measurements
    from rlplace.calibration.study import study
    from rlplace.graph import OpGraph
    from rlplace.cluster import load_cluster_file

    graph = OpGraph.load(saved / "graph.json.gz")
    cluster = load_cluster_file(str(saved / "measured_cluster.yaml"))
    measured = Measurements.from_dict(json.loads((saved / "measurements.json").read_text()), graph.num_ops)
    start = time.perf_counter()
    result = study(graph, cluster, measured, cv_folds=CV_FOLDS, seed=seed)
    summary = {"model": name, "ops": graph.num_ops, **json.loads((saved / "extra.json").read_text()),
               **result.summary(), "seconds_fitting": time.perf_counter() - start, "reused": reused,
               "rows": result.rows()}
    return summary, result


def run_keras(rounds: int, saved: Path) -> dict:
    """MobileNetV2 through rlplace-calibrate, as a user runs it (docs/real_frameworks.md,
    "Calibrating the simulator"); its run directory goes under ``saved``."""
    run_dir = saved / f"keras-{os.getpid()}"
    start = time.perf_counter()
    cmd = [str(Path(sys.executable).parent / "rlplace-calibrate"), *KERAS, f"rounds={rounds}", f"cv_folds={CV_FOLDS}", "plots=false",
           f"hydra.run.dir={run_dir}"]
    subprocess.run(cmd, check=True)
    from rlplace.graph import OpGraph

    summary = json.loads((run_dir / "calibration.json").read_text())
    return {"model": "MobileNetV2 (Keras, alpha 0.35, 64x64, batch 2)", "command": " ".join([".venv/bin/rlplace-calibrate"] + [
        f"'{a}'" if " " in a else a for a in cmd[1:-1]]), "seconds_measuring": time.perf_counter() - start,
        "ops": OpGraph.load(run_dir / "graph.json.gz").num_ops, **summary}


def plot(studies: list[tuple[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlplace.calibration.report import scatter

    fig, axes = plt.subplots(len(studies), 2, figsize=(12, 5 * len(studies)), squeeze=False)
    for row, (name, result) in enumerate(studies):
        scatter(result, path, name, axes=axes[row])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _fmt(x, fmt=".3f"):
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, fmt)


def report(results: list[dict], fit, elapsed: float, load: tuple) -> str:
    lines = ["# Simulator fidelity: simulated vs measured step time (2 logical CPU devices)", "",
             f"Written by `experiments/fidelity.py`. Run took {elapsed:.0f} s on this 2-core machine "
             f"(profiling and measuring: " + ", ".join(
                 f"{r['model']} {r['seconds_measuring']:.0f} s" + (" in an earlier run, its saved measurements "
                                                                   "refit here (--refit)" if r.get("reused") else "")
                 for r in results) + ") "
             f"(load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end: other sessions ran too).", "",
             f"Before calibration: the CommModel of the interconnect benchmark (rlplace.tf.comm, in the measuring "
             f"worker): latency {fit.latency * 1e6:.2f} µs, {fit.seconds_per_byte:.2e} s/B, R² {fit.r2:.3f}, "
             f"parallel transfers; profiled op costs. Calibrated: `rlplace.calibration` fitted on about two thirds "
             f"of each family of placements (all single-device ones), scored on the rest (held out) and by 3-fold "
             f"cross-validation. Noise ceiling: the square root of the split-half reliability of the measurements "
             f"of the same placements (the best Spearman any simulator can reach against them).", "",
             "| model | ops | placements (fit / held out) | held out: Spearman before | calibrated | Kendall τ | "
             "median rel. error before / calibrated | noise ceiling (held out) | cross-validated Spearman | "
             "noise ceiling (all) | noise floor | transfers, latency | R² |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        b, a, cv = r["held_out_before"], r["held_out_after"], r["cross_validated"] or {}
        nh, na = r["noise_ceiling"]["held_out"] or {}, r["noise_ceiling"]["all"] or {}
        lat = next(p for p in r["fit"]["parameters"] if p["parameter"] == "latency")
        lines.append(f"| {r['model']} | {r['ops'] or '–'} | {r['placements']} ({r['fit_on']} / {r['held_out']}) | "
                     f"{_fmt(b['spearman'])} | **{_fmt(a['spearman'])}** | {_fmt(a['kendall_tau'])} | "
                     f"{_fmt(b['median_relative_error'], '.1%')} / {_fmt(a['median_relative_error'], '.1%')} | "
                     f"{_fmt(nh.get('ceiling'))} | {_fmt(cv.get('spearman'))} | {_fmt(na.get('ceiling'))} | "
                     f"{_fmt(r['noise_floor'], '.0%')} | {r['fit']['mode']}, {lat['value'] * 1e6:.1f} µs "
                     f"[{lat['ci'][0] * 1e6:.1f}, {lat['ci'][1] * 1e6:.1f}] | {r['fit']['r2']:.3f} |")
    for r in results:
        lines += ["", f"## {r['model']}", ""]
        if "command" in r:
            lines += [f"`{r['command']}`", ""]
        lines += ["| parameter | value | 95% CI | unit |", "|---|---|---|---|"]
        lines += [f"| {p['parameter']} | {p['value']:.3g} | [{p['ci'][0]:.3g}, {p['ci'][1]:.3g}] | {p['unit']} |"
                  for p in r["fit"]["parameters"]]
        lines += ["", "| placement | family | role | transfers | measured (ms) | rounds (ms) | before (ms) | "
                  "calibrated (ms) |", "|---|---|---|---|---|---|---|---|"]
        for row in sorted(r["rows"], key=lambda row: row["measured"]):
            lines.append(f"| {row['placement']} | {row['family']} | {row['role']} | {row['num_transfers']} | "
                         f"{row['measured'] * 1e3:.2f} | " + ", ".join(f"{t * 1e3:.1f}" for t in row["rounds"])
                         + f" | {row['simulated_before'] * 1e3:.2f} | {row['simulated_after'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gnmt", "inception_v3"])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of measurement (median)")
    parser.add_argument("--no-keras", action="store_true", help="skip the Keras MobileNetV2 run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--saved", type=Path, default=Path("/tmp/rlplace-fidelity"),
                        help="where each model's graph and measurements are kept")
    parser.add_argument("--refit", action="store_true",
                        help="fit the saved measurements of a model again instead of measuring it")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rlplace.cluster import Cluster
    from rlplace.tf.backend import TFBackend
    from rlplace.tf.comm import fit_comm

    start = time.perf_counter()
    results, studies = [], []
    reuse = {name for name in args.models if args.refit and (args.saved / name / "measurements.json").is_file()}
    backend = None
    if set(args.models) - reuse:
        probe = Cluster.homogeneous(2, 4 * 2**30, prefix="/device:CPU:")
        backend = TFBackend(model=None, warmup=5, steps=5, intra_op_threads=1)
        times = backend.time_transfers(probe, repeats=30)
        fit = fit_comm(times.sizes, times.seconds)
    else:
        fit = SimpleNamespace(**json.loads((args.out / "fidelity.json").read_text())["transfer_fit"])
    for name in args.models:
        if name in reuse:
            summary, result = refit(name, args.saved / name, args.seed, reused=True)
        else:
            summary, result = run_model(name, backend, fit.comm_model(), args.rounds, args.seed, args.saved / name)
        results.append(summary)
        studies.append((name, result))
    if backend is not None:
        backend.close()
    if not args.no_keras:
        results.append(run_keras(args.rounds, args.saved))
    elapsed, load = time.perf_counter() - start, os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fidelity.json").write_text(json.dumps(
        {"transfer_fit": {"latency": fit.latency, "seconds_per_byte": fit.seconds_per_byte, "r2": fit.r2},
         "elapsed": elapsed, "load_average": load, "results": results}, indent=1))
    (args.out / "fidelity.md").write_text(report(results, fit, elapsed, load))
    plot(studies, args.out / "fidelity.png")
    for r in results:
        print(f"{r['model']}: held-out Spearman {r['held_out_before']['spearman']:.3f} before, "
              f"{r['held_out_after']['spearman']:.3f} calibrated; noise ceiling "
              f"{_fmt((r['noise_ceiling']['held_out'] or {}).get('ceiling'))}")
    print(f"{elapsed:.0f} s; results in {args.out}")


if __name__ == "__main__":
    run_script(main)
