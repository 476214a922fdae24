"""Celeritas' Adjusting Placement in time order on the simulator's execution model, against the
paper's plan (CPD-TOPO order, insertion into idle slots, memory summed in placement order), and
what each step contributes, on the placer_quality graphs.

    .venv/bin/python experiments/celeritas_in_time.py           # full (~5 min)
    .venv/bin/python experiments/celeritas_in_time.py --quick   # layered 200/1,000 ops, GNMT

Three tables, every step time from the simulator (``rlplace.sim.simulate``), as a ratio to the
lower bound (``*``: the placement runs out of memory):

* layered DAGs (``placer_quality.layered_setting``: 4 devices, sequential transfers, ample or
  binding memory), m-ETF beside Celeritas' variants: ``in_time`` on or off, fusion with the
  unfused fallback (the default), fused only, unfused, and Algorithm 1's fusion as the paper has
  it (no parallelism rule, no fallback);
* the placer's own estimate against the simulator on the same graphs, unfused, one placement
  (``memory_rounds=1``): its own step time / the simulator's, and its planned peak / the
  simulator's peak per device (min and max over devices);
* the zoo models and the GNMT profile of placer_quality: Celeritas with ``in_time`` on and off.

Writes experiments/results/celeritas_in_time{,_quick}.{json,md}.
"""

from __future__ import annotations

import json
import time
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.placer_quality import ZOO, gnmt_setting, layered_setting, zoo_setting  # noqa: E402
from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.placement import Placed, ops_placed  # noqa: E402
from rlplace.placers import make_placer  # noqa: E402
from rlplace.sim import lower_bound, simulate  # noqa: E402
from rlplace.zoo import default_profile_path  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ETF_OFF = {"coplacement": False, "fusion": False}
PAPER = {"in_time": False}
VARIANTS: list[tuple[str, str, dict]] = [  # (label, placer, options)
    ("m_etf (opt off)", "m_etf", ETF_OFF),
    ("m_etf", "m_etf", {}),
    ("celeritas", "celeritas", {}),
    ("fused only", "celeritas", {"fusion_fallback": False}),
    ("unfused", "celeritas", {"fusion": False}),
    ("paper plan", "celeritas", PAPER),
    ("paper plan, unfused", "celeritas", {**PAPER, "fusion": False}),
    ("paper plan, Algorithm 1 fusion", "celeritas",
     {**PAPER, "fusion_fallback": False, "fusion_keeps_parallelism": False}),
]


def run(name: str, options: dict, graph, cluster, bound: float) -> dict:
    placer = make_placer(name, single_fallback=False, **options)  # the placers' own placements
    start = time.perf_counter()
    placement = placer.place(graph, cluster)
    seconds = time.perf_counter() - start
    r = simulate(graph, cluster, placement)
    return {"ratio_lb": r.step_time / bound, "step_time": r.step_time, "oom": bool(r.oom),
            "nodes_placed": int(ops_placed(Placed.of(placement), graph)), "placement_time": seconds}


def estimate(graph, cluster, in_time: bool) -> dict:
    placed = make_placer("celeritas", fusion=False, memory_rounds=1, in_time=in_time,
                         single_fallback=False).place(graph, cluster)
    r = simulate(graph, cluster, placed)
    peak = placed.planned_peak / np.maximum(r.peak_memory, 1)
    return {"own_step_over_sim": placed.schedule.step_time / r.step_time,
            "planned_peak_over_sim": [float(peak.min()), float(peak.max())]}


def cell(x: dict) -> str:
    return f"{x['ratio_lb']:.2f}{'*' if x['oom'] else ''}"


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="layered 200 and 1,000 ops, the GNMT profile")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    make_placer("celeritas").place(*layered_setting(200, False, args.seed)[:2])  # compile

    layered = []
    for n in ([200, 1000] if args.quick else [200, 1000, 2000, 10000]):
        for limit in (False, True):
            graph, cluster, _ = layered_setting(n, limit, args.seed)
            bound = lower_bound(graph, cluster)
            runs = {label: run(name, o, graph, cluster, bound) for label, name, o in VARIANTS}
            layered.append({"ops": n, "memory": "binding" if limit else "ample", "runs": runs,
                            "estimate": {"in time": estimate(graph, cluster, True),
                                         "paper plan": estimate(graph, cluster, False)}})
            print(n, "binding" if limit else "ample", {k: cell(v) for k, v in runs.items()}, flush=True)

    zoo = []
    settings = [("gnmt_profile_baechi_2080", lambda: gnmt_setting("baechi_2080"))] \
        if default_profile_path().is_file() else []
    if not args.quick:
        settings += [(f"{m}_{s}", lambda m=m, k=k: zoo_setting(m, k)) for m, s, k in ZOO]
    for key, build in settings:
        graph, cluster, _ = build()
        bound = lower_bound(graph, cluster)
        runs = {label: run("celeritas", o, graph, cluster, bound) for label, o in (("in time", {}), ("paper plan", PAPER))}
        zoo.append({"graph": key, "ops": graph.num_ops, "runs": runs})
        print(key, {k: cell(v) for k, v in runs.items()}, flush=True)

    results = {"settings": {"quick": args.quick, "seed": args.seed}, "layered": layered, "zoo": zoo,
               "run_time_s": time.perf_counter() - started}
    stem = "celeritas_in_time_quick" if args.quick else "celeritas_in_time"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=1))
    (RESULTS / f"{stem}.md").write_text(markdown(results))


def markdown(results: dict) -> str:
    labels = [v[0] for v in VARIANTS]
    lines = ["# Celeritas: Adjusting Placement in time order vs the paper's plan", "",
             f"Seed {results['settings']['seed']}; run time {results['run_time_s'] / 60:.1f} min on this 2-core "
             "machine (shared). Step time / lower bound from the simulator; `*`: out of memory. Layered DAGs as "
             "in `placer_quality.md` (4 devices, sequential 134 µs + 0.1754 ns/B, memory ample or binding). "
             "`celeritas` = in time, fusion with the unfused fallback (the default); `paper plan` = `in_time=False` "
             "(CPD-TOPO order, insertion into idle slots, memory summed in placement order).", "",
             "## Layered DAGs", "",
             "| ops | memory | " + " | ".join(labels) + " | celeritas / m_etf (opt off) |",
             "|---:|---|" + "---:|" * (len(labels) + 1)]
    for row in results["layered"]:
        runs = row["runs"]
        ratio = runs["celeritas"]["step_time"] / runs["m_etf (opt off)"]["step_time"]
        lines.append(f"| {row['ops']} | {row['memory']} | " + " | ".join(cell(runs[k]) for k in labels)
                     + f" | {ratio:.3f} |")
    lines += ["", "## The placer's estimate against the simulator (unfused, one placement)", "",
              "| ops | memory | in time: own step / simulated | in time: planned peak / simulated (min–max) "
              "| paper plan: own step / simulated | paper plan: planned peak / simulated (min–max) |",
              "|---:|---|---:|---:|---:|---:|"]
    for row in results["layered"]:
        cells = []
        for key in ("in time", "paper plan"):
            e = row["estimate"][key]
            lo, hi = e["planned_peak_over_sim"]
            cells += [f"{e['own_step_over_sim']:.3f}", f"{lo:.3f}–{hi:.3f}"]
        lines.append(f"| {row['ops']} | {row['memory']} | " + " | ".join(cells) + " |")
    if results["zoo"]:
        lines += ["", "## Zoo models and the GNMT profile (`placer_quality`'s settings)", "",
                  "| graph | ops | in time | paper plan | placement s (in time / paper plan) |", "|---|---:|---:|---:|---:|"]
        for row in results["zoo"]:
            a, b = row["runs"]["in time"], row["runs"]["paper plan"]
            lines.append(f"| {row['graph']} | {row['ops']} | {cell(a)} | {cell(b)} | "
                         f"{a['placement_time']:.2f} / {b['placement_time']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
