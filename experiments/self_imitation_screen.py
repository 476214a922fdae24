"""Screening of issue 16 item 3's ideas (warm-started learned placers against local search at
equal evaluations): one ``rlplace-train`` run per idea on the GNMT profile (``graph=baechi_gnmt
cluster=mars_p100 warm_start.placer=best warm_start.behaviour_cloning=true
warm_start.first_sample=true torch_threads=1``, plus the run's overrides and seed in ``RUNS``), stopped
when its time was up; each run's ``metrics.csv`` is kept in ``results/self_imitation_screen/``.
The table gives, per run, the placements evaluated, the medians over its updates of the sample
entropy (nats per placement), the units a sample moves off the warm start (``changed_units``)
and PPO's approximate KL, and the best step time after 50, 100 and all placements, beside the
local search from the same start with the same seed (``equal_evaluations.json``).

    python experiments/self_imitation_screen.py    # rewrites results/self_imitation_screen.md
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
MARS = "agent=mars agent.policy.placer_hidden=128"
HP = "agent=hierarchical agent.algorithm.options.lr=1e-3 agent.policy.unit_embedding=16"
SIL = "warm_start.self_imitation_every=1"
HP_RUNS = "agent.policy.clone_grouping=runs agent.policy.grouper_temperature=0.3"
RUNS = {  # csv name: (overrides, seed)
    "mars_base": (MARS, 0),
    "mars_epochs10": (f"{MARS} agent.algorithm.options.epochs=10", 0),
    "mars_t05": (f"{MARS} agent.policy.temperature=0.5", 0),
    "mars_sil_fixed_temperature": (f"{MARS} {SIL}", 0),
    "mars_sil_steered_seed0": (f"{MARS} {SIL} warm_start.self_imitation_changed_units=50", 0),
    "mars_sil_steered_seed1": (f"{MARS} {SIL} warm_start.self_imitation_changed_units=50", 1),
    "mars_sil_steered_seed2": (f"{MARS} {SIL} warm_start.self_imitation_changed_units=50", 2),
    "hp_base": (HP, 0),
    "hp_sil_c10": (f"{HP} agent.policy.tanh_constant=10 {SIL}", 0),
    "hp_sil_steered_t30": (f"{HP} {SIL} warm_start.self_imitation_changed_units=30", 0),
    "hp_sil_runs_t30": (f"{HP} {HP_RUNS} {SIL} warm_start.self_imitation_changed_units=30", 0),
    "hp_sil_runs_t15": (f"{HP} {HP_RUNS} {SIL} warm_start.self_imitation_changed_units=15", 0),
}


def best_at(rows: list[dict], n: int) -> float:
    seen = [float(r["best_step_time"]) for r in rows if int(r["step"]) <= n]
    return seen[-1] if seen else math.nan


def curve_at(curve: list[list[float]], n: int) -> float:
    return [t for i, t in curve if i <= n][-1]


def main() -> None:
    searches = json.loads((RESULTS / "equal_evaluations.json").read_text())["cells"]["gnmt_profile/mars/warm"]
    lines = ["| run | overrides | seed | placements | entropy | changed units | approx KL | best @50 | @100 | @last | "
             "search @50 / @100 / @last |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    ms = lambda t: f"{t * 1e3:.2f}" if math.isfinite(t) else "—"  # noqa: E731
    for name, (overrides, seed) in RUNS.items():
        search = searches[str(seed)]["budgets"]["500"]["search_curve"]
        path = RESULTS / "self_imitation_screen" / f"{name}.csv"
        if not path.is_file():
            continue
        rows = list(csv.DictReader(path.open()))
        last = int(rows[-1]["step"])
        med = lambda key: (f"{statistics.median(float(r[key]) for r in rows):.3g}"  # noqa: E731
                           if key in rows[0] else "—")
        lines.append(f"| {name} | `{overrides}` | {seed} | {last} | {med('entropy')} | {med('changed_units')} | "
                     f"{med('approx_kl')} | {ms(best_at(rows, 50))} | {ms(best_at(rows, 100))} | "
                     f"{ms(best_at(rows, last))} | {' / '.join(ms(curve_at(search, n)) for n in (50, 100, last))} |")
    (RESULTS / "self_imitation_screen.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
