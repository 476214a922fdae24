"""Mars with and without Deep Graph Infomax pre-training of its encoder, over 3 seeds: the Mars
§4.3 / Fig. 8 claim is that pre-training reaches a given step time in fewer evaluated
placements. Runs are ``rlplace-train`` runs as in ``learned_targets.py`` (same Mars settings;
a finished run is read back, not re-run). Beside every run, a local search from the run's first
placement with the run's seed (``rlplace.apps.beside``): at equal evaluations (its curve is drawn
and counted like the runs') and at equal wall time (capped at 60 s).

    python experiments/mars_dgi_curves.py [out_dir] [--seeds 0,1,2] [--budget 600] [--extra ...]

Writes ``mars_dgi_curves.json``, ``mars_dgi_curves.md`` and ``mars_dgi_curves.png`` to out_dir.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from hydra import compose, initialize_config_module

from learned_targets import MARS, best_so_far, run, save_curve_plot
from rlplace.errors import ArgumentParser, run_script
from rlplace.apps.beside import LearnedRun, search_at
from rlplace.presets import instantiate_node

SETTING = ["graph=layered", "graph.num_ops=300", "cluster=baechi_2080"]
ARMS = {"pre-trained (DGI)": "true", "not pre-trained": "false"}
SEARCH = "local search beside {arm}"     # the curves of the searches beside an arm's runs


def evaluations_to_reach(curve: np.ndarray, level: float) -> float:
    """1-based index of the first placement whose best-so-far is at or below ``level``."""
    hits = np.flatnonzero(curve <= level)
    return float(hits[0] + 1) if hits.size else math.inf


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="outputs/mars_dgi_curves")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=int, default=600)
    parser.add_argument("--extra", nargs="*", default=[], help="more rlplace-train overrides for every run")
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    seeds = [int(s) for s in args.seeds.split(",")]

    with initialize_config_module("rlplace.conf", version_base=None):
        cfg = compose("train", overrides=SETTING)
    graph, cluster = instantiate_node(cfg, "graph"), instantiate_node(cfg, "cluster")
    curves: dict[str, list[np.ndarray]] = {name: [] for arm in ARMS for name in (arm, SEARCH.format(arm=arm))}
    runs = []
    for arm, pretrain in ARMS.items():
        for seed in seeds:
            name = f"{'dgi' if pretrain == 'true' else 'no_dgi'}_s{seed}"
            overrides = SETTING + MARS + [f"agent.policy.pretrain={pretrain}", f"seed={seed}",
                                          f"budget.placements={args.budget}", "progress=true"] + args.extra
            r = run(name, overrides, out_dir)
            curve = best_so_far(r["step_times"], r["valid"])
            learned = LearnedRun.from_run_dir(out_dir / name, graph, cluster, name, r["evaluated"], r["seconds"])
            evals, timed = (search_at(graph, cluster, learned, budget, seed=seed).search
                            for budget in ("equal evaluations", "equal wall time"))
            curves[arm].append(curve)
            curves[SEARCH.format(arm=arm)].append(np.asarray(evals.curve))
            runs.append({"run": name, "arm": arm, "seed": seed, "overrides": overrides,
                         "first_sample": float(curve[0]), "best": float(curve[-1]),
                         "placements_per_second": r["placements_per_second"], "evaluated": len(curve),
                         "search_equal_evaluations": evals.step_time, "search_equal_wall_time": timed.step_time,
                         "search_wall_time_evaluations": timed.evaluations, "search_seconds": timed.seconds})
            print(f"{name}: first {curve[0] * 1e3:.3f} ms, best {curve[-1] * 1e3:.3f} ms; local search "
                  f"{evals.step_time * 1e3:.3f} ms at equal evaluations, {timed.step_time * 1e3:.3f} ms at "
                  f"equal wall time ({timed.evaluations} evaluations)", flush=True)

    # levels: 50%, 75% and 90% of the way from the mean first sample to the best any run found
    start = float(np.mean([r["first_sample"] for r in runs]))
    best = min(r["best"] for r in runs)
    levels = {f"{int(100 * f)}%": start - f * (start - best) for f in (0.5, 0.75, 0.9)}
    reach = {arm: {name: [evaluations_to_reach(c, level) for c in curves[arm]] for name, level in levels.items()}
             for arm in curves}
    summary = {"setting": SETTING + MARS, "seeds": seeds, "budget": args.budget, "levels": levels,
               "evaluations_to_reach": reach, "runs": runs}
    (out_dir / "mars_dgi_curves.json").write_text(json.dumps(summary, indent=1, default=float))
    (out_dir / "mars_dgi_curves.md").write_text(markdown(summary))
    plot(curves, levels, out_dir / "mars_dgi_curves.png", " ".join(SETTING))
    print(f"results in {out_dir}")


def markdown(summary: dict) -> str:
    lines = [f"Setting: {' '.join(summary['setting'])}; seeds {summary['seeds']}, "
             f"{summary['budget']} placements per run, simulator backend.", "",
             "Placements evaluated until the best step time so far reaches a level (the level is that share of "
             "the way from the mean first sample to the best step time any run found); mean over seeds, "
             "each seed in brackets (inf: not reached).", "",
             "| level (ms) | " + " | ".join(summary["evaluations_to_reach"]) + " |",
             "|---|" + "---|" * len(summary["evaluations_to_reach"])]
    for name, level in summary["levels"].items():
        cells = []
        for arm in summary["evaluations_to_reach"]:
            values = summary["evaluations_to_reach"][arm][name]
            cells.append(f"{np.mean(values):.0f} ({', '.join(f'{v:.0f}' for v in values)})")
        lines.append(f"| {name}: {level * 1e3:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "Local search beside each run: from the run's first placement with the run's seed, at equal "
              "evaluations and at equal wall time (the run's training seconds, capped at 60 s).", "",
              "| run | first sample (ms) | best (ms) | search, equal evaluations (ms) | search, equal wall time (ms) "
              "| its evaluations | placements/s |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['first_sample'] * 1e3:.3f} | {r['best'] * 1e3:.3f} | "
              f"{r['search_equal_evaluations'] * 1e3:.3f} | {r['search_equal_wall_time'] * 1e3:.3f} | "
              f"{r['search_wall_time_evaluations']} | {r['placements_per_second']:.1f} |" for r in summary["runs"]]
    return "\n".join(lines) + "\n"


def plot(curves: dict[str, list[np.ndarray]], levels: dict[str, float], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k, (arm, runs) in enumerate(curves.items()):
        length = max(len(c) for c in runs)
        stacked = np.stack([np.pad(c, (0, length - len(c)), mode="edge") for c in runs]) * 1e3
        x = np.arange(1, stacked.shape[1] + 1)
        learned = arm in ARMS
        ax.plot(x, stacked.mean(0), color=f"C{k}", linestyle="-" if learned else "--",
                label=f"{'Mars, ' if learned else ''}{arm} (mean of {len(runs)} seeds)")
        ax.fill_between(x, stacked.min(0), stacked.max(0), color=f"C{k}", alpha=0.2)
    for name, level in levels.items():
        ax.axhline(level * 1e3, color="grey", linestyle=":", linewidth=1)
        ax.annotate(name, (1, level * 1e3), fontsize=7, color="grey", va="bottom")
    save_curve_plot(fig, ax, f"Mars with and without DGI pre-training: {title}", path)


if __name__ == "__main__":
    run_script(main)
