"""Learned placers inside the paper tables: each run is an ``rlplace-train`` run
(``rlplace.apps.train.train_from_config``) on a table setting's graph, with a budget of
evaluated placements, and the training curve is read back from its ``metrics.csv``.

A run directory keeps its config (``train_config.yaml``). Running a table again in the same
directory (``hydra.run.dir=<old run>``) reads back every run that finished with the same config,
and continues one that was interrupted, or that finished with a smaller budget, from its
checkpoint: nothing already trained is lost or repeated."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlplace.apps.common import compose_app
from rlplace.apps.tables.common import Context, Setting
from rlplace.errors import ConfigError

RUN_CONFIG = "train_config.yaml"  # the config a training run was made with, beside its outputs


def train_config(setting: Setting, cluster_name: str, agent: Mapping[str, Any], budget: int, seed: int,
                 graph_path: Path, init_checkpoint: str | None = None, seconds: float | None = None):
    """The config ``rlplace-train graph=file cluster=<cluster_name> agent=<name> ...`` composes
    (Hydra's compose API), with the agent's overrides, this setting's graph (saved to
    ``graph_path``) and ``budget.placements`` (and ``budget.seconds``) merged in and checked
    against the schema; the trainer's bar is on when stderr is a terminal."""
    setting.graph.save(graph_path)
    cfg = compose_app("train", ["graph=file", f"cluster={cluster_name}", "backend=sim", f"agent={agent['name']}",
                                "logger=csv"])
    values = {"graph": {"path": str(graph_path)}, "agent": {k: v for k, v in agent.items() if k not in ("name", "label")},
              "seed": seed, "progress": sys.stderr.isatty(), "plots": True, "init_checkpoint": init_checkpoint,
              "budget": {"placements": int(budget), "seconds": seconds}}
    try:
        return OmegaConf.merge(cfg, values)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{getattr(exc, 'full_key', None) or 'agent'}: {str(exc).strip().splitlines()[0]}") from None


def train_record(setting: Setting, cluster_name: str, agent: Mapping[str, Any], ctx: Context, placer: str,
                 seed: int | None = None, budget: int | None = None, init_checkpoint: str | None = None,
                 run_name: str | None = None, **extra) -> dict:
    """Train ``agent`` on the setting; a record like a heuristic's (step time of the best
    placement, evaluated once more) plus the curve. The run goes into ``runs/<run_name>`` (by
    default ``<setting>_<placer>_s<seed>``); a finished run there with the same config is read
    back, an unfinished one continued (module docstring)."""
    from rlplace.apps.train import train_from_config

    seed = ctx.seed if seed is None else seed
    run_dir = ctx.out_dir / "runs" / (run_name or f"{setting.key}_{placer}_s{seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = train_config(setting, cluster_name, agent, budget or ctx.budget, seed, run_dir / "graph.json.gz",
                       init_checkpoint, ctx.budget_seconds)
    summary = previous_run(run_dir, cfg)
    if summary is None:
        OmegaConf.save(cfg, run_dir / RUN_CONFIG)
        summary = train_from_config(cfg, run_dir)
    final = summary.get("final_evaluation")
    return {"model": setting.key, "placer": placer, "seed": seed,
            "step_time": final["step_time"] if final else math.inf, "oom": final is None or final["oom"],
            "placement_time": summary["seconds"], "evaluated": summary["evaluated"],
            "curve": read_curve(run_dir / "metrics.csv"), "run_dir": str(run_dir), **extra}


def budget_words(placements: int, ctx: Context) -> str:
    """A learned table's budget as stated above it."""
    seconds = f" or {ctx.budget_seconds:g} s of training, whichever came first" if ctx.budget_seconds else ""
    return f"{placements} evaluated placements per run{seconds}"


def previous_run(run_dir: Path, cfg) -> dict | None:
    """The summary of the run already in ``run_dir`` when it was made with ``cfg`` and finished
    its budget; otherwise None, with ``cfg.resume`` set when its checkpoint can be continued
    (same config but the budget, fewer placements evaluated than this budget; the trainer ends
    at once when its seconds are already spent)."""
    saved = run_dir / RUN_CONFIG
    if not saved.is_file():
        return None
    old = OmegaConf.load(saved)
    if _without_budget(old) != _without_budget(cfg):
        return None
    results = run_dir / "results.json"
    if results.is_file() and old.budget == cfg.budget:
        summary = json.loads(results.read_text())
        if not summary.get("stopped"):
            return summary
    checkpoint = run_dir / "checkpoint.pt"
    if checkpoint.is_file():
        from rlplace.agents.checkpoint import read_checkpoint

        evaluated = read_checkpoint(checkpoint).progress["evaluated"]
        cfg.resume = evaluated <= cfg.budget.placements
    return None


def _without_budget(cfg) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in ("budget", "resume", "progress"):  # none changes what is trained
        plain.pop(key)
    return plain


def read_curve(path: Path) -> list[list[float]]:
    """[evaluated placements, best valid step time so far] per update, from metrics.csv."""
    if not path.is_file():
        return []
    with path.open() as f:
        return [[int(r["step"]), float(r["best_step_time"])] for r in csv.DictReader(f)
                if math.isfinite(float(r["best_step_time"]))]


def plot_curves(records: Sequence[Mapping], heuristics: Sequence[Mapping], labels: Mapping[str, str],
                path: Path, title: str) -> None:
    """Best step time vs evaluated placements per learned run, one panel per model, with the
    heuristics' step times as horizontal lines; a dot marks a final greedy placement that beat
    every sample."""
    present = {r["model"] for r in records}
    models = [m for m in dict.fromkeys([*labels, *(r["model"] for r in records)]) if m in present]
    if not models:
        return
    runs = list(dict.fromkeys((r["placer"], r.get("seed", 0)) for r in records))  # one colour per run, all panels
    fig, axes = plt.subplots(1, len(models), figsize=(4.8 * len(models), 3.8), squeeze=False)
    for ax, m in zip(axes[0], models):
        for r in (x for x in records if x["model"] == m and x.get("curve")):
            k = runs.index((r["placer"], r.get("seed", 0)))
            xs, ys = zip(*r["curve"])
            style = {"color": f"C{k % 10}", "linestyle": "-" if k < 10 else ":"}
            ax.step(xs, ys, where="post", label=f"{r['placer']} (seed {r.get('seed', 0)})", **style)
            if math.isfinite(r["step_time"]) and r["step_time"] < ys[-1]:  # the final greedy placement won
                ax.plot([xs[-1]], [r["step_time"]], marker="o", markersize=4, **style)
        for k, h in enumerate(x for x in heuristics if x["model"] == m and not x.get("oom")):
            ax.axhline(h["step_time"], linestyle="--", linewidth=1, color=f"C{(k + 5) % 10}", label=h["placer"])
        ax.set_xlabel("placements evaluated")
        ax.set_title(labels.get(m, m), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("best step time (s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
