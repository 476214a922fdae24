"""Analytical (roofline) costs of the zoo models (issue 3, item 4).

    .venv/bin/python experiments/bench_costs.py [--models gnmt bert ...] [--skip-paper] [--skip-profile]

1. Paper size (each builder's defaults, built and extracted, never run): ops, FLOPs and bytes per
   training step, total compute and critical path on V100 and K40, share of compute-bound ops.
2. CPU size (``rlplace/conf/model/*.yaml``): profile on this machine's CPU (``rlplace.tf.profile``) and
   compare per-op analytical times with the profiled ones (Spearman rank correlation).
3. ``--fig8``: Baechi's Figure 8 on the real GNMT profile: place with m-ETF and m-SCT on
   ``perturb(profile, p, seed)``, simulate on the true profile (4 x GTX 2080 preset).

Writes experiments/results/bench_costs.json and costs_vs_profile.png; experiments/costs.md
discusses the figures. Extracted graphs are cached in /tmp/rlplace-costs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.costs import device_spec, op_costs, roofline_time, with_analytical_costs  # noqa: E402
from rlplace.graph import OpGraph  # noqa: E402
from rlplace.zoo import TF_MODELS, build_tf_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
CACHE = Path("/tmp/rlplace-costs")
DEVICES = ("v100", "k40")
# This machine's CPU as a roofline, for the absolute comparison only (2 cores at ~2.5 GHz with
# 2 AVX-512 FMA units: 2 x 2.5e9 x 64 FLOP; ~20 GB/s for a share of the socket's DRAM).
CPU = {"name": "cpu", "peak_flops": 3.2e11, "memory_bandwidth": 2e10, "launch_overhead": 5e-6}


def cpu_config(name: str) -> dict:
    cfg = yaml.safe_load((ROOT / "rlplace" / "conf" / "model" / f"{name}.yaml").read_text())
    cfg.pop("name")
    return cfg


def extracted(name: str, size: str) -> tuple[OpGraph, float]:
    from rlplace.tf.extract import extract

    path = CACHE / f"{name}_{size}.json.gz"
    if path.exists():
        return OpGraph.load(path), float("nan")
    start = time.perf_counter()
    g = extract(build_tf_model(name, **(cpu_config(name) if size == "cpu" else {})))
    seconds = time.perf_counter() - start
    CACHE.mkdir(exist_ok=True)
    g.save(path)
    return g, seconds


def paper_size(name: str) -> dict:
    g, build_s = extracted(name, "paper")
    c = op_costs(g)
    row = {"ops": g.num_ops, "build_s": build_s, "gflop": c.flops.sum() / 1e9,
           "gbytes": c.bytes.sum() / 1e9, "unknown_types": dict(c.unknown_types)}
    for dev in DEVICES:
        spec = device_spec(dev)
        costed = with_analytical_costs(g, dev)
        row[dev] = {"total_s": costed.total_compute, "critical_path_s": costed.critical_path(),
                    "compute_bound_ops": int(np.sum(c.flops / spec.peak_flops > c.bytes / spec.memory_bandwidth)),
                    "launch_share": g.num_ops * spec.launch_overhead / costed.total_compute}
    return row


def profiled(name: str, run: int = 0):
    from rlplace.tf.profile import profile

    path = CACHE / f"{name}_cpu_profiled{'_' + str(run) if run else ''}.json.gz"
    if path.exists():
        return OpGraph.load(path)
    g = profile(build_tf_model(name, **cpu_config(name)), warmup=3, steps=3).graph
    g.save(path)
    return g


def versus_profile(name: str) -> tuple[dict, tuple]:
    g, _ = extracted(name, "cpu")
    measured = profiled(name)
    prof = measured.compute_time[[measured.index[n] for n in g.names]]
    c = op_costs(g)
    work = c.bytes > 0  # ops that touch memory (not sources, views, shape arithmetic)
    heavy = c.flops > 0
    heavy &= np.array([t in ("MatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput",
                             "Conv2DBackpropFilter") for t in g.op_type])
    again = profiled(name, run=1)
    prof2 = again.compute_time[[again.index[n] for n in g.names]]
    row = {"ops": g.num_ops, "profiled_total_s": float(prof.sum()),
           # the noise floor: a second profile against the first
           "profile_vs_profile": {"spearman_all": float(spearmanr(prof2, prof)[0]),
                                  "spearman_work": float(spearmanr(prof2[work], prof[work])[0]),
                                  "spearman_matmul_conv": float(spearmanr(prof2[heavy], prof[heavy])[0])
                                  if heavy.sum() > 2 else None}}
    for label, dev in (("v100", "v100"), ("cpu", CPU)):
        t = roofline_time(c.flops, c.bytes, dev)
        row[label] = {"spearman_all": float(spearmanr(t, prof)[0]),
                      "spearman_work": float(spearmanr(t[work], prof[work])[0]),
                      "spearman_matmul_conv": float(spearmanr(t[heavy], prof[heavy])[0]) if heavy.sum() > 2 else None,
                      "analytical_total_s": float(t.sum())}
    row["work_ops"], row["matmul_conv_ops"] = int(work.sum()), int(heavy.sum())
    row["cpu"]["median_ratio_work"] = float(np.median(roofline_time(c.flops, c.bytes, CPU)[work] / prof[work]))
    return row, (roofline_time(c.flops, c.bytes, CPU)[work], prof[work])


def figure8(ps=(0.0, 0.2, 0.4, 0.6, 0.8), seeds=range(5)) -> dict:
    """Step time (simulated on the true profile) of placements made on perturbed profiles,
    relative to the placement made on the true profile."""
    from rlplace.cluster import load_preset
    from rlplace.costs import perturb
    from rlplace.placers import make_placer
    from rlplace.sim import simulate
    from rlplace.zoo import load_baechi_profile

    g, cluster = load_baechi_profile(), load_preset("baechi_2080")
    rows = {}
    for placer in ("m_etf", "m_sct"):
        base = simulate(g, cluster, make_placer(placer).place(g, cluster)).step_time
        rows[placer] = {"unperturbed_step_s": base}
        for p in ps[1:]:
            ratios = [simulate(g, cluster, make_placer(placer).place(perturb(g, p, seed), cluster)).step_time / base
                      for seed in seeds]
            rows[placer][str(p)] = {"mean": float(np.mean(ratios)), "min": float(np.min(ratios)),
                                    "max": float(np.max(ratios))}
    return rows


def main() -> None:
    parser = ArgumentParser()
    parser.add_argument("--models", nargs="*", default=list(TF_MODELS))
    parser.add_argument("--skip-paper", action="store_true")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--fig8", action="store_true")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "bench_costs.json"
    results = json.loads(out.read_text()) if out.exists() else {"paper": {}, "cpu": {}}
    scatter = {}
    for name in args.models:
        if not args.skip_paper:
            results["paper"][name] = paper_size(name)
            print(name, "paper", json.dumps(results["paper"][name]), flush=True)
        if not args.skip_profile:
            results["cpu"][name], scatter[name] = versus_profile(name)
            print(name, "cpu", json.dumps(results["cpu"][name]), flush=True)
        out.write_text(json.dumps(results, indent=1))
    if args.fig8:
        results["fig8"] = figure8()
        print("fig8", json.dumps(results["fig8"]), flush=True)
        out.write_text(json.dumps(results, indent=1))
    if scatter:
        fig, axes = plt.subplots(2, 3, figsize=(12, 7.5))
        for ax, (name, (t, prof)) in zip(axes.ravel(), sorted(scatter.items())):
            ax.loglog(prof, t, ".", ms=2, alpha=0.4)
            lo, hi = min(prof.min(), t.min()), max(prof.max(), t.max())
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            rho = results["cpu"][name]["cpu"]["spearman_work"]
            ax.set(title=f"{name} (Spearman {rho:.2f})", xlabel="profiled on CPU (s)",
                   ylabel="roofline, CPU spec (s)")
        fig.tight_layout()
        fig.savefig(RESULTS / "costs_vs_profile.png", dpi=110)


if __name__ == "__main__":
    run_script(main)
