"""Search placers (``local_search``, ``annealing``; rlplace/placers/search.py): best step time
at 100 / 500 / 2,000 evaluations, from ``single`` and from the best heuristic, 3 seeds, with
the seconds taken; and the choice of their defaults (candidates per round, temperature) at
equal evaluations.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/bench_search.py           # ~10 min
    OMP_NUM_THREADS=1 .venv/bin/python experiments/bench_search.py --quick   # smoke run

Graphs: the Baechi authors' GNMT profile on ``mars_p100`` (issue 16's setting), and the layered
DAG of 2,000 ops of experiments/placer_quality.py with ample and with binding memory. Each
budget is its own run (annealing's schedule spans its budget); every start counts as one
evaluation. The best heuristic is the best of ``HEURISTICS`` by simulated step time, computed
once per graph. Writes experiments/results/bench_search.{json,md} (``--quick``: bench_search_quick.*).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlplace.bounds import communication_bound  # noqa: E402
from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.cluster import load_preset  # noqa: E402
from rlplace.placers import make_placer  # noqa: E402
from rlplace.placers.search import HEURISTICS, best_of  # noqa: E402
from rlplace.sim import lower_bound  # noqa: E402
from rlplace.zoo import load_baechi_profile  # noqa: E402

from experiments.placer_quality import layered_setting  # noqa: E402

RESULTS = Path(__file__).parent / "results"
# Issue 16: a plain first-improvement hill-climb on the GNMT profile, mars_p100, 3 seeds.
REFERENCE = {"single": (112.8e-3, 109.0e-3, 104.1e-3)}
TUNING = [("local_search", {"batch": 1}), ("local_search", {"batch": 4}), ("local_search", {"batch": 16}),
          ("annealing", {"t_start": 3e-4, "t_end": 3e-6}), ("annealing", {"t_start": 1e-3, "t_end": 1e-5}),
          ("annealing", {"t_start": 3e-3, "t_end": 3e-5}), ("annealing", {"batch": 1})]


def settings(quick: bool):
    yield "gnmt_profile_mars_p100", lambda: (load_baechi_profile(), load_preset("mars_p100"))
    if not quick:
        for limit in (False, True):
            yield (f"layered2000_{'memlimit' if limit else 'ample'}",
                   lambda limit=limit: layered_setting(2000, limit, seed=0)[:2])


def run(name: str, options: dict, graph, cluster, start, budget: int, seed: int) -> dict:
    placer = make_placer(name, evaluations=budget, seed=seed, progress=False, **options)
    r = placer.search(graph, cluster, start)
    return {"step_time": r.step_time, "oom": r.oom, "seconds": r.seconds, "curve": r.curve}


def cell(values, oom=()) -> str:
    v = np.asarray(values) * 1e3
    ooms = f" (OOM {sum(oom)}/{len(v)})" if any(oom) else ""
    return f"{np.median(v):.1f} [{v.min():.1f}–{v.max():.1f}]{ooms}"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="GNMT only, budgets 20/50, 1 seed, no tuning")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    budgets, seeds = ((20, 50), [0]) if args.quick else ((100, 500, 2000), [0, 1, 2])

    graphs, started = [], time.perf_counter()
    for key, build in settings(args.quick):
        graph, cluster = build()
        clock = time.perf_counter()
        best_name, best, _, best_step = best_of(graph, cluster, HEURISTICS)
        entry = {"key": key, "ops": graph.num_ops, "lower_bound": lower_bound(graph, cluster),
                 "communication_bound": communication_bound(graph, cluster),
                 "best_heuristic": best_name, "heuristics_seconds": time.perf_counter() - clock, "runs": [], "tuning": []}
        starts = {"single": make_placer("single").place(graph, cluster), best_name: best}
        jobs = [(s, n, {}, b, seed) for s in starts for n in ("local_search", "annealing") for b in budgets for seed in seeds]
        if not args.quick and key.startswith("gnmt"):
            jobs += [(s, n, o, "tuning", seed) for s in starts for n, o in TUNING for seed in seeds]
        for s, name, options, budget, seed in tqdm(jobs, desc=key, unit="run"):
            record = run(name, options, graph, cluster, starts[s], budgets[-1] if budget == "tuning" else budget, seed)
            record.update(start=s, placer=name, options=options, budget=budget, seed=seed)
            if budget == "tuning":
                record["curve"] = [record["curve"][b - 1] for b in budgets]
                entry["tuning"].append(record)
            else:
                record.pop("curve")
                entry["runs"].append(record)
        graphs.append(entry)
    results = {"budgets": list(budgets), "seeds": seeds, "run_time_s": time.perf_counter() - started, "graphs": graphs}
    stem = "bench_search_quick" if args.quick else "bench_search"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (args.out_dir / f"{stem}.md").write_text(text)
    print(text)


def markdown(results: dict) -> str:
    budgets = results["budgets"]
    lines = ["# Search placers: best step time against evaluations", "",
             f"Step time in ms, median [min–max] over seeds {results['seeds']}; each budget a run of its "
             "own, the start's evaluation included; (OOM k/n): k of the n runs ended above the memory "
             "(from an OOM start the search first shrinks the overflow). Seconds: median wall time of "
             "the run at the largest budget on this 2-core machine shared with other jobs "
             f"(OMP_NUM_THREADS=1), so only roughly comparable. Total {results['run_time_s'] / 60:.1f} min.", "",
             "Lower bound: `rlplace.bounds.communication_bound`, a bound on every placement's step time that counts "
             "the transfers forks and joins force; compute only: max(longest compute-only path, total compute / "
             "number of devices) with device speeds (`rlplace.sim.lower_bound`), which ignores communication.", ""]
    for g in results["graphs"]:
        lines += [f"## {g['key']} ({g['ops']} ops; lower bound {g['communication_bound'] * 1e3:.1f} ms, compute only "
                  f"{g['lower_bound'] * 1e3:.1f} ms; best heuristic "
                  f"{g['best_heuristic']}, all heuristics placed and simulated in {g['heuristics_seconds']:.1f} s)", "",
                  "| start | placer | " + " | ".join(f"@{b}" for b in budgets) + f" | s @{budgets[-1]} |",
                  "|---|---|" + "---:|" * (len(budgets) + 1)]
        for start in dict.fromkeys(r["start"] for r in g["runs"]):
            for name in ("local_search", "annealing"):
                runs = [r for r in g["runs"] if r["start"] == start and r["placer"] == name]
                cells = [cell([r["step_time"] for r in runs if r["budget"] == b],
                              [r["oom"] for r in runs if r["budget"] == b]) for b in budgets]
                seconds = np.median([r["seconds"] for r in runs if r["budget"] == budgets[-1]])
                lines.append(f"| {start} | {name} | " + " | ".join(cells) + f" | {seconds:.1f} |")
            if g["key"].startswith("gnmt") and start in REFERENCE and len(budgets) == 3:
                lines.append(f"| {start} | issue 16's hill-climb (median of 3) | "
                             + " | ".join(f"{t * 1e3:.1f}" for t in REFERENCE[start]) + " | 1.3–2.5 |")
        lines.append("")
        if g["tuning"]:
            lines += [f"### Defaults at equal evaluations ({g['key']}; curve of one {budgets[-1]}-evaluation run "
                      "read at each budget)", "",
                      "| start | placer | options | " + " | ".join(f"@{b}" for b in budgets) + f" | s @{budgets[-1]} |",
                      "|---|---|---|" + "---:|" * (len(budgets) + 1)]
            for start in dict.fromkeys(r["start"] for r in g["tuning"]):
                for name, options in TUNING:
                    runs = [r for r in g["tuning"] if r["start"] == start and r["placer"] == name and r["options"] == options]
                    cells = [cell([r["curve"][k] for r in runs]) for k in range(len(budgets))]
                    lines.append(f"| {start} | {name} | {options} | " + " | ".join(cells)
                                 + f" | {np.median([r['seconds'] for r in runs]):.1f} |")
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    run_script(main)
