"""Equal evaluations (issue 16, item 3): the learned placers against a local search from the same
start with the same number of evaluated placements, 3 seeds, median and spread.

A **cell** is (graph, agent, start, budget): for each seed, one ``rlplace-train`` run (simulator
backend) and one local search (``rlplace.placers.search.LocalSearch``, hill-climbing) from the
run's first evaluated placement (``rlplace.apps.beside``) with the run's seed. Both are scored by
the best valid step time among their first ``budget`` evaluated placements, the start included:

- **warm** (``warm_start.placer=best``: behaviour cloning of the heuristic that simulates fastest,
  also the first sample): the start is that heuristic's placement. Target: learned at least 3%
  faster than the search, at 500 and at 2,000 placements;
- **cold**: the start is the policy's first sample. Target: learned faster than the search at
  2,000 placements (no target at 500).

The verdict compares medians over the seeds: gain = 1 - median(learned) / median(search). A
seed's 2,000-placement run continues its 500-placement run (``resume=true``: the trainer
continues exactly as if it had not stopped, and nothing in it depends on the budget), so its
numbers at 500 and 2,000 come from one run. Agents: ``learned_targets.HP`` and
``learned_targets.MARS`` (HP's rate 1e-3 and unit embedding; Mars' LSTMs 128). The table also shows the
cells recorded for variants since removed from the library (``RETIRED``: self-imitation, steered
temperatures and trust regions around the best placement).

Graphs (``GRAPHS``), all on the Mars cluster ``mars_p100`` (4 × 12 GB P100): the Baechi authors'
GNMT profile; our GNMT-4 and BERT (TensorFlow zoo, analytical P100 costs) at sizes where
placement matters, and a 2,000-op layered DAG. ``sizes`` in the json records, per graph, the
best heuristic against ``single``.

Every finished (graph, agent, start, seed, budget) is cached in the json, with the commit it ran
from (``code``; a cell whose seeds ran from different commits says so in the table): a rerun (other budgets,
agents, graphs) does only what is missing, a killed run continues from its last checkpoint, and
``--markdown`` only redraws the tables and curves.
Cells not run are in the table as "not run (time)".

    python experiments/equal_evaluations.py [--graphs gnmt_profile,gnmt4,bert,layered]
        [--agents hp,mars] [--starts warm,cold] [--seeds 0,1,2] [--budgets 500,2000]
        [--results experiments/results] [--work outputs/equal_evaluations] [--markdown]

Writes ``equal_evaluations.{json,md,png}`` to ``--results``; the runs go to ``--work``.

Runs can be spread over processes or machines (``--extra torch_device=cuda`` trains on a GPU): each
process runs a part (``--graphs``, ``--agents``, ``--starts``, ``--seeds``) into its own
``--results`` (and a ``--work`` holding the zoo graph files, which need TensorFlow to build), and

    python experiments/equal_evaluations.py --results experiments/results --merge DIR1 DIR2 ... [--replace]

merges their cells into ``--results``' json and redraws the table (``merge``): for a seed recorded
in both, the run with more evaluated placements wins, or, with ``--replace``, the merged one (a
re-run of a cell under new code, from scratch).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.learned_targets import HP, MARS, WARM, best_so_far  # noqa: E402
from rlplace.errors import ArgumentParser, fail, run_script  # noqa: E402
from rlplace.learn.checkpoint import read_checkpoint  # noqa: E402
from rlplace.apps.beside import LearnedRun, change_points, search_at  # noqa: E402
from rlplace.apps.train import train_from_config  # noqa: E402
from rlplace.bounds import communication_bound  # noqa: E402
from rlplace.costs import with_analytical_costs  # noqa: E402
from rlplace.placers.search import HEURISTICS, evaluate_rows  # noqa: E402
from rlplace.placers import make_placer  # noqa: E402
from rlplace.presets import instantiate_node  # noqa: E402
from rlplace.sim import lower_bound  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "cluster=mars_p100"
# Zoo graphs as (model, knobs); the sizes are chosen in the module docstring's sense (see sizes in the json).
ZOO = {"gnmt4": ("gnmt", {"num_layers": 4, "hidden": 1024, "batch_size": 128, "seq_length": 10, "vocab_size": 30000}),
       "bert": ("bert", {"num_layers": 12, "seq_length": 384, "batch_size": 24})}
GRAPHS: dict[str, list[str]] = {
    "gnmt_profile": ["graph=baechi_gnmt", CLUSTER],
    "gnmt4": ["zoo=gnmt4", CLUSTER],
    "bert": ["zoo=bert", CLUSTER],
    "layered": ["graph=layered", "graph.num_ops=2000", "graph.seed=0", CLUSTER],
}
AGENTS = {"hp": HP, "mars": MARS}
# Variants recorded here before issue 41 removed their options from the library (self-imitation,
# steered temperatures, trust regions: none met a target); their cells are still drawn from the json.
RETIRED = ("mars_sil", "hp_sil", "mars_near", "mars_trust", "mars_trust_hot", "mars_trust_factorised")
STARTS = {"warm": WARM, "cold": []}
BUDGETS = (500, 2000)
ISSUE_AGENTS = ("hp", "mars")  # the table lists their cells whether run or not; the variants' only where run
WARM_GAIN = 0.03       # warm: learned at least 3% faster than the search


@dataclass
class Plan:
    """What to run: every (graph, agent, start, seed) up to every budget."""

    graphs: dict[str, list[str]]
    agents: dict[str, list[str]]
    starts: dict[str, list[str]] = field(default_factory=lambda: dict(STARTS))
    seeds: Sequence[int] = (0, 1, 2)
    budgets: Sequence[int] = BUDGETS
    extra: Sequence[str] = ("torch_threads=1",)   # more rlplace-train overrides for every run
    zoo: dict[str, tuple[str, dict]] = field(default_factory=lambda: dict(ZOO))
    code: str | None = field(default_factory=lambda: code_version())  # the commit this process loaded


# ------------------------------------------------------------------------------ graphs
def graph_overrides(overrides: list[str], zoo: dict[str, tuple[str, dict]], work: Path) -> list[str]:
    """rlplace-train's graph overrides: ``zoo=<key>`` becomes the zoo graph with analytical P100
    costs, written once into ``work`` (``graph=file``)."""
    out = []
    for o in overrides:
        if o.startswith("zoo="):
            model, knobs = zoo[o.split("=", 1)[1]]
            tag = hashlib.sha1(json.dumps([model, knobs], sort_keys=True).encode()).hexdigest()[:10]
            path = work / f"{model}_{tag}_p100.json.gz"
            if not path.is_file():
                from rlplace.apps.tables.common import zoo_graph

                graph = with_analytical_costs(zoo_graph(model, knobs), "p100")
                graph.name = f"{model}_p100"
                work.mkdir(parents=True, exist_ok=True)
                graph.save(path)
            out += ["graph=file", f"graph.path={path.resolve()}"]
        else:
            out.append(o)
    return out


def compose_train(overrides: list[str]):
    with initialize_config_module("rlplace.conf", version_base=None):
        return compose("train", overrides=overrides)


def graph_record(key: str, overrides: list[str], zoo: dict[str, tuple[str, dict]]) -> dict[str, Any]:
    """The graph's heuristics (``search.HEURISTICS``, the candidates of ``warm_start.placer=best``)
    and whether placement matters: the best heuristic but single against single."""
    cfg = compose_train(overrides)
    graph, cluster = instantiate_node(cfg, "graph"), instantiate_node(cfg, "cluster")
    rows = np.stack([make_placer(name).place(graph, cluster).device_of for name in HEURISTICS])
    overflow, step = evaluate_rows(graph, cluster, rows)
    heuristics = {name: {"step_time": float(s), "oom": bool(o > 0)} for name, s, o in zip(HEURISTICS, step, overflow)}
    fits = {k: v["step_time"] for k, v in heuristics.items() if not v["oom"] and k != "single"}
    best = min(fits, key=fits.get) if fits else None
    single = heuristics["single"]
    gain = None if best is None or single["oom"] else 1 - fits[best] / single["step_time"]
    source = [o for o in overrides if o.startswith("zoo=")]
    return {"graph": graph.name, "ops": graph.num_ops, "overrides": overrides,
            "zoo": zoo[source[0].split("=", 1)[1]] if source else None, "heuristics": heuristics,
            "best_heuristic": best, "single_oom": single["oom"], "best_vs_single": gain,
            "placement_matters": single["oom"] or (gain is not None and gain >= 0.10),
            "lower_bound": lower_bound(graph, cluster), "communication_bound": communication_bound(graph, cluster)}


# ------------------------------------------------------------------------------ one seed
def code_version() -> str | None:
    """The commit this script runs from (``+dirty`` when tracked files other than the recorded
    results differ from it), or None outside a git checkout; recorded with each budget's numbers,
    so the table can say when a cell's seeds come from different code."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)experiments/results")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if changes else "")


def train_to(run_dir: Path, overrides: list[str], budget: int) -> dict[str, Any]:
    """The rlplace-train run in ``run_dir`` with at least ``budget`` placements evaluated:
    started, or a shorter or killed one continued from its checkpoint (``resume=true``)."""
    results = run_dir / "results.json"
    done = json.loads(results.read_text()) if results.is_file() else None
    if done is None or done["evaluated"] < budget:
        resume = [f"resume={str(done is not None or (run_dir / 'checkpoint.pt').is_file()).lower()}"]
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "overrides.json").write_text(json.dumps(overrides))
        train_from_config(compose_train(overrides + [f"budget.placements={budget}"] + resume), run_dir)
        done = json.loads(results.read_text())
    progress = read_checkpoint(run_dir / "checkpoint.pt").graph_progress()
    return {**done, "step_times": progress["step_times"], "valid": progress["valid"]}


def run_seed(key: str, graph_overrides_: list[str], agent: str, start: str, seed: int, budget: int,
             plan: Plan, work: Path, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (the seed's entry in the json) brought up to ``budget``: the learned run and,
    from its first placement, the local search of ``budget`` evaluations with its seed."""
    overrides = graph_overrides_ + plan.agents[agent] + plan.starts[start] + [f"seed={seed}", "plots=false",
                                                                            "progress=false", *plan.extra]
    run_dir = work / key / f"{agent}_{start}" / f"seed{seed}"
    r = train_to(run_dir, overrides, budget)
    cfg = compose_train(overrides)
    graph, cluster = instantiate_node(cfg, "graph"), instantiate_node(cfg, "cluster")
    curve = best_so_far(r["step_times"], r["valid"])
    learned = LearnedRun.from_run_dir(run_dir, graph, cluster, f"{agent} {start}", budget, r["seconds"])
    search = search_at(graph, cluster, learned, "equal evaluations", seed=seed).search
    record.update({"evaluated": r["evaluated"], "seconds": r["seconds"], "overrides": overrides,
                   "torch_device": r.get("torch_device"),
                   **({"generator_reseeded_at": r["generator_reseeded_at"]} if "generator_reseeded_at" in r else {}),
                   "first_step_time": r["step_times"][0] if r["valid"][0] else math.inf,
                   "warm_start_placer": r.get("warm_start_placer"), "warm_start_step_time": r.get("warm_start_step_time"),
                   "curve": change_points(curve)})
    record.setdefault("budgets", {})[str(budget)] = {
        "learned": float(curve[budget - 1]), "learned_evaluations": budget,
        "search": math.inf if search.oom else search.step_time, "search_evaluations": search.evaluations,
        "search_start_step_time": math.inf if search.start_overflow_bytes > 0 else search.start_step_time,
        "search_start": search.start, "search_curve": change_points(search.curve), "code": plan.code}
    return record


# ------------------------------------------------------------------------------ the plan
def missing(plan: Plan, summary: dict[str, Any]) -> list[tuple[str, str, str, int, int]]:
    """(graph, agent, start, seed, budget) not yet in ``summary``, smaller budgets first."""
    jobs = []
    for budget in sorted(plan.budgets):
        for key in plan.graphs:
            for agent in plan.agents:
                for start in plan.starts:
                    for seed in plan.seeds:
                        seeds = summary["cells"].get(cell_key(key, agent, start), {})
                        if str(budget) not in seeds.get(str(seed), {}).get("budgets", {}):
                            jobs.append((key, agent, start, seed, budget))
    return jobs


def cell_key(graph: str, agent: str, start: str) -> str:
    return f"{graph}/{agent}/{start}"


def run_plan(plan: Plan, json_path: Path, work: Path) -> dict[str, Any]:
    """Run what ``json_path`` lacks of ``plan``, saving after every seed."""
    summary = json.loads(json_path.read_text()) if json_path.is_file() else {"graphs": {}, "cells": {}}
    resolved = {key: graph_overrides(o, plan.zoo, work) for key, o in plan.graphs.items()}
    for key, overrides in resolved.items():
        if key not in summary["graphs"]:
            summary["graphs"][key] = graph_record(key, overrides, plan.zoo)
            save(summary, json_path)
    for key, agent, start, seed, budget in tqdm(missing(plan, summary), desc="equal evaluations", unit="run"):
        seeds = summary["cells"].setdefault(cell_key(key, agent, start), {})
        seeds[str(seed)] = run_seed(key, resolved[key], agent, start, seed, budget, plan, work, seeds.get(str(seed), {}))
        save(summary, json_path)
    return summary


# A graph's record: what makes it the graph, and what today's placers measure on it.
MEASURED = ("heuristics", "best_heuristic", "single_oom", "best_vs_single", "placement_matters")


def merge(summary: dict[str, Any], other: dict[str, Any], source: str = "the other json",
          replace: bool = False) -> dict[str, Any]:
    """``other``'s graphs and cells added to ``summary`` (in place). A graph recorded in both must
    be the same graph (its ``overrides`` aside: they name local paths); its heuristics' step times
    (``MEASURED``) are ``other``'s, the merged run's, as the placers measured them then (each
    seed's record keeps its own warm start). A seed recorded in both keeps the record with more
    evaluated placements, plus any budget only the other has; with ``replace``, ``other``'s record
    (a re-run, e.g. under new code) replaces the old one whole."""
    for key, graph in other["graphs"].items():
        mine = summary["graphs"].setdefault(key, graph)
        differ = sorted(k for k in set(mine) | set(graph)
                        if k not in ("overrides", *MEASURED) and mine.get(k) != graph.get(k))
        if differ:
            raise ValueError(f"{source}: graph {key!r} differs in {', '.join(differ)}: not the same graph")
        mine.update({k: graph[k] for k in MEASURED if k in graph})
    for cell, seeds in other["cells"].items():
        merged = summary["cells"].setdefault(cell, {})
        for seed, record in seeds.items():
            old = merged.get(seed)
            if old is None or replace:
                merged[seed] = record
                continue
            longer, shorter = (record, old) if record["evaluated"] > old["evaluated"] else (old, record)
            merged[seed] = {**longer, "budgets": {**shorter["budgets"], **longer["budgets"]}}
    return summary


def save(summary: dict[str, Any], path: Path) -> None:
    """``summary`` as JSON with one line per seed's record, which keeps the search curve of its
    largest budget only (the one ``plot`` draws; the tables read the step times)."""
    records: dict[str, str] = {}

    def line(record: dict[str, Any]) -> str:
        top = max(record.get("budgets", {"0": None}), key=int)
        budgets = {b: {k: v for k, v in x.items() if b == top or k != "search_curve"}
                   for b, x in record.get("budgets", {}).items()}
        token = f"@record{len(records)}@"
        records[f'"{token}"'] = json.dumps({**record, "budgets": budgets}, default=float)
        return token

    shaped = {**summary, "cells": {key: {seed: line(r) for seed, r in cell.items()}
                                   for key, cell in summary["cells"].items()}}
    text = json.dumps(shaped, indent=1, default=float)
    for token, record in records.items():
        text = text.replace(token, record, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


# ------------------------------------------------------------------------------ the table
def spread(values: Sequence[float]) -> str:
    """median [min–max] in ms."""
    if not values:
        return "—"
    return (f"{statistics.median(values) * 1e3:.2f} [{min(values) * 1e3:.2f}–{max(values) * 1e3:.2f}]")


def verdict(start: str, budget: int, learned: Sequence[float], search: Sequence[float], cold_budget: int = 2000
            ) -> tuple[str, str]:
    """(gain, verdict) of a cell: gain = 1 - median(learned) / median(search); cold cells have
    a target at ``cold_budget`` (the table's largest budget) only."""
    gain = 1 - statistics.median(learned) / statistics.median(search)
    shown = f"{100 * gain:+.1f}%" if math.isfinite(gain) else "—"
    if start == "warm":
        return shown, "met" if gain >= WARM_GAIN else "not met"
    if budget == cold_budget:
        return shown, "met" if gain > 0 else "not met"
    return shown, "no target"


def cell_rows(summary: dict[str, Any], graphs: Sequence[str], agents: Sequence[str], starts: Sequence[str],
              budgets: Sequence[int], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per cell: the seeds' learned and search best step times at the budget, or not
    run; a cell with only some of its seeds has no verdict. ``met``: whether the cell meets its
    target (None: no target, or not all seeds). A variant of the issue's agents (``mars_sil``, ...)
    has rows only for the (graph, start) it ran on."""
    rows = []
    for key in graphs:
        for agent in agents:
            for start in starts:
                recorded = summary["cells"].get(cell_key(key, agent, start), {})
                if not recorded and agent not in ISSUE_AGENTS:
                    continue
                for budget in budgets:
                    done = [recorded[str(s)]["budgets"][str(budget)] for s in seeds
                            if str(budget) in recorded.get(str(s), {}).get("budgets", {})]
                    row = {"graph": key, "agent": agent, "start": start, "budget": budget, "seeds": len(done)}
                    if done:
                        judge(row, [d["learned"] for d in done], [d["search"] for d in done], summary, max(budgets))
                        if len(done) < len(seeds):
                            row["verdict"], row["met"] = f"— ({len(done)} of {len(seeds)} seeds)", None
                        codes = {d["code"] for d in done if d.get("code")}
                        if len(codes) > 1:
                            row["verdict"] += f" (seeds from {len(codes)} commits: {', '.join(sorted(codes))})"
                    rows.append(row)
    return rows


def judge(row: dict[str, Any], learned: Sequence[float], search: Sequence[float], summary: dict[str, Any],
          cold_budget: int) -> None:
    """Fill a row's ``learned``, ``search``, ``gain``, ``verdict`` and ``met`` (None: no target);
    a warm target under the graph's lower bound (``communication_bound``) is said so."""
    row["learned"], row["search"] = list(learned), list(search)
    row["gain"], row["verdict"] = verdict(row["start"], row["budget"], row["learned"], row["search"], cold_budget)
    row["met"] = None if row["verdict"] == "no target" else row["verdict"] == "met"
    bound = summary["graphs"].get(row["graph"], {}).get("communication_bound", 0.0)
    if row["verdict"] == "not met" and row["start"] == "warm" and \
            (1 - WARM_GAIN) * statistics.median(row["search"]) < bound:
        row["verdict"] = "not met (the target is under the lower bound)"


def learned_rows(record: dict[str, Any], summary: dict[str, Any], graphs: Sequence[str]) -> list[dict[str, Any]]:
    """The pretrained ``learned`` placer's rows, as ``cell_rows``', from
    ``learned_equal_evaluations.json``: warm from its hint (the best heuristic), its own local
    search from the same placement."""
    rows = []
    for r in record["graphs"]:
        if r["graph"] not in graphs:
            continue
        budgets = [int(b) for b in r["budgets"]]
        for budget, cell in r["budgets"].items():
            row = {"graph": r["graph"], "agent": "learned", "start": "warm", "budget": int(budget),
                   "seeds": len(cell["learned"])}
            judge(row, cell["learned"].values(), cell["local_search"].values(), summary, max(budgets))
            rows.append(row)
    return rows


def markdown(summary: dict[str, Any], plan: Plan, learned: dict[str, Any] | None = None) -> str:
    lines = ["Equal evaluations (`experiments/equal_evaluations.py`): best step time (ms) after `budget` evaluated "
             "placements, the start included, median [min–max] over seeds "
             f"{', '.join(map(str, plan.seeds))}; local search (hill-climbing) from the learned run's first "
             "placement with the same seed and the same number of evaluations. Simulator backend, cluster mars_p100.",
             "", "Targets: warm (`warm_start.placer=best`) learned ≥ 3% faster than the search at 500 and 2,000; "
             "cold learned faster than the search at 2,000. gain = 1 − median(learned) / median(search). How many "
             "evaluations the search itself needs to reach these targets: `search_headroom.md`.", "",
             "LB (lower bound): `rlplace.bounds.communication_bound`, a bound on every placement's step time that "
             "counts the transfers forks and joins force (a verdict says when the warm target is under it); LB "
             "compute: max(longest compute-only path, total compute / number of devices) with device speeds "
             "(`rlplace.sim.lower_bound`), which ignores communication.", "",
             "| graph | ops | LB compute (ms) | LB (ms) | best heuristic (ms) | single (ms) | best vs single | "
             "placement matters |",
             "|---|---|---|---|---|---|---|---|"]
    for key in plan.graphs:
        g = summary["graphs"].get(key)
        if g is None:
            continue
        h, best = g["heuristics"], g["best_heuristic"]
        single = "OOM" if g["single_oom"] else f"{h['single']['step_time'] * 1e3:.2f}"
        vs = "single OOM" if g["best_vs_single"] is None else f"{100 * g['best_vs_single']:+.1f}%"
        size = f" ({g['zoo'][0]} {json.dumps(g['zoo'][1])})" if g["zoo"] else ""
        lines.append(f"| {key}{size} | {g['ops']} | {g['lower_bound'] * 1e3:.2f} | {g['communication_bound'] * 1e3:.2f} | "
                     f"{best} {h[best]['step_time'] * 1e3:.2f} | {single} | {vs} | "
                     f"{'yes' if g['placement_matters'] else 'no'} |")
    lines += ["", "Placement matters: the best heuristic but single is ≥ 10% faster than single, or single runs out of "
                  "memory (the GNMT profile is in the table whether or not, as the issue names it).",
              "", f"Cells of {' and '.join(ISSUE_AGENTS)} are listed whether run or not; their variants only where they ran.",
              "", "| graph | agent | start | placements | learned | local search | gain | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for row in cell_rows(summary, list(plan.graphs), list(plan.agents), list(plan.starts), plan.budgets, plan.seeds):
        head = f"| {row['graph']} | {row['agent']} | {row['start']} | {row['budget']} |"
        if "learned" in row:
            lines.append(f"{head} {spread(row['learned'])} | {spread(row['search'])} | {row['gain']} | "
                         f"{row['verdict']} |")
        else:
            lines.append(f"{head} not run (time) | not run (time) | — | — |")
    if learned is not None:
        lines += [f"| {r['graph']} | learned | warm | {r['budget']} | {spread(r['learned'])} | {spread(r['search'])} | "
                  f"{r['gain']} | {r['verdict']} |" for r in learned_rows(learned, summary, list(plan.graphs))]
        lines += ["", "Rows of `learned` (the pretrained placer of `rlplace.placers.learned`, no training run: "
                  "`evaluations` = placements, warm from its hint, the best heuristic) are read from "
                  "`learned_equal_evaluations.json` (`experiments/learned_equal_evaluations.py`): its local search "
                  f"starts from the best heuristic's placement, seeded {', '.join(map(str, plan.seeds))} as the "
                  "training seeds of its weights."]
    rates = {}
    for key, seeds in summary["cells"].items():
        for r in seeds.values():
            if r.get("generator_reseeded_at"):  # continued on another kind of device: no one device's rate
                continue
            where = (r.get("torch_device") or "cpu").split(" ")[0]
            rates.setdefault(f"{key.split('/')[1]} on {where}", []).append(r["evaluated"] / r["seconds"])
    if rates:
        lines += ["", "Training placements per second (median over the runs, 1 torch thread each): "
                  + ", ".join(f"{a} {statistics.median(v):.2f}" for a, v in rates.items()) + "."]
    lines += ["", summary["machine"]] if summary.get("machine") else []
    warm = sorted({f"{k.split('/')[0]}: {s['warm_start_placer']}" for k, seeds in summary["cells"].items()
                   for s in seeds.values() if s.get("warm_start_placer")})
    if warm:
        lines += ["", "Warm starts (`warm_start.placer=best`): " + ", ".join(warm) + "."]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], plan: Plan, path: Path, seed: int = 0) -> None:
    """One panel per graph and start: for ``seed``, the best step time so far of each of the
    library's agents (``AGENTS``, one colour each) and of the local search beside it (same colour,
    dashed) at its largest budget; the best heuristic and the lower bound (``communication_bound``) as lines."""
    from rlplace.report import curve_xy

    colours = dict(zip(AGENTS, ("tab:blue", "tab:orange", "tab:green")))
    keys = [k for k in plan.graphs if any(c.startswith(f"{k}/") and str(seed) in v for c, v in summary["cells"].items())]
    starts = list(plan.starts)
    fig, axes = plt.subplots(len(keys), len(starts), figsize=(6 * len(starts), 3.4 * len(keys)), squeeze=False,
                             layout="constrained")
    for row, key in enumerate(keys):
        g = summary["graphs"][key]
        best = g["best_heuristic"]
        for col, start in enumerate(starts):
            ax, tops = axes[row, col], []
            for agent in AGENTS:
                r = summary["cells"].get(cell_key(key, agent, start), {}).get(str(seed))
                if not r:
                    continue
                top = max(r["budgets"], key=int)
                for curve, style, label in ((r["curve"], "-", agent), (r["budgets"][top]["search_curve"], "--",
                                                                        f"local search beside {agent}")):
                    x, y = curve_xy(curve)
                    ax.step(x, y * 1e3, style, where="post", color=colours[agent], label=label)
                    tops.append(float(y[0]) * 1e3)
            ax.axhline(g["heuristics"][best]["step_time"] * 1e3, color="grey", ls=":",
                       label=f"best heuristic ({best})")
            ax.axhline(g["communication_bound"] * 1e3, color="black", ls=(0, (1, 3)), label="lower bound (LB)")
            ax.set_xscale("log")
            if tops:   # from the lower bound to a little above the slowest start
                ax.set_ylim(0.97 * g["communication_bound"] * 1e3, 1.1 * max(tops))
            ax.set_title(f"{key} ({g['ops']} ops), {start} start, seed {seed}", fontsize=10)
            ax.set_xlabel("placements evaluated")
            ax.set_ylabel("best step time (ms)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ the command line
def chosen(prog: str, flag: str, names: str, options: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``options`` named in the comma-separated ``names`` (the value of ``flag``)."""
    for name in names.split(","):
        if name not in options:
            fail(prog, f"{flag} {name!r}: not one of {', '.join(options)}")
    return {name: options[name] for name in names.split(",")}


def numbers(prog: str, flag: str, text: str) -> list[int]:
    """The comma-separated non-negative integers of ``flag``."""
    values = text.split(",")
    for value in values:
        if not value.isdigit():
            fail(prog, f"{flag} {value!r}: not a non-negative integer (give e.g. 0,1,2)")
    return [int(v) for v in values]


def main(argv: Sequence[str] | None = None) -> None:
    prog = Path(__file__).name
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--starts", default=",".join(STARTS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--results", default=str(ROOT / "experiments" / "results"))
    parser.add_argument("--work", default="outputs/equal_evaluations")
    parser.add_argument("--markdown", action="store_true", help="only rewrite the markdown and plot from the json")
    parser.add_argument("--extra", nargs="*", default=["torch_threads=1"],
                        help="more rlplace-train overrides (torch_device=cuda: train on a GPU)")
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="merge DIR/equal_evaluations.json of other "
                        "processes into --results, then rewrite the markdown and plot")
    parser.add_argument("--replace", action="store_true", help="with --merge: a seed's merged record replaces the "
                        "recorded one whole (a re-run), instead of the longer run winning")
    args = parser.parse_args(argv)
    plan = Plan(graphs=chosen(prog, "--graphs", args.graphs, GRAPHS), agents=chosen(prog, "--agents", args.agents, AGENTS),
                starts=chosen(prog, "--starts", args.starts, STARTS), seeds=numbers(prog, "--seeds", args.seeds),
                budgets=numbers(prog, "--budgets", args.budgets), extra=args.extra)
    table = Plan(graphs=GRAPHS, agents={**AGENTS, **{name: [] for name in RETIRED}}, seeds=plan.seeds)  # the whole table, cells not run marked
    json_path = Path(args.results) / "equal_evaluations.json"
    if args.merge:
        summary = json.loads(json_path.read_text()) if json_path.is_file() else {"graphs": {}, "cells": {}}
        for directory in args.merge:
            other = Path(directory) / "equal_evaluations.json"
            try:
                merge(summary, json.loads(other.read_text()), str(other), replace=args.replace)
            except (OSError, ValueError, KeyError) as exc:
                fail(prog, f"cannot merge {other}: {exc}")
        save(summary, json_path)
    report(plan, Path(args.results), Path(args.work), run=not (args.markdown or args.merge), table=table)


def report(plan: Plan, results: Path, work: Path, run: bool = True, table: Plan | None = None) -> dict[str, Any]:
    """Run what is missing of ``plan`` (``run``), then write the markdown and the plot of
    ``table`` (default: ``plan``) from the json."""
    json_path = results / "equal_evaluations.json"
    summary = run_plan(plan, json_path, work) if run else json.loads(json_path.read_text())
    table = table or plan
    learned_path = results / "learned_equal_evaluations.json"
    learned = json.loads(learned_path.read_text()) if learned_path.is_file() else None
    (results / "equal_evaluations.md").write_text(markdown(summary, table, learned))
    plot(summary, table, results / "equal_evaluations.png", seed=min(table.seeds))
    return summary


if __name__ == "__main__":
    run_script(main)
