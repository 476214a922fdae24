"""How far from optimal are the placers? The ``exact`` placer (CP-SAT, ``rlplace.placers.exact``)
against every algorithmic placer and a 2,000-evaluation local search (issue 42 items 1 and 5).

    .venv/bin/python experiments/exact_reference.py [--seconds 60] [--quick]

Graphs: layered random DAGs of 20, 30, 40, 50, 100 and 200 ops (two seeds each) and of 500 and 2,000
ops (one seed), the synthetic training steps of ``rlplace.zoo.synthetic.training_step`` (forward
layers with weights, their backward ops and updates; 36-57 ops, three seeds), each on 4 devices
with ample memory, over Baechi's sequential PCIe links (134 µs + 0.1754 ns/B) and over parallel
links (20 µs + 1 ns/B). Per graph: the exact placer's step time (simulated), its lower bound,
the gap between them and whether it proved optimality within ``--seconds``; each placer's step
time over the best known (the smallest of all here, the optimum where proved) and over the
bound. Writes experiments/results/exact_reference.{json,md} (``--quick``: ``*_quick``); with
``--only PATTERN ...`` (graph keys, shell patterns) it runs those graphs and merges them into the
recorded json; with ``--placers NAME ...`` it measures only those placers again on every recorded
run (and the local search, where the best placer changes), keeping the exact placer's solves: a
changed placer is re-recorded without a 30-minute run that would also re-time CP-SAT.
"""

from __future__ import annotations

import fnmatch
import json
import time
from pathlib import Path

import numpy as np

from rlplace.bounds import communication_bound
from rlplace.cluster import Cluster, CommModel
from rlplace.errors import ArgumentParser, run_script
from rlplace.placers import make_placer
from rlplace.placers.exact import ExactPlacer
from rlplace.placers.search import LocalSearch
from rlplace.sim import lower_bound, simulate
from rlplace.zoo.synthetic import layered, training_step

RESULTS = Path(__file__).parent / "results"
LINKS = {"sequential": CommModel(134e-6, 1.754e-10, "sequential"), "parallel": CommModel(2e-5, 1e-9, "parallel")}
PLACERS = ["single", "m_etf", "m_sct", "heft", "celeritas", "critical_path", "learned"]
SEARCH = 2000


def graphs(quick: bool):
    if quick:
        yield "layered20_s0", layered(20, width=2, seed=0)
        yield "training_s0", training_step(0, continuous=True)
        return
    for n in (20, 30, 40, 50, 100, 200):
        for seed in (0, 1):
            yield f"layered{n}_s{seed}", layered(n, width=max(2, n // 10), seed=seed)
    for seed in range(3):
        yield f"training_s{seed}", training_step(seed, continuous=True)
    for n in (500, 2000):
        yield f"layered{n}_s0", layered(n, width=n // 10, seed=0)


def run(key: str, graph, link: str, seconds: float) -> dict:
    cluster = Cluster.homogeneous(4, 2**40, LINKS[link])
    steps = {name: simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time for name in PLACERS}
    best_heuristic = min(PLACERS, key=steps.get)
    steps["local_search"], search_time = search_from(graph, cluster, best_heuristic)
    exact = ExactPlacer(seconds=seconds).solve(graph, cluster)
    steps["exact"] = exact.step_time
    best = min(steps.values())
    return {"key": key, "ops": graph.num_ops, "link": link, "steps": steps, "best_known": best,
            "bound": exact.bound, "communication_bound": communication_bound(graph, cluster),
            "compute_bound": lower_bound(graph, cluster), "model_bound": exact.model_bound,
            "gap": exact.gap, "optimal": exact.optimal, "status": exact.status, "solutions": exact.solutions,
            "exact_seconds": exact.seconds, "search_seconds": search_time, "best_heuristic": best_heuristic}


def search_from(graph, cluster: Cluster, start: str) -> tuple[float, float]:
    """The local search's step time from ``start`` and its seconds."""
    began = time.perf_counter()
    search = LocalSearch(start=start, evaluations=SEARCH, seed=0, progress=False).place(graph, cluster)
    return simulate(graph, cluster, search).step_time, time.perf_counter() - began


def remeasure(recorded: dict, graph, names: list[str]) -> dict:
    """A recorded run with the placers ``names`` measured again, and the local search where the
    best of ``PLACERS`` is now another; the exact placer's solve as recorded."""
    cluster = Cluster.homogeneous(4, 2**40, LINKS[recorded["link"]])
    steps = {**recorded["steps"], **{name: simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time
                                     for name in names}}
    out = {**recorded, "steps": steps, "best_heuristic": min(PLACERS, key=steps.get)}
    if out["best_heuristic"] != recorded["best_heuristic"]:
        steps["local_search"], out["search_seconds"] = search_from(graph, cluster, out["best_heuristic"])
    out["best_known"] = min(steps.values())
    return out


def markdown(record: dict) -> str:
    rows = record["runs"]
    names = PLACERS + ["local_search", "exact"]
    proved = [r for r in rows if r["optimal"]]
    largest = max((r["ops"] for r in proved), default=0)
    lines = [
        "# The exact reference: how far from optimal the placers are", "",
        f"`exact` (CP-SAT, {record['seconds']:g} s, both cores of this 2-core machine) against every algorithmic "
        f"placer and a {SEARCH:,}-evaluation local search from the best of them; 4 devices, ample memory. "
        "**bound**: the exact placer's proven lower bound on every placement's simulated step time (at least "
        "`rlplace.bounds.communication_bound`); **gap** = its step time / bound − 1; **optimal**: gap ≤ 1e-4 (yes), "
        "or *model*: CP-SAT proved its model's optimum, which the simulator runs slower (ops ready within the "
        "model's rounding, or sequential channels, which the model lets serve in any order), else CP-SAT's status. "
        "Placer columns: step time / best known (the smallest here; the optimum where proved). "
        f"Run time {record['run_time_s'] / 60:.1f} min."
        + "".join(f" Measured again on {m['date']}, the exact solves as recorded: {', '.join(m['placers'])}."
                  for m in record.get("remeasured", [])), "",
        f"Proved optimal: {len(proved)} of {len(rows)} runs; the largest graph proved optimal has {largest} ops.", "",
        "| graph | ops | link | bound (ms) | exact (ms) | gap | optimal | " + " | ".join(names) + " | best / bound |",
        "|---|---:|---|---:|---:|---:|---|" + "---:|" * len(names) + "---:|"]
    for r in rows:
        cells = [f"{r['steps'][n] / r['best_known']:.3f}" for n in names]
        proof = "yes" if r["optimal"] else {"OPTIMAL": "model"}.get(r["status"], r["status"].lower())
        lines.append(f"| {r['key']} | {r['ops']} | {r['link']} | {r['bound'] * 1e3:.3f} | {r['steps']['exact'] * 1e3:.3f} "
                     f"| {100 * r['gap']:.2f}% | {proof} | "
                     + " | ".join(cells) + f" | {r['best_known'] / r['bound']:.3f} |")
    lines += ["", "Gap by size (median over graphs and links):", "",
              "| ops | runs | proved | median gap | largest gap |", "|---:|---:|---:|---:|---:|"]
    for n in sorted({r["ops"] for r in rows}):
        at = [r for r in rows if r["ops"] == n]
        gaps = [r["gap"] for r in at]
        lines.append(f"| {n} | {len(at)} | {sum(r['optimal'] for r in at)} | {100 * float(np.median(gaps)):.2f}% | "
                     f"{100 * max(gaps):.2f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the exact placer's time limit per graph")
    parser.add_argument("--quick", action="store_true", help="two small graphs, 5 s each")
    parser.add_argument("--only", nargs="+", metavar="PATTERN", help="graph keys to run, merged into the record")
    parser.add_argument("--placers", nargs="+", choices=PLACERS, help="measure only these placers again")
    args = parser.parse_args()
    seconds = 5.0 if args.quick else args.seconds
    stem = "exact_reference_quick" if args.quick else "exact_reference"
    if args.placers:
        path = RESULTS / f"{stem}.json"
        record = json.loads(path.read_text())
        by_key = dict(graphs(args.quick))
        record["runs"] = [remeasure(r, by_key[r["key"]], args.placers) for r in record["runs"]]
        earlier = [m for m in record.get("remeasured", []) if m["placers"] != args.placers]  # the latest per placer set
        record["remeasured"] = earlier + [{"placers": args.placers, "date": time.strftime("%Y-%m-%d")}]
        path.write_text(json.dumps(record, indent=1) + "\n")
        (RESULTS / f"{stem}.md").write_text(markdown(record))
        print(markdown(record))
        return
    began = time.perf_counter()
    runs = []
    for key, graph in graphs(args.quick):
        if args.only and not any(fnmatch.fnmatch(key, p) for p in args.only):
            continue
        for link in LINKS:
            runs.append(run(key, graph, link, seconds))
            r = runs[-1]
            print(f"{key} {link}: exact {r['steps']['exact'] * 1e3:.3f} ms, bound {r['bound'] * 1e3:.3f} ms, "
                  f"gap {100 * r['gap']:.2f}%, {r['status']}", flush=True)
    record = {"seconds": seconds, "search": SEARCH, "run_time_s": time.perf_counter() - began, "runs": runs}
    path = RESULTS / f"{stem}.json"
    if args.only and path.is_file():
        old = json.loads(path.read_text())
        new = {(r["key"], r["link"]) for r in runs}
        order = [key for key, _ in graphs(args.quick)]
        kept = [r for r in old["runs"] if (r["key"], r["link"]) not in new]
        runs = sorted(kept + runs, key=lambda r: (order.index(r["key"]), list(LINKS).index(r["link"])))
        record = {**record, "runs": runs, "run_time_s": old["run_time_s"] + record["run_time_s"]}
    (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(record))
    print(markdown(record))


if __name__ == "__main__":
    run_script(main)
