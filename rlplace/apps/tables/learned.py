"""Learned placers inside the paper tables: each run is an ``rlplace-train`` run
(``rlplace.apps.train.train_from_config``) on a table setting's graph, with a budget of
evaluated placements, and the training curve is read back from its ``metrics.csv``.

A run directory keeps its config (``train_config.yaml``). Running a table again in the same
directory (``hydra.run.dir=<old run>``) reads back every run that finished with the same config,
and continues one that was interrupted, or that finished with a smaller budget, from its
checkpoint: nothing already trained is lost or repeated.

Every learned run is reported with a local search beside it (``beside_records``,
``rlplace.apps.beside``): from the run's first placement, at its evaluations and at its seconds
of training (capped at ``Context.beside_seconds``), as a table under the paper's
(``beside_notes``) and as curves with the run's (``plot_curves``)."""

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

from rlplace.apps.beside import LearnedRun, search_beside
from rlplace.apps.common import compose_app
from rlplace.apps.tables.common import Context, Setting, cluster_of, fmt_step
from rlplace.errors import ConfigError, first_line
from rlplace.graph import OpGraph
from rlplace.cluster import cluster_from_data
from rlplace.datafile import load_yaml_data
from rlplace.report import draw_curves
from rlplace.sim import lower_bound

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
    try:
        old = OmegaConf.create(saved_config(run_dir))
        if _without_budget(old) != _without_budget(cfg):
            return None
    except (OmegaConfBaseException, KeyError) as exc:
        raise ConfigError(f"{saved}: not a run config of rlplace-train ({first_line(exc)})") from None
    results = run_dir / "results.json"
    if results.is_file() and old.budget == cfg.budget:
        summary = json.loads(results.read_text())
        if not summary.get("stopped"):
            return summary
    checkpoint = run_dir / "checkpoint.pt"
    if checkpoint.is_file():
        from rlplace.learn.checkpoint import read_checkpoint

        evaluated = read_checkpoint(checkpoint).progress["evaluated"]
        cfg.resume = evaluated <= cfg.budget.placements
    return None


def saved_config(run_dir: Path) -> dict:
    """A run directory's ``train_config.yaml`` as plain data (read as data, never instantiated:
    a run directory may come from someone else)."""
    data = load_yaml_data(run_dir / RUN_CONFIG, ConfigError, "run config")
    if not isinstance(data, dict):
        raise ConfigError(f"{run_dir / RUN_CONFIG}: not a run config (a mapping of keys)")
    return data


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


def beside_records(learned: Sequence[Mapping], ctx: Context) -> list[dict]:
    """The local searches beside each learned record (``train_record``): from its run's first
    placement, at the placements it evaluated and at its seconds of training (capped at
    ``ctx.beside_seconds``), on its graph and cluster, with its seed."""
    out = []
    for r in learned:
        run_dir = Path(r["run_dir"])
        graph = OpGraph.load(run_dir / "graph.json.gz")
        cluster = cluster_from_data(saved_config(run_dir).get("cluster"))
        run = LearnedRun.from_run_dir(run_dir, graph, cluster, r["placer"], r["evaluated"], r["placement_time"])
        out += [{"model": r["model"], "seed": r["seed"], **x}
                for x in search_beside(graph, cluster, run, r["seed"], max_seconds=ctx.beside_seconds)]
    return out


def beside_notes(learned: Sequence[Mapping], beside: Sequence[Mapping], ctx: Context) -> list[str]:
    """A markdown table: each learned run against the local search beside it."""
    if not learned:
        return []
    cap = "no cap" if ctx.beside_seconds is None else f"capped at {ctx.beside_seconds:g} s"
    lines = ["", f"Local search beside each learned run (`rlplace.apps.beside`): from the run's first placement, at "
                 f"equal evaluations and at equal wall time ({cap}); seconds.", "",
             "| model | learned run | evaluated | training (s) | best | search, equal evaluations | "
             "search, equal wall time | its evaluations | start |", "|---|---|---|---|---|---|---|---|---|"]
    for r in learned:
        mine = {b["budget"]: b for b in beside if b["model"] == r["model"] and b["beside"] == r["placer"]
                and b["seed"] == r["seed"]}
        evals, timed = mine.get("equal evaluations"), mine.get("equal wall time")
        if evals is None or timed is None:
            continue
        lines.append(f"| {r['model']} | {r['placer']} | {r['evaluated']} | {r['placement_time']:.1f} | {fmt_step(r)} | "
                     f"{fmt_step(evals)} | {fmt_step(timed)} | {timed['search']['evaluations']}"
                     f"{' (capped)' if timed['search']['capped'] else ''} | {evals['search']['start']} |")
    return lines


def lower_bounds(table: Mapping[str, Any], sets: Sequence[Setting]) -> dict[str, float]:
    """The lower bound (``rlplace.sim.lower_bound``) of each setting on its cluster."""
    return {s.key: lower_bound(s.graph, cluster_of(table, setting=s)) for s in sets}


def plot_curves(curves: Sequence[Mapping], lines: Sequence[Mapping], labels: Mapping[str, str],
                lower_bounds: Mapping[str, float], path: Path, title: str) -> None:
    """Best step time vs evaluated placements, one panel per model (``rlplace.report.draw_curves``):
    the learned runs and the searches beside them as curves, the heuristics' step times
    (``lines``) as horizontal lines, the lower bound as a dashed line."""
    present = {r["model"] for r in curves}
    models = [m for m in dict.fromkeys([*labels, *(r["model"] for r in curves)]) if m in present]
    if not models:
        return
    fig, axes = plt.subplots(1, len(models), figsize=(7.5 * len(models), 4.2), squeeze=False, layout="constrained")
    for ax, m in zip(axes[0], models):
        draw_curves(ax, [r for r in [*curves, *lines] if r["model"] == m], lower_bounds[m])
        ax.set_title(labels.get(m, m), fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
