"""Hierarchical Planner (ICLR'18) §3: Table 1 (vs single GPU, expert and a graph partitioner)
and Table 2 (random groupings). Learned runs take ``budget`` evaluated placements each."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from rlplace.apps.tables import claims as C
from rlplace.apps.tables.common import (Context, TableOutput, cell, cluster_name, cluster_of, fmt_step,
                                   paper_value, plot_step_times, run_placers, setting_lines, settings)
from rlplace.apps.tables.learned import (beside_notes, beside_records, budget_words, lower_bounds, plot_curves,
                                        train_record)


def _budget(table: Mapping, ctx: Context) -> int:
    return int(ctx.budget or table["budget"])


def _heuristics(table: Mapping, sets) -> list[dict]:
    return [r for s in sets for r in run_placers(s, cluster_of(table, setting=s), table["placers"], table)]


def table1(table: Mapping, ctx: Context) -> TableOutput:
    """Runtimes of single GPU, expert, METIS (for Scotch / MinCut) and the Hierarchical Planner."""
    sets = settings(table)
    records = _heuristics(table, sets)
    learned = []
    for s in sets:
        learned.append(train_record(s, cluster_name(table, s), table["agent"], ctx, placer="hierarchical",
                                    budget=_budget(table, ctx)))
    records += learned
    columns = [*table["placers"], "hierarchical"]
    rows = []
    for s in sets:
        got = {p: C.find(records, s.key, p) for p in columns}
        best = min((r["step_time"] for p, r in got.items() if r and p != "hierarchical" and not r["oom"]), default=None)
        hp = got.get("hierarchical")
        red = f"{(1 - hp['step_time'] / best) * 100:.1f}%" if best and hp and not hp["oom"] else "—"
        rows.append([s.label, cluster_name(table, s), *(cell(fmt_step(got[p]), paper_value(table, s.key, p)) for p in columns),
                     cell(red, paper_value(table, s.key, "reduction"))])
    for missing in table.get("missing", []):
        rows.append([missing["label"], "—", *(["not in the zoo"] * len(columns)), "—"])
    nmt = [s.key for s in sets if s.spec.get("family") == "nmt"]
    claims = [
        C.faster("hp_beats_expert_nmt", "the Hierarchical Planner beats the expert on NMT 2- and 4-layer "
                 "(paper: 60.6%, 53.7%)", [k for k in nmt if k in table["beats_expert"]], [("hierarchical", "expert")]),
        C.within("hp_near_expert_nmt8", "on NMT 8-layer it is within 10% of the expert (paper: 4.9% slower)",
                 [k for k in nmt if k not in table["beats_expert"]], [("hierarchical", "expert")], 0.10),
        C.no_slower("hp_le_single_inception", "on Inception-V3 it is no slower than the single GPU (paper: 16.3% faster)",
                    [s.key for s in sets if s.spec.get("family") == "inception"], [("hierarchical", "single")]),
        C.slower("metis_worse_than_expert", "the graph partitioner (METIS, for Scotch/MinCut) is slower than the expert",
                 [s.key for s in sets], [("metis", "expert")]),
        C.oom("single_ooms_nmt", "NMT does not fit on one GPU", [(k, "single") for k in nmt]),
    ]
    return _finish(table, ctx, sets, records, learned, ["model", "cluster", *columns, "reduction vs best heuristic"],
                   rows, claims, columns)


def _finish(table, ctx, sets, records, learned, header, rows, claims, placers) -> TableOutput:
    labels = {s.key: s.label for s in sets}
    beside = beside_records(learned, ctx)
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster_of(table, setting=sets[0]), ctx,
                                    [f"learned: {table['agent']['name']}, {budget_words(_budget(table, ctx), ctx)} "
                                     f"(the paper: 1000 policy updates × 4 samples); clusters per row"]),
                      header, rows, records + beside, C.verdicts(claims, records),
                      ["Cells: ours (paper), seconds.", *beside_notes(learned, beside, ctx)])
    if ctx.plots:
        plot_step_times(records, labels, ctx.out_dir / "step_times.png", table["title"], placers)
        plot_curves(learned + beside, [r for r in records if r not in learned], labels, lower_bounds(table, sets),
                    ctx.out_dir / "curves.png", f"{table['title']}: training curves and the search beside them")
        out.figures += ["step_times.png"] + (["curves.png"] if learned else [])
    return out


def table2(table: Mapping, ctx: Context) -> TableOutput:
    """Random groupings fed to the Placer: best, median and worst of ``trials`` runs, against the
    learned grouping."""
    sets = settings(table)
    trials = int(table["trials"])
    learned, rows, summary = [], [], []
    for s in sets:
        name = cluster_name(table, s)
        hp = train_record(s, name, table["agent"], ctx, placer="hierarchical", budget=_budget(table, ctx))
        randoms = [train_record(s, name, {**table["agent"], "policy": {**table["agent"].get("policy", {}),
                                                                       "grouping": "random", "grouping_seed": t}},
                                ctx, placer=f"random grouping {t}", seed=t, budget=_budget(table, ctx))
                   for t in range(trials)]
        learned += [hp, *randoms]
        times = sorted(r["step_time"] for r in randoms)
        if not times:
            continue
        best, median, worst = times[0], float(np.median(times)), times[-1]
        summary.append({"model": s.key, "placer": "hierarchical", "step_time": hp["step_time"], "oom": hp["oom"]})
        summary.append({"model": s.key, "placer": "random grouping (best)", "step_time": best, "oom": not np.isfinite(best)})
        p = paper_value(table, s.key, "random") or [None] * 4
        rows.append([s.label, cell(f"{best:.4g}", p[0]), cell(f"{median:.4g}", p[1]), cell(f"{worst:.4g}", p[2]),
                     cell(fmt_step(hp), None), cell(f"{(1 - hp['step_time'] / best) * 100:.1f}%", p[3])])
    beside = beside_records([r for r in learned if r["placer"] == "hierarchical"], ctx)
    claims = [C.no_slower("learned_grouping_wins", "the learned grouping is no slower than the best random grouping "
                          "(paper: 0–62.7% better)", [s.key for s in sets],
                          [("hierarchical", "random grouping (best)")])]
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster_of(table, setting=sets[0]), ctx,
                                    [f"{trials} random groupings per model, {budget_words(_budget(table, ctx), ctx)}"]),
                      ["model", "random: best", "median", "worst", "Hierarchical Planner", "improvement"], rows,
                      learned + summary + beside, C.verdicts(claims, summary),
                      ["Cells: ours (paper), seconds.",
                       *beside_notes([r for r in learned if r["placer"] == "hierarchical"], beside, ctx)])
    if ctx.plots and learned:
        labels = {s.key: s.label for s in sets}
        plot_step_times(summary, labels, ctx.out_dir / "step_times.png", table["title"])
        plot_curves(learned + beside, [], labels, lower_bounds(table, sets), ctx.out_dir / "curves.png",
                    f"{table['title']}: training curves and the search beside the learned grouping")
        out.figures += ["step_times.png", "curves.png"]
    return out
