"""The ``learned`` placer against issue 41's targets, on the held-out test family
(``rlplace.learn.family.test_family``: model kinds and graph sizes the training never saw).

    PYTHONPATH=. .venv/bin/python experiments/learned_listsched.py RUNS_DIR [--quick]

``RUNS_DIR`` holds one training run per seed (``s0``, ``s1``, ``s2``: ``python -m
rlplace.learn.listsched RUNS_DIR/sK --seed K``), each with its ``learned.npz`` and ``curves.json``.
Per graph of the test family and per seed: **zero-shot**, the ``learned`` placer's placement
(one greedy pass of the policy, hinted by the best heuristic, which the placer weighs beside it)
and the greedy pass alone; **50 evaluations**, the placer with ``evaluations=50`` (the search
of ``rlplace.placers.learned.policy_search``, a local search whose moves the network ranks) against a ``local_search`` of 50
evaluations from the best heuristic's placement (seeded alike); the best heuristic
(``rlplace.placers.search.HEURISTICS``), ``single`` and the lower bounds (``rlplace.bounds``).
Every step time is the simulator's. Also the placement time at 10,000 ops (a layered DAG, 4 devices).

Writes experiments/results/learned_listsched.{json,md,png} (``--quick``: ``*_quick``; ``--replot``: only
the table and the plot of the training curves, from the record).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from rlplace.bounds import communication_bound
from rlplace.errors import ArgumentParser, run_script
from rlplace.learn.family import cluster_for, test_family
from rlplace.placers import make_placer
from rlplace.placement import Placement
from rlplace.placers.learned import LearnedPlacer, ListSchedule, best_heuristic, load_weights
from rlplace.placers.search import HEURISTICS, LocalSearch, evaluate_rows
from rlplace.sim import lower_bound
from rlplace.zoo.synthetic import layered

RESULTS = Path(__file__).parent / "results"
EVALUATIONS = 50


def step_time(graph, cluster, placement) -> float:
    """The simulator's step time, inf where the placement runs out of memory."""
    over, step = evaluate_rows(graph, cluster, np.asarray(placement.device_of)[None])
    return float("inf") if over[0] > 0 else float(step[0])


def run_graph(instance, weights: dict[str, Path], controls: dict[str, Path]) -> dict:
    graph, cluster = instance.graph, instance.cluster
    heuristics = {}
    placements = {}
    for name in HEURISTICS:
        placements[name] = make_placer(name, seed=0).place(graph, cluster)
        heuristics[name] = step_time(graph, cluster, placements[name])
    best_name = min(heuristics, key=heuristics.get)
    row = {"graph": graph.name, "kind": instance.kind, "ops": graph.num_ops, "cluster": cluster.name,
           "devices": cluster.num_devices, "lower_bound": lower_bound(graph, cluster),
           "communication_bound": communication_bound(graph, cluster), "heuristics": heuristics,
           "best_heuristic": best_name, "seeds": {}}
    plan = ListSchedule(graph, cluster, best_heuristic(graph, cluster))  # the placer's hint: the greedy pass alone
    for seed, path in weights.items():
        started = time.perf_counter()
        zero = step_time(graph, cluster, LearnedPlacer(weights=str(path)).place(graph, cluster))
        seconds = time.perf_counter() - started
        policy = step_time(graph, cluster, Placement(plan.run(load_weights(path), cluster.memory).ops.device))
        tuned = step_time(graph, cluster, LearnedPlacer(weights=str(path), evaluations=EVALUATIONS,
                                                         seed=int(seed[1:])).place(graph, cluster))
        control = step_time(graph, cluster, LearnedPlacer(weights=str(controls[seed]), evaluations=EVALUATIONS,
                                                          seed=int(seed[1:])).place(graph, cluster))
        search = LocalSearch(evaluations=EVALUATIONS, seed=int(seed[1:]), progress=False).search(
            graph, cluster, placements[best_name], best_name)
        row["seeds"][seed] = {"zero_shot": zero, "policy": policy, "placement_seconds": seconds,
                              f"learned_{EVALUATIONS}": tuned, f"control_{EVALUATIONS}": control,
                              f"local_search_{EVALUATIONS}": search.step_time
                              if search.overflow_bytes == 0 else float("inf")}
    return row


def zero_weights(path: Path, work: Path) -> Path:
    """A weights file shaped as ``path``'s, every weight 0: every device scores alike, so the
    search's network-ranked moves are drawn at random (the control of what training adds)."""
    zero = work / f"zero_{path.parent.name}.npz"
    if not zero.is_file():
        with np.load(path, allow_pickle=False) as data:
            np.savez(zero, **{k: np.zeros_like(data[k]) for k in data.files})
    return zero


def placement_seconds(weights: Path, num_ops: int = 10_000, repeats: int = 3) -> dict:
    graph = layered(num_ops, width=16, seed=0)
    cluster = cluster_for(graph, 4, 4.0, "sequential", "4 x ample")
    placer = LearnedPlacer(weights=str(weights))
    placer.place(graph, cluster)  # compiled already; this warms the caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        placer.place(graph, cluster)
        times.append(time.perf_counter() - started)
    return {"ops": num_ops, "devices": 4, "median_seconds": float(np.median(times)), "seconds": times}


def gmean(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.exp(np.mean(np.log(x)))) if len(x) and np.all(np.isfinite(x)) else float("inf")


def summary(rows: list[dict], seeds: list[str]) -> dict:
    out = {}
    for seed in seeds:
        best = np.array([min(r["heuristics"].values()) for r in rows])
        single = np.array([r["heuristics"]["single"] for r in rows])
        zero = np.array([r["seeds"][seed]["zero_shot"] for r in rows])
        policy = np.array([r["seeds"][seed]["policy"] for r in rows])
        tuned = np.array([r["seeds"][seed][f"learned_{EVALUATIONS}"] for r in rows])
        search = np.array([r["seeds"][seed][f"local_search_{EVALUATIONS}"] for r in rows])
        fits = np.isfinite(single)
        out[seed] = {"zero_shot_gmean": gmean(zero / best), "zero_shot_max": float(np.max(zero / best)),
                     "policy_gmean": gmean(policy / best), "policy_max": float(np.max(policy / best)),
                     "slower_than_single_where_it_fits": int(np.sum(zero[fits] > single[fits] * (1 + 1e-9))),
                     "tuned_over_search_gmean": gmean(tuned / search),
                     "tuned_faster": int(np.sum(tuned < search * (1 - 1e-9))),
                     "tuned_slower": int(np.sum(tuned > search * (1 + 1e-9))),
                     "tuned_over_best_gmean": gmean(tuned / best),
                     "control_over_search_gmean": gmean(np.array([r["seeds"][seed][f"control_{EVALUATIONS}"] for r in rows])
                                                        / search)}
    return out


def ms(x: float) -> str:
    return "OOM" if not np.isfinite(x) else f"{1e3 * x:.1f}"


def markdown(result: dict) -> str:
    rows, seeds, s = result["graphs"], result["seeds"], result["summary"]
    keys = ["zero_shot_gmean", "zero_shot_max", "policy_gmean", "policy_max", "slower_than_single_where_it_fits",
            "tuned_over_search_gmean", "tuned_faster", "tuned_slower", "tuned_over_best_gmean",
            "control_over_search_gmean"]
    lines = ["# The `learned` placer on the held-out test family", "",
             "Generated by `experiments/learned_listsched.py` from `learned_listsched.json`. Ratios are step "
             "times (the simulator's) over the best heuristic of each graph (best of "
             f"{', '.join(HEURISTICS)}), geometric means over the graphs; `tuned_over_search`: the placer "
             f"with {EVALUATIONS} evaluations over a {EVALUATIONS}-evaluation local search from the best heuristic; "
             "`control_over_search`: the same with every weight 0 (its search's network-ranked moves drawn at random). "
             "Seeds are training seeds; the last columns are the median and the range over them.", "",
             "| | " + " | ".join(seeds) + " | median | range |", "|---|" + "---|" * (len(seeds) + 2)]
    for key in keys:
        vals = [s[seed][key] for seed in seeds]
        fmt = (lambda v: f"{v:d}") if isinstance(vals[0], int) else (lambda v: f"{v:.4f}")
        lines.append(f"| {key} | " + " | ".join(fmt(v) for v in vals) +
                     f" | {fmt(type(vals[0])(np.median(vals)))} | {fmt(min(vals))}-{fmt(max(vals))} |")
    lines += ["", f"Placement time at {result['timing']['ops']:,} ops ({result['timing']['devices']} devices, "
              f"this CPU, seed {seeds[0]}'s weights): median {result['timing']['median_seconds']:.2f} s.", "",
              "Step times in ms. LB (lower bound): `rlplace.bounds.communication_bound`, a bound on every placement's "
              "step time that counts the transfers forks and joins force; LB compute: max(longest compute-only path, "
              "total compute / number of devices) with device speeds (`rlplace.sim.lower_bound`), which ignores "
              "communication.", "",
              "| graph | kind | ops | cluster | LB compute | LB | single | best heuristic | learned (median seed) | greedy pass alone "
              f"| learned {EVALUATIONS} | local search {EVALUATIONS} |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        med = lambda key: float(np.median([r["seeds"][k][key] for k in seeds]))  # noqa: E731
        best = min(r["heuristics"].values())
        lines.append(f"| {r['graph']} | {r['kind']} | {r['ops']} | {r['cluster']} | {ms(r['lower_bound'])} | "
                     f"{ms(r['communication_bound'])} | "
                     f"{ms(r['heuristics']['single'])} | {ms(best)} ({r['best_heuristic']}) | {ms(med('zero_shot'))} | "
                     f"{ms(med('policy'))} | {ms(med(f'learned_{EVALUATIONS}'))} | "
                     f"{ms(med(f'local_search_{EVALUATIONS}'))} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """The training curves: the zero-shot placement and the policy's search on the training family
    against the best heuristic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (seed, run) in enumerate(result["curves"].items()):
        curves = run["curves"]
        x = [c["clone_round"] - run["config"]["clone_rounds"] + c["generation"] for c in curves]
        ax.plot(x, [c["ratio_geomean"] for c in curves], color=f"C{i}", label=f"{seed}: zero-shot")
        ax.plot(x, [c["search_ratio_geomean"] for c in curves], "--", color=f"C{i}",
                label=f"{seed}: policy_search, {run['config']['search_evaluations']} evaluations")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("ES generation (clone rounds at and before 0)")
    ax.set_ylabel("step / best heuristic (geomean, training family)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--quick", action="store_true", help="the test family's small graphs only")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot and table from the record")
    args = parser.parse_args()
    stem = "learned_listsched_quick" if args.quick else "learned_listsched"
    if args.replot:
        result = json.loads((RESULTS / f"{stem}.json").read_text())
        (RESULTS / f"{stem}.md").write_text(markdown(result))
        plot(result, RESULTS / f"{stem}.png")
        return
    weights = {p.name: p / "learned.npz" for p in sorted(args.runs.iterdir()) if (p / "learned.npz").is_file()}
    family = test_family(sizes=(1000,) if args.quick else (1000, 2000))
    if args.quick:
        family = [x for x in family if x.graph.num_ops <= 1000]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        controls = {seed: zero_weights(path, Path(work)) for seed, path in weights.items()}
        for x in family:
            rows.append(run_graph(x, weights, controls))
            print(f"{x.graph.name} on {x.cluster.name}: best {ms(min(rows[-1]['heuristics'].values()))} ms, learned "
                  + ", ".join(f"{k} {ms(v['zero_shot'])}" for k, v in rows[-1]["seeds"].items()), flush=True)
    seeds = list(weights)
    result = {"seeds": seeds, "graphs": rows, "summary": summary(rows, seeds),
              "timing": placement_seconds(weights[seeds[0]]),
              "curves": {k: json.loads((args.runs / k / "curves.json").read_text()) for k in seeds}}
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (RESULTS / f"{stem}.md").write_text(markdown(result))
    plot(result, RESULTS / f"{stem}.png")
    print(markdown(result))


if __name__ == "__main__":
    run_script(main)
