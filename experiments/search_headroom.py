"""Headroom under the equal-evaluation targets (issue 16 item 3): how far below a 500- or
2,000-evaluation local search can placements found by search go at all?

For each graph of ``equal_evaluations.py`` (same graphs, cluster and warm start: the best
heuristic of its recorded graph row), ``local_search`` and ``annealing`` (``rlplace.placers.search``,
their defaults) run 20,000 evaluations from the best heuristic's placement, 3 seeds each. The
table puts their best step time after 500, 2,000, 5,000 and 20,000 evaluations (median over the
seeds) beside the warm target, 3% under the median of ``equal_evaluations``' recorded searches at
500 and 2,000 placements (these start from the learned runs' first placement, the same placement).

A search with 40 times the budget is not a bound on what a learned placer could find, but it
measures how much the step time moves at all around the warm start: where 20,000 evaluations do
not reach the target, a learned placer with 500 has to find what the search does not.

    python experiments/search_headroom.py [--graphs gnmt4,bert] [--seeds 0,1,2] [--evaluations 20000]

Results: ``results/search_headroom.{md,json}``; finished (graph, searcher, seed) cached in the json.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import equal_evaluations as E  # noqa: E402
from rlplace.errors import ArgumentParser, fail, run_script  # noqa: E402
from rlplace.placers.search import Annealing, LocalSearch  # noqa: E402
from rlplace.presets import instantiate_node  # noqa: E402

SEARCHERS = {"local_search": LocalSearch, "annealing": Annealing}
AT = (500, 2000, 5000, 20000)


@functools.lru_cache(maxsize=1)
def problem(key: str, work: Path):
    """(graph, cluster) of ``key``, built once for all its runs (the jobs go graph by graph)."""
    cfg = E.compose_train(E.graph_overrides(E.GRAPHS[key], E.ZOO, work))
    return instantiate_node(cfg, "graph"), instantiate_node(cfg, "cluster")


def run(key: str, searcher: str, seed: int, evaluations: int, start: str, work: Path) -> dict:
    graph, cluster = problem(key, work)
    placer = SEARCHERS[searcher](start=start, evaluations=evaluations, seed=seed, progress=False)
    placer.place(graph, cluster)
    r = placer.result
    return {"start": r.start, "start_step_time": r.start_step_time, "step_time": r.step_time,
            "seconds": r.seconds, "last_improvement_at": r.last_improvement_at,
            "at": {str(n): r.curve[min(n, len(r.curve)) - 1] for n in AT if n <= evaluations}}


def warm_searches(recorded: dict, key: str, budget: str) -> list[float]:
    """The recorded searches of ``key``'s warm cells at ``budget``, one per seed: every warm cell's
    search of a seed starts from the same placement (the best heuristic's) with the same seed."""
    by_seed = {}
    for cell, seeds in recorded["cells"].items():
        if cell.startswith(f"{key}/") and cell.endswith("/warm"):
            by_seed.update({seed: r["budgets"][budget]["search"] for seed, r in seeds.items() if budget in r["budgets"]})
    return list(by_seed.values())


def markdown(summary: dict, recorded: dict) -> str:
    lines = ["Headroom under the equal-evaluation targets (`experiments/search_headroom.py`): best step time (ms) of "
             "local search and annealing from the best heuristic after 500 / 2,000 / 5,000 / 20,000 evaluations, "
             "median over the seeds, beside the warm target of `equal_evaluations.md` (3% under the median of its "
             "searches at 500 and 2,000 placements from the same start). Simulator, cluster mars_p100.", "",
             "LB (lower bound, as in `equal_evaluations.md`): `rlplace.bounds.communication_bound`, a bound on every "
             "placement's step time that counts the transfers forks and joins force; LB compute: max(longest "
             "compute-only path, total compute / number of devices) with device speeds (`rlplace.sim.lower_bound`), "
             "which ignores communication.", "",
             "| graph | LB compute (ms) | LB (ms) | start (ms) | target at 500 | target at 2,000 | searcher | seeds | @500 | @2,000 | @5,000 | "
             "@20,000 | last gain at (median) | best vs start |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, searchers in summary["runs"].items():
        g = recorded["graphs"][key]
        targets = []
        for budget in ("500", "2000"):
            searches = warm_searches(recorded, key, budget)
            targets.append(f"{(1 - E.WARM_GAIN) * statistics.median(searches) * 1e3:.2f}" if searches else "—")
        for name, seeds in searchers.items():
            runs = list(seeds.values())
            at = [f"{statistics.median(r['at'][str(n)] for r in runs) * 1e3:.2f}" if all(str(n) in r["at"] for r in runs)
                  else "—" for n in AT]
            start = runs[0]["start_step_time"]
            gain = 1 - statistics.median(r["step_time"] for r in runs) / start
            lines.append(f"| {key} | {g['lower_bound'] * 1e3:.2f} | {g['communication_bound'] * 1e3:.2f} | "
                         f"{runs[0]['start']} {start * 1e3:.2f} | {targets[0]} | {targets[1]} | {name} | "
                         f"{len(runs)} | {' | '.join(at)} | "
                         f"{statistics.median(r['last_improvement_at'] for r in runs):.0f} | {-100 * gain:+.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    prog = Path(__file__).name
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(E.GRAPHS))
    parser.add_argument("--searchers", default=",".join(SEARCHERS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--evaluations", type=int, default=AT[-1])
    parser.add_argument("--results", default=str(E.ROOT / "experiments" / "results"))
    parser.add_argument("--work", default="outputs/equal_evaluations")
    args = parser.parse_args(argv)
    results = Path(args.results)
    source = results / "equal_evaluations.json"
    try:
        recorded = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        fail(prog, f"{source}: cannot read it ({type(exc).__name__}): the warm starts and targets come from "
               "experiments/equal_evaluations.py's results")
    graphs = E.chosen(prog, "--graphs", args.graphs, recorded["graphs"])
    searchers = E.chosen(prog, "--searchers", args.searchers, SEARCHERS)
    seeds = E.numbers(prog, "--seeds", args.seeds)
    path = results / "search_headroom.json"
    summary = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    jobs = [(g, s, seed) for g in graphs for s in searchers for seed in seeds
            if str(seed) not in summary["runs"].get(g, {}).get(s, {})]
    for key, searcher, seed in tqdm(jobs, desc="search headroom", unit="run"):
        start = recorded["graphs"][key]["best_heuristic"]
        record = run(key, searcher, seed, args.evaluations, start, Path(args.work))
        summary["runs"].setdefault(key, {}).setdefault(searcher, {})[str(seed)] = record
        path.write_text(json.dumps(summary, indent=1))
    (results / "search_headroom.md").write_text(markdown(summary, recorded))


if __name__ == "__main__":
    run_script(main)
