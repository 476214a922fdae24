"""Celeritas (2023) §5-6: Tables 2-5 on the 4 × V100 (32 GB) preset."""

from __future__ import annotations

from typing import Mapping

from rlplace.placers.celeritas.fusion import fusion_stats
from rlplace.apps.tables import claims as C
from rlplace.apps.tables.common import (Context, TableOutput, cell, cluster_of, fmt_step, paper_value,
                                   plot_step_times, run_placers, setting_lines, settings)
from rlplace.apps.tables.learned import beside_notes, beside_records, budget_words, train_record


def _labels(sets) -> dict[str, str]:
    return {s.key: s.label for s in sets}


def table2(table: Mapping, ctx: Context) -> TableOutput:
    """Nodes and CCR (Eq. 1) before and after Optimal Operation Fusion (§5.1, Table 2)."""
    cluster = cluster_of(table)
    sets = settings(table)
    options = table.get("fusion", {})
    records = [{"model": s.key, "placer": "fusion", **fusion_stats(s.graph, cluster, **options).as_dict()}
               for s in sets]
    for r in records:
        r["node_reduction"] = r["nodes_before"] / max(r["nodes_after"], 1)
        r["ccr_reduction"] = r["ccr_before"] / r["ccr_after"] if r["ccr_after"] > 0 else float("inf")
    header = ["model", "nodes", "CCR", "nodes after fusion", "CCR after fusion", "node reduction", "CCR reduction"]
    rows = []
    for s in sets:
        r = C.find(records, s.key, "fusion")
        p = paper_value(table, s.key, "values") or [None] * 4
        rows.append([s.label, cell(f"{r['nodes_before']:,}", p[0]), cell(f"{r['ccr_before']:.3f}", p[1]),
                     cell(f"{r['nodes_after']:,}", p[2]), cell(f"{r['ccr_after']:.3f}", p[3]),
                     cell(f"{r['node_reduction']:.0f}×", f"{p[0] / p[2]:.0f}×" if p[0] else None),
                     cell(f"{r['ccr_reduction']:.1f}×", f"{p[1] / p[3]:.1f}×" if p[1] else None)])
    cases = [(s.key, "fusion") for s in sets]
    claims = [
        C.value_between("ccr_reduced", "fusion cuts the CCR by about 3–10× (at least 2.5×; paper: 2.9–10.1×)",
                        cases, lambda r: r["ccr_reduction"], low=2.5, fmt="{:.1f}×"),
        C.value_between("nodes_reduced", "fusion leaves a few hundred nodes at most: at least 50× fewer "
                        "(paper: 103–165×)", cases, lambda r: r["node_reduction"], low=50, fmt="{:.0f}×"),
        C.value_between("ccr_high", "the original graphs have a high CCR (> 10; paper: 18.6–112)", cases,
                        lambda r: r["ccr_before"], low=10, fmt="{:.1f}"),
    ]
    out = TableOutput(table["name"], table["title"], setting_lines(table, sets, cluster, ctx,
                      [f"fusion: exploration range R = {options.get('exploration_range', 200)}, M = "
                       f"{options.get('fusion_memory_fraction', 0.25)} of a device's memory"]),
                      header, rows, records, C.verdicts(claims, records), ["Cells: ours (paper)."])
    if ctx.plots:
        plot_step_times([{**r, "placer": "before", "ccr": r["ccr_before"]} for r in records]
                        + [{**r, "placer": "after", "ccr": r["ccr_after"]} for r in records],
                        _labels(sets), ctx.out_dir / "ccr.png", table["title"], ["before", "after"], "ccr", "CCR")
        out.figures.append("ccr.png")
    return out


def _step_records(table: Mapping, ctx: Context):
    """Every algorithmic placer on every model; HRL (the Hierarchical Planner) too when the run
    has a ``budget``, trained for that many evaluated placements."""
    cluster = cluster_of(table)
    sets = settings(table)
    records = [r for s in sets for r in run_placers(s, cluster, table["placers"], table)]
    if ctx.budget:
        for s in sets:
            records.append(train_record(s, table["cluster"], table.get("hrl_agent", {"name": "hierarchical"}),
                                        ctx, placer="hrl"))
    return cluster, sets, records


def table3(table: Mapping, ctx: Context) -> TableOutput:
    """Single-step time (§6.4.1, Table 3); speed-up of Celeritas over the second best."""
    cluster, sets, records = _step_records(table, ctx)
    learned = [r for r in records if r["placer"] == "hrl"]
    beside = beside_records(learned, ctx)
    placers = list(dict.fromkeys([*table["placers"], *(["hrl"] if ctx.budget else [])]))
    columns = [*table["placers"], "hrl"]
    rows = []
    for s in sets:
        got = {p: C.find(records, s.key, p) for p in columns}
        others = [r["step_time"] for p, r in got.items() if r and p != "celeritas" and not r["oom"]]
        cel = got.get("celeritas")
        speedup = (f"{(min(others) / cel['step_time'] - 1) * 100:.1f}%" if others and cel and not cel["oom"]
                   else "—")
        rows.append([s.label, *(cell(fmt_step(got[p]), paper_value(table, s.key, p)) for p in columns),
                     cell(speedup, paper_value(table, s.key, "speedup"))])
    keys = [s.key for s in sets]
    claims = [
        C.no_slower("celeritas_le_order", "Celeritas is no slower than Order-Place (paper: 0.2–5.8% faster)",
                    keys, [("celeritas", "order_place")]),
        C.faster("order_beats_topo", "Order-Place is faster than m-TOPO (paper: 5.4–46%, or m-TOPO OOM)",
                 keys, [("order_place", "m_topo")]),
        C.no_slower("celeritas_best", "Celeritas is the fastest algorithmic placer on every model (paper: 7.8–34.2% "
                    "over the second best)", keys, [("celeritas", p) for p in table["placers"] if p != "celeritas"]),
        C.oom("celeritas_fits", "Celeritas never runs out of memory", [(k, "celeritas") for k in keys], expected=False),
    ]
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster, ctx,
                                    [f"HRL: the Hierarchical Planner, {budget_words(ctx.budget, ctx)}" if ctx.budget else
                                     "HRL: not run (give budget=N to train the Hierarchical Planner); paper's only"]),
                      ["model", *columns, "Celeritas vs second best"], rows, records + beside,
                      C.verdicts(claims, records), ["Cells: ours (paper), seconds.", *beside_notes(learned, beside, ctx)])
    if ctx.plots:
        plot_step_times(records, _labels(sets), ctx.out_dir / "step_times.png", table["title"], placers)
        out.figures.append("step_times.png")
    return out


def table4(table: Mapping, ctx: Context) -> TableOutput:
    """Placement generation time (§6.4.2, Table 4)."""
    cluster = cluster_of(table)
    sets = settings(table)
    placers = list(table["placers"])
    records = [r for s in sets for r in run_placers(s, cluster, placers, table)]
    rows = [[s.label, *(cell(f"{C.find(records, s.key, p)['placement_time']:.3g}", paper_value(table, s.key, p))
                        for p in placers), str(paper_value(table, s.key, "hrl") or "—")] for s in sets]
    keys = [s.key for s in sets]
    large = [s.key for s in sets if s.spec.get("large")]
    claims = [
        C.no_slower("celeritas_near_order", "Celeritas takes at most 1.5× Order-Place's placement time "
                    "(paper: 1.03–1.32×)", keys, [("celeritas", "order_place")], tolerance=0.5, value="placement_time"),
        C.faster("celeritas_beats_sct_large", "on the largest graphs Celeritas places faster than m-SCT "
                 "(paper: 26.4% on the Transformer)", large, [("celeritas", "m_sct")], value="placement_time"),
    ]
    out = TableOutput(table["name"], table["title"], setting_lines(table, sets, cluster, ctx,
                      ["placement time measured on this machine (2 cores, shared), Standard Evaluation excluded"]),
                      ["model", *placers, "HRL (paper)"], rows, records, C.verdicts(claims, records),
                      ["Cells: ours (paper), seconds."])
    if ctx.plots:
        plot_step_times(records, _labels(sets), ctx.out_dir / "placement_time.png", table["title"], placers,
                        "placement_time", "placement time (s)")
        out.figures.append("placement_time.png")
    return out


def table5(table: Mapping, ctx: Context) -> TableOutput:
    """Standard Evaluation accuracy (§4.2.1, §6.5.1, Table 5): per-op costs regressed from small
    batches vs the profile of the target batch, mean relative deviation. Profiled on this CPU."""
    from rlplace.tf.profile import standard_evaluation
    from rlplace.zoo import build_tf_model

    records = []
    for spec in table["models"]:
        knobs = dict(spec.get("knobs", {}))
        result = standard_evaluation(lambda b, n=spec["model"], k=knobs: build_tf_model(n, **{**k, "batch_size": b}),
                                     list(table["batch_sizes"]), table["target_batch"], **table.get("profile", {}))
        records.append({"model": spec["key"], "placer": "standard_evaluation", "ops": result.predicted.num_ops,
                        **result.as_dict()})
    rows = []
    for spec in table["models"]:
        r = C.find(records, spec["key"], "standard_evaluation")
        rows.append([spec.get("label", spec["key"]), f"{r['ops']:,}",
                     cell(f"{r['memory_deviation'] * 100:.2f}%", paper_value(table, spec["key"], "memory")),
                     cell(f"{r['time_deviation'] * 100:.2f}%", paper_value(table, spec["key"], "time"))])
    cases = [(spec["key"], "standard_evaluation") for spec in table["models"]]
    claims = [
        C.value_between("memory_accurate", "memory is estimated within 10% on average (paper: 1.5–6.0%)", cases,
                        lambda r: r["memory_deviation"], high=0.10, fmt="{:.2%}"),
        C.value_between("memory_better_than_time", "memory is estimated better than time (paper: on every model)",
                        cases, lambda r: r["time_deviation"] - r["memory_deviation"], low=0.0, fmt="{:+.2%}"),
        C.value_between("time_rough", "time is estimated within 20% on average (paper: 8.0–14.2%)", cases,
                        lambda r: r["time_deviation"], high=0.20, fmt="{:.2%}"),
    ]
    lines = [f"mode: {ctx.mode}", "costs: profiled on this machine's CPU with TensorFlow (rlplace.tf.profile), "
             f"batch sizes {list(table['batch_sizes'])} → predicted and measured at {table['target_batch']}",
             *(f"{spec.get('label', spec['key'])}: `{spec['model']}` ({', '.join(f'{k}={v}' for k, v in spec.get('knobs', {}).items())})"
               for spec in table["models"])]
    out = TableOutput(table["name"], table["title"], lines, ["model", "ops", "memory deviation", "time deviation"],
                      rows, records, C.verdicts(claims, records), ["Cells: ours (paper)."])
    if ctx.plots:
        plot_step_times([{"model": "all", "placer": f"{r['model']} {kind}", "dev": r[f"{kind}_deviation"]}
                         for r in records for kind in ("memory", "time")], {"all": "mean relative deviation"},
                        ctx.out_dir / "deviation.png", table["title"], None, "dev", "mean relative deviation")
        out.figures.append("deviation.png")
    return out

