"""How far each list-scheduling placer's own estimate is from the simulator's verdict.

    .venv/bin/python experiments/placer_estimates.py

Every list scheduler (m-ETF, m-SCT, HEFT, Order-Place, Celeritas) plans on the execution model
(``rlplace.schedule``) and returns its own schedule with its placement (``Placed.schedule``).
This compares its step time with ``simulate()`` of its placement, with the graph optimizer off
(the schedule is of the op graph itself), on layered DAGs with parallel and sequential transfers and on the GNMT
profile. m-ETF with parallel transfers must agree exactly (tests/test_schedule.py); the other
cases differ by the rules each placer's docstring states. Writes
experiments/results/placer_estimates.md and .json.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlplace.cluster import Cluster, CommModel, load_preset
from rlplace.placers import make_placer
from rlplace.sim import simulate
from rlplace.zoo import default_profile_path, layered, load_baechi_profile

RESULTS = Path(__file__).parent / "results"
PLACERS = [("m_etf", dict(coplacement=False, fusion=False, forward_only=False)),
           ("m_sct", dict(coplacement=False, fusion=False, forward_only=False)),
           ("heft", {}), ("order_place", dict(fusion=False)), ("celeritas", dict(fusion=False))]


def settings():
    for n in (1000, 5000):
        for mode in ("parallel", "sequential"):
            yield f"layered{n} {mode}", layered(n, seed=0), Cluster.homogeneous(4, 64 * 2**30, CommModel(134e-6, 1.754e-10, mode))
    if default_profile_path().is_file():
        yield "baechi_gnmt baechi_2080 (sequential)", load_baechi_profile(), load_preset("baechi_2080")


def main() -> None:
    rows = []
    for label, graph, cluster in settings():
        for name, options in PLACERS:
            placed = make_placer(name, single_fallback=False, **options).place(graph, cluster)  # own estimates
            result = simulate(graph, cluster, placed)
            own = placed.schedule.step_time
            rows.append({"setting": label, "placer": name, "own_step_time": own,
                         "simulated_step_time": result.step_time,
                         "relative_difference": own / result.step_time - 1})
    lines = ["# A placer's own estimate vs the simulator", "",
             "Graph optimizer off; own step time = the end of the placer's own schedule.", "",
             "| setting | placer | own estimate (ms) | simulated (ms) | own / simulated − 1 |",
             "|---|---|---:|---:|---:|",
             *(f"| {r['setting']} | {r['placer']} | {r['own_step_time'] * 1e3:.2f} | "
               f"{r['simulated_step_time'] * 1e3:.2f} | {r['relative_difference']:+.2%} |" for r in rows)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "placer_estimates.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "placer_estimates.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
