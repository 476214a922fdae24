"""Fine-tuning the pretrained ``learned`` placer with 50 evaluations (issue 41, item 5's second
target), on the held-out test family (``rlplace.learn.family.test_family``).

    PYTHONPATH=. .venv/bin/python experiments/learned_finetune.py [--quick]

Per graph and per seed (3): the shipped weights fine-tuned by the training loop
(``agent=learned``, PPO, 10 placements per update) with a budget of 50 evaluated placements, the
best heuristic's placement evaluated first (``warm_start.placer=best``, ``first_sample``; so the
run starts where the search does), scored by its best valid step time, including the greedy
placement the loop evaluates at the end (the 51st; reported separately); against a
``local_search`` of 50 evaluations from the best heuristic's placement with the same seed. Every
step time is the simulator's. The target: fine-tuned at least 3% faster than the search
(geometric mean over the graphs, median over the seeds).

Writes experiments/results/learned_finetune.{json,md} (``--quick``: two small graphs, one seed,
``*_quick``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from rlplace.backends import SimBackend
from rlplace.errors import ArgumentParser, run_script
from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.configs import TrainConfig, WarmStartConfig
from rlplace.learn.family import test_family
from rlplace.learn.train import train
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS, LocalSearch, evaluate_rows

RESULTS = Path(__file__).parent / "results"
EVALUATIONS = 50
SEEDS = (0, 1, 2)
TARGET = 0.03


def step_time(graph, cluster, placement) -> float:
    over, step = evaluate_rows(graph, cluster, np.asarray(placement.device_of)[None])
    return float("inf") if over[0] > 0 else float(step[0])


def run_graph(instance, seeds, work: Path) -> dict:
    graph, cluster = instance.graph, instance.cluster
    placements = {name: make_placer(name, seed=0).place(graph, cluster) for name in HEURISTICS}
    heuristics = {name: step_time(graph, cluster, p) for name, p in placements.items()}
    best = min(heuristics, key=heuristics.get)
    row = {"graph": graph.name, "kind": instance.kind, "ops": graph.num_ops, "cluster": cluster.name,
           "best_heuristic": best, "best_step_time": heuristics[best], "seeds": {}}
    for seed in seeds:
        config = TrainConfig(agent="learned", algorithm="ppo", samples=10, budget_placements=EVALUATIONS,
                             warm_start=WarmStartConfig(placer="best", first_sample=True), seed=seed,
                             progress=False, plots=False, torch_device="cpu", checkpoint_every=1000)
        run_dir = work / f"{graph.name}_{cluster.name}_s{seed}"
        started = time.perf_counter()
        summary = train(graph, cluster, SimBackend(), config, run_dir)
        seconds = time.perf_counter() - started
        progress = read_checkpoint(run_dir / "checkpoint.pt").graph_progress()
        sampled = [t for t, ok in zip(progress["step_times"][:EVALUATIONS], progress["valid"]) if ok]
        greedy = summary["greedy_evaluation"]
        search = LocalSearch(evaluations=EVALUATIONS, seed=seed, progress=False).search(
            graph, cluster, placements[best], best)
        row["seeds"][str(seed)] = {
            "fine_tuned": min(sampled, default=float("inf")), "seconds": seconds,
            "greedy_after": float("inf") if greedy["oom"] else greedy["step_time"],
            "local_search": search.step_time if search.overflow_bytes == 0 else float("inf")}
    return row


def gmean(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.exp(np.mean(np.log(x)))) if len(x) and np.all(np.isfinite(x)) else float("inf")


def summary(rows: list[dict], seeds) -> dict:
    out = {}
    for seed in map(str, seeds):
        tuned = np.array([r["seeds"][seed]["fine_tuned"] for r in rows])
        greedy = np.array([r["seeds"][seed]["greedy_after"] for r in rows])
        search = np.array([r["seeds"][seed]["local_search"] for r in rows])
        best = np.array([r["best_step_time"] for r in rows])
        out[seed] = {"tuned_over_search_gmean": gmean(tuned / search),
                     "tuned_over_search_max": float(np.max(tuned / search)),
                     "tuned_over_best_gmean": gmean(tuned / best),
                     "search_over_best_gmean": gmean(search / best),
                     "greedy_after_over_best_gmean": gmean(greedy / best),
                     "graphs_tuned_faster_than_search": int(np.sum(tuned < search * (1 - 1e-9))),
                     "graphs_search_faster": int(np.sum(search < tuned * (1 - 1e-9)))}
    return out


def ms(x: float) -> str:
    return "OOM" if not np.isfinite(x) else f"{x * 1e3:.1f}"


def markdown(result: dict) -> str:
    seeds = list(result["summary"])
    lines = ["# Fine-tuning the pretrained `learned` placer with 50 evaluations", "",
             "Generated by `experiments/learned_finetune.py` from `learned_finetune.json`. The shipped weights "
             f"fine-tuned by `rlplace-train agent=learned` (PPO, 10 placements per update, {EVALUATIONS} evaluated "
             "placements, the best heuristic's placement the first of them) against a local search of "
             f"{EVALUATIONS} evaluations from the best heuristic, same seed; each scored by the best valid step "
             "time among its evaluations (simulator). Ratios are geometric means over the held-out test family.",
             "", "| | " + " | ".join(f"seed {s}" for s in seeds) + " | median |", "|---" * (len(seeds) + 2) + "|"]
    for key in next(iter(result["summary"].values())):
        values = [result["summary"][s][key] for s in seeds]
        fmt = (lambda v: f"{v:.3f}") if "gmean" in key or "max" in key else (lambda v: f"{v:d}")
        lines.append(f"| {key} | " + " | ".join(fmt(v) for v in values) + f" | {fmt(statistics.median(values))} |")
    lines += ["", f"Target (issue 41): fine-tuned at least {TARGET:.0%} faster than the search, i.e. "
              f"tuned_over_search_gmean <= {1 - TARGET:.2f}: "
              + ("**met**" if statistics.median(v["tuned_over_search_gmean"] for v in result["summary"].values())
                 <= 1 - TARGET else "**not met**") + ".", "",
              "| graph | ops | cluster | best heuristic (ms) | fine-tuned (ms, median) | local search (ms, median) | "
              "greedy after (ms, median) | seconds (median) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        med = {k: statistics.median(v[k] for v in r["seeds"].values())
               for k in ("fine_tuned", "local_search", "greedy_after", "seconds")}
        lines.append(f"| {r['graph']} | {r['ops']} | {r['cluster']} | {ms(r['best_step_time'])} ({r['best_heuristic']}) | "
                     f"{ms(med['fine_tuned'])} | {ms(med['local_search'])} | {ms(med['greedy_after'])} | "
                     f"{med['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> dict:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small graphs, one seed (seconds)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    family = test_family()
    seeds = SEEDS
    if args.quick:
        family = [i for i in family if i.graph.num_ops <= 400][:2]
        seeds = (0,)
    with tempfile.TemporaryDirectory() as work:
        rows = [run_graph(instance, seeds, Path(work)) for instance in tqdm(family, desc="test family")]
    result = {"evaluations": EVALUATIONS, "seeds": list(seeds), "rows": rows, "summary": summary(rows, seeds)}
    stem = "learned_finetune_quick" if args.quick else "learned_finetune"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1, default=float))
    (RESULTS / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    run_script(main)
