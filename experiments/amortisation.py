"""Amortisation (issue 16 item 3; Mars Table 3, GDP, Placeto, GiPH): one Mars policy trained on a
family of graphs (``rlplace.learn.train``) places graphs it has not seen.

    OMP_NUM_THREADS=1 PYTHONPATH=. nice -n 10 .venv/bin/python experiments/amortisation.py   # ~1 h, load 8-12
    ... experiments/amortisation.py --smoke OUT_DIR                                           # minutes
    ... amortisation.py A --seeds 0 & ... amortisation.py B --seeds 1 & ...                   # side by side,
    ... amortisation.py OUT --merge A/*.json B/*.json ...                                     # then joined

Per unseen graph and seed: **zero-shot**, the trained policy's greedy placement (1 evaluation);
**fine-tuned**, the best of the 50 placements sampled while fine-tuning the trained policy there
(PPO, 5 updates of 10; its greedy placement afterwards is not counted); **fine-tuned warm**, the
same but starting where the search starts: the best heuristic's placement behaviour-cloned and
evaluated first (1 of the 50); **local search**, 50 evaluations (its start's included) from the
best heuristic; with the best heuristic (best of ``HEURISTICS`` by simulated step time),
``single``, the lower bounds (``rlplace.bounds``), and the controls from scratch (no family).
Targets (issue 16): zero-shot within 5% of the best heuristic, fine-tuned faster than the local
search (medians over the seeds).

The family and the unseen graphs are layered DAGs (``rlplace.zoo.layered``: the issue's
"layered DAG" setting) of other sizes, widths, fan-ins and communication-to-compute ratios,
where placement matters (the best heuristic is 3x faster than ``single``). Smaller than the
papers': the zoo's TensorFlow graphs at sizes where placement matters have 1,500 or more units
(GNMT-2 with 4 steps: 1,974 ops, 1,480 units, and there the best heuristic is only 8% faster
than ``single``), and Mars trains at ~3 placements/s at 240 units on this CPU with the policy
below (paper sizes: 0.9/s). So the policy is smaller than the paper's (encoder 64, LSTM 128,
segments of 32, against 256, 512, 128; op types hashed into 16 buckets) and each seed trains
``FAMILY_BUDGET`` placements over the family (the papers: thousands per graph).

Every finished cell goes to ``amortisation.json`` at once; a rerun with the same setup does
only what is missing (``--max-minutes``: cells not started by then are "not run (time)").
Training runs live in ``--work`` (default ~/.cache/rlplace/amortisation).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm

from rlplace.errors import ArgumentParser, run_script
from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.configs import TrainConfig, WarmStartConfig
from rlplace.learn.placer import PolicyPlacer
from rlplace.learn.policies import make_policy
from rlplace.learn.train import CHECKPOINT, train
from rlplace.backends import SimBackend
from rlplace.bounds import communication_bound
from rlplace.cluster import Cluster
from rlplace.learn.env import PlacementEnv
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS, LocalSearch, best_of
from rlplace.presets import load_preset
from rlplace.sim import lower_bound, simulate
from rlplace.zoo import layered

RESULTS = Path(__file__).parent / "results"
NOT_RUN = "not run (time)"
WITHIN = 0.05   # zero-shot within 5% of the best heuristic


@dataclass
class Setup:
    """What the recorded numbers depend on; a json of another setup is not reused."""

    family: dict[str, dict]           # name -> layered() knobs
    unseen: dict[str, dict]
    policy: dict[str, Any]
    family_budget: int                # placements over the family, per seed
    finetune: int = 50
    search: int = 50
    samples: int = 10
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    cluster: str = "mars_p100"
    behaviour_cloning: bool = False   # the family's warm start also clones every graph's heuristic jointly


FULL = Setup(
    family={"L160w8": dict(num_ops=160, width=8, seed=1), "L240w12": dict(num_ops=240, width=12, seed=2),
            "L320w16": dict(num_ops=320, width=16, seed=3),
            "L200w4_ccr3": dict(num_ops=200, width=4, max_fan_in=2, output_bytes_mean=3e6, seed=4)},
    unseen={"L280w10": dict(num_ops=280, width=10, seed=11), "L400w8": dict(num_ops=400, width=8, seed=12),
            "L240w12_ccr3": dict(num_ops=240, width=12, output_bytes_mean=3e6, seed=13)},
    policy=dict(encoder_hidden=64, placer_hidden=128, segment_size=32, type_buckets=16), family_budget=1200)
SMOKE = Setup(
    family={"T24w4": dict(num_ops=24, width=4, seed=1), "T20w2": dict(num_ops=20, width=2, seed=2)},
    unseen={"T28w4": dict(num_ops=28, width=4, seed=3)},
    policy=dict(encoder_hidden=8, placer_hidden=16, segment_size=4, type_buckets=8, pretrain=False),
    family_budget=16, finetune=4, search=4, samples=4, seeds=[0, 1])


def graph_of(name: str, knobs: dict) -> OpGraph:
    return layered(**knobs, name=name)


def train_config(setup: Setup, seed: int, budget: int, **extra) -> TrainConfig:
    return TrainConfig(agent="mars", algorithm="ppo", samples=setup.samples, policy=dict(setup.policy),
                       budget_placements=budget, seed=seed, progress=False, plots=False, **extra)


# ------------------------------------------------------------------------------ cells
def family_cell(setup: Setup, cluster: Cluster, seed: int, work: Path) -> dict:
    graphs = [graph_of(n, k) for n, k in setup.family.items()]
    warm = WarmStartConfig(placer="best", first_sample=True, behaviour_cloning=setup.behaviour_cloning)
    config = train_config(setup, seed, setup.family_budget, warm_start=warm)
    summary = train(graphs, cluster, SimBackend(), config, work / f"family_s{seed}")
    return {"seconds": summary["seconds"], "evaluated": summary["evaluated"],
            "placements_per_second": summary["placements_per_second"],
            "graphs": {n: {"best_step_time": g["best_step_time"], "warm_start_step_time": g.get("heuristic_step_time"),
                           "greedy_step_time": g["greedy_evaluation"]["step_time"],
                           "greedy_oom": g["greedy_evaluation"]["oom"]} for n, g in summary["graphs"].items()}}


def reference_cell(graph: OpGraph, cluster: Cluster, heuristic: tuple) -> dict:
    name, _, overflow, step = heuristic
    return {"best_heuristic": name, "best_heuristic_step_time": step, "best_heuristic_oom": overflow > 0,
            "single": simulate(graph, cluster, make_placer("single").place(graph, cluster)).step_time,
            "lower_bound": lower_bound(graph, cluster), "communication_bound": communication_bound(graph, cluster)}


def target_cell(setup: Setup, cluster: Cluster, graph: OpGraph, heuristic: tuple, seed: int, work: Path) -> dict:
    """Zero-shot and fine-tuned placements of the family's policy, and the local search from
    ``heuristic`` (``search.best_of``: the best heuristic) with the fine-tuning's budget."""
    checkpoint = work / f"family_s{seed}" / CHECKPOINT
    zero = simulate(graph, cluster, PolicyPlacer("mars", checkpoint).place(graph, cluster))
    config = train_config(setup, seed, setup.finetune, init_checkpoint=str(checkpoint))
    config.policy["pretrain"] = False   # the encoder comes from the checkpoint
    start = time.perf_counter()
    tuned, evaluations = best_sampled(graph, cluster, config, work / f"finetune_{graph.name}_s{seed}", setup.finetune)
    name, placement, overflow, step = heuristic
    search = LocalSearch(evaluations=setup.search, seed=seed, progress=False).search(
        graph, cluster, placement, name, (overflow, step), spent=1)
    return {"zero_shot": zero.step_time, "zero_shot_oom": zero.oom,
            "fine_tuned": tuned, "fine_tune_evaluations": evaluations,
            "fine_tune_seconds": time.perf_counter() - start,
            "local_search": search.step_time, "local_search_oom": search.oom, "search_evaluations": search.evaluations}


def direct_cell(setup: Setup, cluster: Cluster, graph: OpGraph, seed: int, work: Path) -> dict:
    """Controls without the family: the greedy placement of an untrained policy (same options
    and seed, no pre-training), and the best of the same number of placements trained from
    scratch on the graph (Mars' DGI pre-training on it included, as Mars Table 3's "direct")."""
    env = PlacementEnv(graph, cluster, mode="one_shot")
    fresh = make_policy("mars", env, seed=seed, **{**setup.policy, "pretrain": False})
    untrained = simulate(graph, cluster, env.units.expand(fresh.greedy().numpy()))
    config = train_config(setup, seed, setup.finetune)
    direct, _ = best_sampled(graph, cluster, config, work / f"direct_{graph.name}_s{seed}", setup.finetune)
    return {"untrained_greedy": untrained.step_time, "untrained_greedy_oom": untrained.oom, "direct": direct}


def warm_cell(setup: Setup, cluster: Cluster, graph: OpGraph, seed: int, work: Path) -> dict:
    """Fine-tuning warm-started on the unseen graph from its best heuristic, as the local search
    starts: its placement behaviour-cloned, then evaluated as the first sample (1 of the
    ``finetune`` evaluations); from the family's policy and, as the control, from scratch."""
    warm = WarmStartConfig(placer="best", first_sample=True, behaviour_cloning=True)
    checkpoint = work / f"family_s{seed}" / CHECKPOINT
    config = train_config(setup, seed, setup.finetune, init_checkpoint=str(checkpoint), warm_start=warm)
    config.policy["pretrain"] = False
    tuned, _ = best_sampled(graph, cluster, config, work / f"finetune_warm_{graph.name}_s{seed}", setup.finetune)
    scratch = train_config(setup, seed, setup.finetune, warm_start=warm)
    direct, _ = best_sampled(graph, cluster, scratch, work / f"direct_warm_{graph.name}_s{seed}", setup.finetune)
    return {"fine_tuned_warm": tuned, "direct_warm": direct}


def best_sampled(graph: OpGraph, cluster: Cluster, config: TrainConfig, run_dir: Path, n: int) -> tuple[float, int]:
    """Train (``rlplace.learn.train.train``); the best valid step time of the first ``n``
    placements sampled (the greedy placement the trainer evaluates at the end is not one) and
    how many there were."""
    train(graph, cluster, SimBackend(), config, run_dir)
    progress = read_checkpoint(run_dir / CHECKPOINT).graph_progress()
    sampled = [t if ok else math.inf for t, ok in zip(progress["step_times"], progress["valid"])][:n]
    return min(sampled), len(sampled)


# ------------------------------------------------------------------------------ the run
def run(setup: Setup, out: Path, work: Path, max_minutes: float | None, stem: str = "amortisation") -> dict:
    """Compute every missing cell (in order: references, family per seed, then its targets),
    writing the json after each; returns it."""
    path = out / f"{stem}.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    if record.get("setup") != json.loads(json.dumps(asdict(setup))):
        record = {"setup": asdict(setup), "cells": {}}
    cells = record["cells"]
    cluster = load_preset("cluster", setup.cluster)
    unseen = {n: graph_of(n, k) for n, k in setup.unseen.items()}
    starts: dict[str, tuple] = {}   # the best heuristic per unseen graph (search.best_of), found once

    def start_of(name: str) -> tuple:
        if name not in starts:
            starts[name] = best_of(unseen[name], cluster, HEURISTICS)
        return starts[name]

    jobs: list[tuple[str, Callable[[], dict]]] = [
        (f"reference/{n}", lambda n=n, g=g: reference_cell(g, cluster, start_of(n))) for n, g in unseen.items()]
    for seed in setup.seeds:
        jobs.append((f"family/s{seed}", lambda s=seed: family_cell(setup, cluster, s, work)))
        jobs += [(f"target/{n}/s{seed}", lambda n=n, g=g, s=seed: target_cell(setup, cluster, g, start_of(n), s, work))
                 for n, g in unseen.items()]
    jobs += [(f"direct/{n}/s{seed}", lambda g=g, s=seed: direct_cell(setup, cluster, g, s, work))
             for seed in setup.seeds for n, g in unseen.items()]
    jobs += [(f"warm/{n}/s{seed}", lambda g=g, s=seed: warm_cell(setup, cluster, g, s, work))
             for seed in setup.seeds for n, g in unseen.items()]
    deadline = None if max_minutes is None else time.monotonic() + 60 * max_minutes
    torch.set_num_threads(1)
    for key, job in tqdm(jobs, desc="amortisation cells", unit="cell"):
        if isinstance(cells.get(key), dict):
            continue
        seed = key.rsplit("/", 1)[1]
        family_missing = key.startswith(("target/", "warm/")) and not isinstance(cells.get(f"family/{seed}"), dict)
        if family_missing or (deadline is not None and time.monotonic() > deadline):
            cells[key] = NOT_RUN
        else:
            cells[key] = job()
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1, default=float))
    (out / f"{stem}.md").write_text(render(record))
    return record


def merge(records: list[dict]) -> dict:
    """One record from runs of one setup that differ only in their seeds (run side by side,
    ``--seeds N`` each): the union of the seeds and of the cells; a cell two runs both hold
    must be the same."""
    seeds = sorted({s for r in records for s in r["setup"]["seeds"]})
    setups = [{**r["setup"], "seeds": seeds} for r in records]
    if any(s != setups[0] for s in setups):
        raise ValueError("amortisation --merge: the runs differ in more than their seeds")
    cells: dict[str, Any] = {}
    for record in records:
        for key, cell in record["cells"].items():
            if isinstance(cells.get(key), dict) and isinstance(cell, dict) and cells[key] != cell:
                raise ValueError(f"amortisation --merge: cell {key} differs between the runs")
            if isinstance(cell, dict) or key not in cells:
                cells[key] = cell
    return {"setup": setups[0], "cells": cells}


def spread(values: list[float]) -> str:
    v = np.asarray(values) * 1e3
    return f"{np.median(v):.2f} [{v.min():.2f}–{v.max():.2f}]" if len(v) else NOT_RUN


def verdicts(record: dict, name: str) -> dict[str, Any]:
    """Per unseen graph: the medians over the seeds that ran and the two targets' verdicts."""
    cells, setup = record["cells"], record["setup"]
    ref = cells.get(f"reference/{name}")
    runs = [c for s in setup["seeds"] if isinstance(c := cells.get(f"target/{name}/s{s}"), dict)]
    warm = [c for s in setup["seeds"] if isinstance(c := cells.get(f"warm/{name}/s{s}"), dict)]
    if not isinstance(ref, dict) or not runs:
        return {"runs": runs, "warm": warm, "ref": ref, "zero_shot_met": None, "fine_tune_met": None,
                "warm_met": None}
    best = ref["best_heuristic_step_time"]
    zero = float(np.median([r["zero_shot"] for r in runs]))
    tuned = float(np.median([r["fine_tuned"] for r in runs]))
    search = float(np.median([r["local_search"] for r in runs]))
    tuned_warm = float(np.median([w["fine_tuned_warm"] for w in warm])) if warm else math.nan
    return {"runs": runs, "warm": warm, "ref": ref, "zero_shot_ratio": zero / best,
            "zero_shot_met": zero <= (1 + WITHIN) * best, "fine_tune_met": tuned < search,
            "fine_tune_vs_search": tuned / search, "warm_met": tuned_warm < search if warm else None,
            "warm_vs_search": tuned_warm / search}


def render(record: dict) -> str:
    setup, cells = record["setup"], record["cells"]
    lines = ["# Amortisation: one Mars policy on a family of graphs, placing unseen graphs (issue 16)", "",
             "Written by `experiments/amortisation.py`. Step times in ms, median [min–max] over seeds "
             f"{setup['seeds']}; cluster `{setup['cluster']}`.", "",
             f"- family (trained on): {', '.join(f'`{n}` {k}' for n, k in setup['family'].items())}",
             f"- unseen: {', '.join(f'`{n}` {k}' for n, k in setup['unseen'].items())}",
             f"- policy: Mars {setup['policy']} (smaller than the paper's 256/512/128), PPO, "
             f"{setup['samples']} samples per update; {setup['family_budget']} placements over the family per seed, "
             "warm start per graph: the best heuristic's placement as its first sample"
             + ("; all graphs' placements behaviour-cloned jointly first" if setup.get("behaviour_cloning") else ""),
             f"- zero-shot: the greedy placement, 1 evaluation; fine-tuned: best of {setup['finetune']} placements "
             f"sampled while fine-tuning; local search: {setup['search']} evaluations from the best heuristic "
             "(its start's included); warm: fine-tuning that starts where the search does, the best heuristic's "
             "placement cloned and evaluated first (1 of the 50)",
             "- LB (lower bound): `rlplace.bounds.communication_bound`, a bound on every placement's step time that "
             "counts the transfers forks and joins force; LB compute: max(longest compute-only path, total compute / "
             "number of devices) with device speeds (`rlplace.sim.lower_bound`), which ignores communication", ""]
    for seed in setup["seeds"]:
        fam = cells.get(f"family/s{seed}")
        if not isinstance(fam, dict):
            lines.append(f"- family training, seed {seed}: {fam or NOT_RUN}")
            continue
        graphs = "; ".join(f"{n} {g['greedy_step_time'] * 1e3:.1f} / {g['best_step_time'] * 1e3:.1f} / "
                           f"{(g['warm_start_step_time'] or math.nan) * 1e3:.1f}" for n, g in fam["graphs"].items())
        lines.append(f"- family training, seed {seed}: {fam['evaluated']} placements in {fam['seconds']:.0f} s "
                     f"({fam['placements_per_second']:.2f}/s); greedy / best sampled / warm start (ms): {graphs}")
    ratios = [g["greedy_step_time"] / g["warm_start_step_time"] for s in setup["seeds"]
              if isinstance(fam := cells.get(f"family/s{s}"), dict) for g in fam["graphs"].values()]
    if ratios:
        lines.append(f"- on the training graphs themselves the trained policy's greedy placement is "
                     f"{np.median(ratios):.3f}× the best heuristic (median over graphs and seeds; "
                     f"{min(ratios):.3f}–{max(ratios):.3f})")
    columns = ["unseen graph", "untrained policy (greedy)", "zero-shot (1 eval)",
               f"fine-tuned (best of {setup['finetune']})", f"from scratch (best of {setup['finetune']})",
               f"fine-tuned warm (best of {setup['finetune']})", f"from scratch warm (best of {setup['finetune']})",
               f"local search ({setup['search']} evals)", "best heuristic", "single", "LB compute", "LB",
               f"zero-shot ≤ {1 + WITHIN:.2f} × best heuristic", "fine-tuned < local search",
               "fine-tuned warm < local search"]
    lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name in setup["unseen"]:
        v = verdicts(record, name)
        ref, runs = v["ref"], v["runs"]
        if not isinstance(ref, dict):
            lines.append(f"| `{name}` | " + " | ".join([NOT_RUN] * (len(columns) - 1)) + " |")
            continue
        direct = [c for s in setup["seeds"] if isinstance(c := cells.get(f"direct/{name}/s{s}"), dict)]
        word = lambda met, detail: NOT_RUN if met is None else f"{'met' if met else 'not met'} ({detail})"  # noqa: E731
        lines.append(" | ".join([
            f"| `{name}`", spread([c["untrained_greedy"] for c in direct]), spread([r["zero_shot"] for r in runs]),
            spread([r["fine_tuned"] for r in runs]), spread([c["direct"] for c in direct]),
            spread([w["fine_tuned_warm"] for w in v["warm"]]), spread([w["direct_warm"] for w in v["warm"]]),
            spread([r["local_search"] for r in runs]),
            f"{ref['best_heuristic_step_time'] * 1e3:.2f} ({ref['best_heuristic']})", f"{ref['single'] * 1e3:.2f}",
            f"{ref['lower_bound'] * 1e3:.2f}", f"{ref['communication_bound'] * 1e3:.2f}",
            word(v["zero_shot_met"], f"{v.get('zero_shot_ratio', math.nan):.3f}×"),
            word(v["fine_tune_met"], f"{v.get('fine_tune_vs_search', math.nan):.3f}× search"),
            word(v["warm_met"], f"{v.get('warm_vs_search', math.nan):.3f}× search")]) + " |")
    missing = sorted(k for k, c in cells.items() if c == NOT_RUN)
    if missing:
        lines += ["", f"Not run (time): {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=RESULTS)
    parser.add_argument("--smoke", action="store_true", help="tiny graphs and budgets (seconds)")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "rlplace" / "amortisation")
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--family-budget", type=int, default=None,
                        help="placements over the family per seed; written to amortisation_family<N>.*")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--behaviour-cloning", action="store_true",
                        help="the family's warm start clones every graph's heuristic jointly; written to *_bc.*")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                        help="merge these runs' jsons (one setup, other seeds) into OUT/amortisation.json and .md")
    args = parser.parse_args(argv)
    if args.merge:
        record = merge([json.loads(p.read_text()) for p in args.merge])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "amortisation.json").write_text(json.dumps(record, indent=1, default=float))
        (args.out / "amortisation.md").write_text(render(record))
        return record
    setup, stem = (SMOKE, "smoke") if args.smoke else (FULL, "full")
    if args.family_budget is not None or args.seeds is not None or args.behaviour_cloning:
        setup = replace(setup, family_budget=args.family_budget or setup.family_budget, seeds=args.seeds or setup.seeds,
                        behaviour_cloning=args.behaviour_cloning)
        stem = (f"family{setup.family_budget}_seeds{'_'.join(map(str, setup.seeds))}"
                f"{'_bc' if setup.behaviour_cloning else ''}")
    name = "amortisation" if stem in ("smoke", "full") else f"amortisation_{stem}"
    return run(setup, args.out, args.work / stem, args.max_minutes, name)


if __name__ == "__main__":
    run_script(main)
