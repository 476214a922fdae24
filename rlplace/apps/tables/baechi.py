"""Baechi (SoCC'20) §5: Tables 2-5 and Figures 8-9, on the 4 × GTX 2080 preset.

Each function takes the table config (``rlplace/conf/table/baechi_*.yaml``) and a Context and returns a
TableOutput. Settings carry a ``family`` (``inception`` or ``gnmt``) that the claims use.
"""

from __future__ import annotations

from typing import Any, Mapping

import matplotlib.pyplot as plt
import numpy as np

from rlplace.costs import perturb
from rlplace.placers import make_placer
from rlplace.sim import simulate
from rlplace.apps.tables import claims as C
from rlplace.apps.tables.common import (GIB, OPTIMIZER_OFF, OPTIMIZER_ON, Context, Setting, TableOutput, cell, cluster_of,
                                   fmt_step, paper_value, placer_options, plot_step_times, progress,
                                   run_placer, run_placers, setting_lines, settings)

BAECHI = ["m_topo", "m_etf", "m_sct"]


def _family(sets: list[Setting], family: str) -> list[str]:
    return [s.key for s in sets if s.spec.get("family") == family]


def _labels(sets: list[Setting]) -> dict[str, str]:
    return {s.key: s.label for s in sets}


def _speedup(ref: float | None, x: float | None) -> str:
    """Baechi Table 3's "speedup over": ref / x - 1."""
    if ref is None or x is None or not np.isfinite(ref) or not np.isfinite(x):
        return "—"
    return f"{(ref / x - 1) * 100:.1f}%"


def _t(r: Mapping | None) -> float | None:
    return None if r is None or r.get("oom") else r["step_time"]


def _paper_t(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) else None


# --------------------------------------------------------------------------------- Table 3
def table3(table: Mapping, ctx: Context) -> TableOutput:
    """Step times with sufficient memory: single, expert, m-TOPO, m-ETF, m-SCT (§5.3)."""
    cluster = cluster_of(table)
    sets = settings(table)
    placers = list(table["placers"])
    records = [r for s in sets for r in run_placers(s, cluster, placers, table)]
    header = ["model", *placers, "m-ETF vs single", "m-SCT vs single", "m-ETF vs expert", "m-SCT vs expert"]
    rows = []
    for s in sets:
        got = {p: C.find(records, s.key, p) for p in placers}
        paper = {p: paper_value(table, s.key, p) for p in placers}
        row = [s.label] + [cell(fmt_step(got[p]), paper[p]) for p in placers]
        for a, ref in (("m_etf", "single"), ("m_sct", "single"), ("m_etf", "expert"), ("m_sct", "expert")):
            ours = _speedup(_t(got.get(ref)), _t(got.get(a)))
            theirs = _speedup(_paper_t(paper.get(ref)), _paper_t(paper.get(a)))
            row.append(cell(ours, None if theirs == "—" else theirs))
        rows.append(row)
    inc, gnmt = _family(sets, "inception"), _family(sets, "gnmt")
    claims = [
        C.within("inception_equal_single", "Inception-V3: m-ETF and m-SCT equal the single GPU (= expert) step time (within 1%)",
                 inc, [("m_etf", "single"), ("m_sct", "single")], 0.01),
        C.slower("inception_topo_slower", "Inception-V3: m-TOPO is slower than the expert (paper: +6.1–6.3%)",
                 inc, [("m_topo", "expert")]),
        C.faster("gnmt_faster_than_single", "GNMT: m-ETF and m-SCT are faster than the single GPU (paper: 12.1–33.9%)",
                 gnmt, [("m_etf", "single"), ("m_sct", "single")]),
        C.within("gnmt_near_expert", "GNMT: m-ETF and m-SCT within 7% of the expert (paper: -6.2% to +6.2%)",
                 gnmt, [("m_etf", "expert"), ("m_sct", "expert")], 0.07),
        C.slower("gnmt_topo_slowest", "GNMT: m-TOPO is slower than m-ETF and m-SCT (paper: 5.8–26.4%)",
                 gnmt, [("m_topo", "m_etf"), ("m_topo", "m_sct")]),
    ]
    return _finish(table, ctx, sets, cluster, header, rows, records, claims, placers,
                   notes=["Cells: ours (paper), step time in seconds; speedup = reference / placer - 1."])


def _finish(table, ctx, sets, cluster, header, rows, records, claims, placers, notes=(), extra=(),
            value="step_time", ylabel="step time (s)", plot_records=None) -> TableOutput:
    out = TableOutput(table["name"], table["title"], setting_lines(table, sets, cluster, ctx, extra),
                      header, rows, records, C.verdicts(claims, records), list(notes))
    if ctx.plots:
        name = "step_times.png" if value == "step_time" else f"{value}.png"
        plot_step_times(records if plot_records is None else plot_records, _labels(sets), ctx.out_dir / name,
                        table["title"], placers, value, ylabel)
        out.figures.append(name)
    return out


# --------------------------------------------------------------------------------- Table 2
def table2(table: Mapping, ctx: Context) -> TableOutput:
    """Placement time (§5.2): Baechi's placers here, the learned placers' times as the paper
    derived them (reported final step time × samples)."""
    cluster = cluster_of(table)
    sets = settings(table)
    placers = list(table["placers"])
    records = [r for s in sets for r in run_placers(s, cluster, placers, table)]
    learned = table["learned"]  # {name: {family: seconds}}
    header = ["model", *(f"{p} placement (s)" for p in placers), "paper: Baechi (m-SCT)",
              *(f"paper: {n}" for n in learned), *(f"m-SCT speedup vs {n}" for n in learned)]
    rows = []
    for s in sets:
        fam = s.spec.get("family")
        got = {p: C.find(records, s.key, p) for p in placers}
        sct = got.get("m_sct")
        rows.append([s.label, *(f"{got[p]['placement_time']:.3g}" for p in placers),
                     str(table["paper"].get(fam, "—")),
                     *(_duration(learned[n].get(fam)) for n in learned),
                     *(f"{learned[n][fam] / sct['placement_time']:,.0f}×" if sct and learned[n].get(fam) else "—"
                       for n in learned)])
    claims = []
    for fam, limit in table["limits"].items():
        keys = _family(sets, fam)
        claims.append(C.value_between(f"{fam}_within_paper", f"{fam}: m-SCT places in at most {limit} s "
                                      f"(paper's worst case, on a 2-core machine here)",
                                      [(k, "m_sct") for k in keys], lambda r: r["placement_time"], high=limit,
                                      fmt="{:.3g} s"))
        slowest = min(t.get(fam, np.inf) for t in learned.values())
        claims.append(C.value_between(f"{fam}_speedup", f"{fam}: m-SCT at least 654× faster than the learned "
                                      f"placers' placement time (paper: 654×–206K×)",
                                      [(k, "m_sct") for k in keys], lambda r, t=slowest: t / r["placement_time"],
                                      low=654, fmt="{:,.0f}×"))
    return _finish(table, ctx, sets, cluster, header, rows, records, claims, placers,
                   notes=["Learned placers' times are the paper's (Addanki et al.'s reported step time × samples); "
                          "ours are measured on this machine."],
                   value="placement_time", ylabel="placement time (s)")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    return (f"{d} d " if d else "") + f"{h} h {rest // 60} min"


# --------------------------------------------------------------------------------- Table 4 / Fig. 9
def _memory_records(table: Mapping, sets: list[Setting]) -> list[dict]:
    """Every placer at each memory fraction of the table (1.0 = sufficient memory)."""
    records = []
    for fraction in table["memory_fractions"]:
        cluster = cluster_of(table, fraction)
        for s in sets:
            records += run_placers(s, cluster, table["placers"], table, memory=fraction,
                                   memory_limit=int(cluster.memory.min()))
    return records


def table4(table: Mapping, ctx: Context) -> TableOutput:
    """Insufficient memory (§5.4): per-GPU memory cut to 30% of 8 GB; slowdown vs sufficient."""
    sets = settings(table)
    placers = list(table["placers"])
    cut = min(table["memory_fractions"])
    records = _memory_records(table, sets)
    cluster = cluster_of(table, cut)
    rows = []
    for s in sets:
        row = [s.label]
        for p in placers:
            low, full = C.find(records, s.key, p, memory=cut), C.find(records, s.key, p, memory=1.0)
            ours = fmt_step(low)
            if _t(low) is not None and _t(full) is not None:
                ours += f" ({(low['step_time'] / full['step_time'] - 1) * 100:+.1f}%)"
            row.append(cell(ours, paper_value(table, s.key, p)))
        rows.append(row)
    inc, gnmt = _family(sets, "inception"), _family(sets, "gnmt")
    claims = [
        C.oom("single_ooms", "the single GPU runs out of memory", [(k, "single") for k in inc + gnmt], memory=cut),
        C.oom("expert_inception_ooms", "the expert runs out of memory on Inception-V3", [(k, "expert") for k in inc],
              memory=cut),
        C.oom("expert_gnmt_fits", "the expert fits on GNMT", [(k, "expert") for k in gnmt], expected=False, memory=cut),
        C.oom("baechi_fits", "m-TOPO, m-ETF and m-SCT all place without running out of memory",
              [(k, p) for k in inc + gnmt for p in BAECHI], expected=False, memory=cut),
        C.Claim("slowdown_small", "m-ETF and m-SCT are at most 14% slower than with sufficient memory "
                "(paper: 0–13.8%)", _slowdown(inc + gnmt, ["m_etf", "m_sct"], cut, 0.14)),
    ]
    return _finish(table, ctx, sets, cluster, ["model", *placers], rows, records, claims, placers,
                   notes=[f"Cells: ours at {cut:.0%} memory (slowdown vs sufficient memory) (paper)."],
                   extra=[f"memory per device: {cut:.0%} of the preset's ({cluster.memory.min() / GIB:.3g} GiB)"],
                   plot_records=[r for r in records if r["memory"] == cut])


def _slowdown(models, placers, cut, limit) -> C.Check:
    def check(records):
        parts, ok = [], True
        for m in models:
            for p in placers:
                low, full = C.find(records, m, p, memory=cut), C.find(records, m, p, memory=1.0)
                if low is None or full is None:
                    return None, f"no record of {p} on {m}"
                if low["oom"] or full["oom"]:
                    ok = False
                    parts.append(f"{m}: {p} OOM")
                    continue
                s = low["step_time"] / full["step_time"] - 1
                ok &= s <= limit
                parts.append(f"{m}: {p} {s * 100:+.1f}%")
        return ok, "; ".join(parts)

    return check


def fig9(table: Mapping, ctx: Context) -> TableOutput:
    """Peak memory per device normalised to the memory limit, insufficient memory (§5.4)."""
    sets = settings(table)
    placers = list(table["placers"])
    cut = min(table["memory_fractions"])
    records = [r for r in _memory_records(table, sets) if r["memory"] == cut]
    for r in records:
        r["peak_fraction"] = [b / r["memory_limit"] for b in r["peak_memory"]]
    cluster = cluster_of(table, cut)
    rows = [[s.label, p, " / ".join(f"{x:.2f}" for x in r["peak_fraction"]) + (" OOM" if r["oom"] else "")]
            for s in sets for p in placers if (r := C.find(records, s.key, p))]
    inc, gnmt = _family(sets, "inception"), _family(sets, "gnmt")
    claims = [
        C.value_between("sct_under_limit", "m-SCT stays under the memory limit on every device",
                        [(k, "m_sct") for k in inc + gnmt], lambda r: max(r["peak_fraction"]), high=1.0, fmt="max {:.2f}"),
        C.value_between("sct_inception_multi", "Inception-V3: m-SCT uses a mix of GPUs (at least 2 hold > 5% of the limit)",
                        [(k, "m_sct") for k in inc], lambda r: sum(x > 0.05 for x in r["peak_fraction"]), low=2,
                        fmt="{:.0f} devices"),
        C.Claim("gnmt_more_even", "m-SCT balances memory more evenly on GNMT than on Inception-V3 "
                "(coefficient of variation of the per-device peaks)", _balance(inc, gnmt)),
    ]
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster, ctx, [f"memory per device: {cut:.0%} of the preset's "
                                                                f"({cluster.memory.min() / GIB:.3g} GiB)"]),
                      ["model", "placer", "peak memory / limit, per device"], rows, records,
                      C.verdicts(claims, records))
    if ctx.plots:
        _plot_fig9(records, sets, placers, ctx.out_dir / "peak_memory.png", table["title"])
        plot_step_times(records, _labels(sets), ctx.out_dir / "step_times.png", f"{table['title']}: step times", placers)
        out.figures += ["peak_memory.png", "step_times.png"]
    return out


def _cv(r: Mapping) -> float:
    x = np.asarray(r["peak_fraction"])
    return float(x.std() / x.mean()) if x.mean() > 0 else float("inf")


def _balance(inc, gnmt) -> C.Check:
    def check(records):
        a = [C.find(records, k, "m_sct") for k in inc]
        b = [C.find(records, k, "m_sct") for k in gnmt]
        if not a or not b or None in a + b:
            return None, "m-SCT records missing"
        ca, cb = max(_cv(r) for r in a), max(_cv(r) for r in b)
        return cb < min(_cv(r) for r in a), f"CV GNMT {cb:.2f} (worst) vs Inception-V3 {ca:.2f}"

    return check


def _plot_fig9(records, sets, placers, path, title):
    fig, axes = plt.subplots(1, len(sets), figsize=(4.5 * len(sets), 3.6), squeeze=False)
    for ax, s in zip(axes[0], sets):
        rows = [(p, C.find(records, s.key, p)) for p in placers]
        rows = [(p, r) for p, r in rows if r is not None]
        width = 0.8 / max(len(rows), 1)
        for k, (p, r) in enumerate(rows):
            x = np.arange(len(r["peak_fraction"])) + (k - (len(rows) - 1) / 2) * width
            ax.bar(x, r["peak_fraction"], width, label=p + (" (OOM)" if r["oom"] else ""), color=f"C{placers.index(p)}")
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(rows[0][1]["peak_fraction"])) if rows else [])
        ax.set_xlabel("GPU")
        ax.set_title(s.label, fontsize=9)
    axes[0][0].set_ylabel("peak memory / limit")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------- Table 5
def table5(table: Mapping, ctx: Context) -> TableOutput:
    """m-SCT with Baechi's optimizations off and on (§5.5): ops placed, placement and step time."""
    cluster = cluster_of(table)
    sets = settings(table)
    placer = table["placer"]
    # the paper's optimizer alone: the fallback to the plain graph is ours (rlplace.placers.baechi)
    variants = {"un-optimized": OPTIMIZER_OFF[placer],
                "optimized": {**OPTIMIZER_ON[placer], "optimizer_fallback": False}}
    records = []
    for s in progress(sets, f"{table['name']}: {placer} off and on", "graph"):
        for label, options in variants.items():
            r = run_placer(placer, s.graph, cluster, {**placer_options(s, table, placer), **options})
            records.append({"model": s.key, **r, "placer": f"{placer} ({label})"})
    header = ["model"] + [f"{v}: {c}" for v in variants for c in ("ops placed", "placement (s)", "step (s)")]
    rows = []
    for s in sets:
        row = [s.label]
        for v in variants:
            r = C.find(records, s.key, f"{placer} ({v})")
            paper = paper_value(table, s.key, v) or [None] * 3
            row += [cell(str(r["ops_placed"]), paper[0]), cell(f"{r['placement_time']:.3g}", paper[1]),
                    cell(fmt_step(r), paper[2])]
        rows.append(row)
    keys = [s.key for s in sets]
    on, off = f"{placer} (optimized)", f"{placer} (un-optimized)"
    claims = [
        C.slower("fewer_ops", "the optimizations cut the ops to place by at least 10× (paper: 33–405×)",
                 keys, [(off, on)], margin=9.0, value="ops_placed"),
        C.slower("faster_placement", "the optimizations speed placement up by at least 10× (paper: 75.6–229.3×)",
                 keys, [(off, on)], margin=9.0, value="placement_time"),
        C.no_slower("no_slower_step", "the optimized placement's step time is no slower (paper: 1.1–3.0× faster)",
                    keys, [(on, off)]),
    ]
    return _finish(table, ctx, sets, cluster, header, rows, records, claims, [off, on],
                   notes=["Cells: ours (paper)."])


# --------------------------------------------------------------------------------- Figure 8
def fig8(table: Mapping, ctx: Context) -> TableOutput:
    """Profile sensitivity (§5.3, Fig. 8): place on ``perturb(graph, p, seed)``, simulate on the
    true graph; the ratio to the unperturbed placement's step time."""
    cluster = cluster_of(table)
    sets = settings(table)
    ps = table["perturbations"]
    records = []
    for s in sets:
        seeds = range(s.spec.get("seeds", table["seeds"]))
        for name in progress(table["placers"], f"{table['name']}: {s.label}", "placer"):
            options = placer_options(s, table, name)
            base = simulate(s.graph, cluster, make_placer(name, seed=0, **options).place(s.graph, cluster)).step_time
            for p in ps:
                for seed in (seeds if p > 0 else [0]):
                    g = perturb(s.graph, p, seed) if p > 0 else s.graph
                    t = simulate(s.graph, cluster, make_placer(name, seed=0, **options).place(g, cluster)).step_time
                    records.append({"model": s.key, "placer": name, "p": p, "seed": seed, "step_time": t,
                                    "oom": False, "ratio": t / base})
    summary = _fig8_summary(records)
    header = ["model", "placer", *(f"p={p:g}" for p in ps)]
    rows = [[s.label, name, *(f"{summary[s.key, name, p][0]:.3f} [{summary[s.key, name, p][1]:.3f}, "
                              f"{summary[s.key, name, p][2]:.3f}]" for p in ps)]
            for s in sets for name in table["placers"]]
    sens = [{"model": m, "placer": n, "deviation": float(np.mean([abs(r["ratio"] - 1) for r in records
                                                                    if r["model"] == m and r["placer"] == n])),
             "max_low": max([abs(r["ratio"] - 1) for r in records if r["model"] == m and r["placer"] == n
                             and r["p"] <= 0.2], default=0.0),
             "max_all": max(abs(r["ratio"] - 1) for r in records if r["model"] == m and r["placer"] == n)}
            for s in sets for m in [s.key] for n in table["placers"]]
    keys = [s.key for s in sets]
    claims = [
        C.value_between("small_up_to_20", "step times deviate little up to 20% profile error (at most 10%)",
                        [(k, n) for k in keys for n in table["placers"]], lambda r: r["max_low"], high=0.10,
                        fmt="{:.1%}"),
        C.value_between("bounded_to_80", "from 20% to 80% profile error step times deviate at most 30%",
                        [(k, n) for k in keys for n in table["placers"]], lambda r: r["max_all"], high=0.30,
                        fmt="{:.1%}"),
        C.no_slower("etf_less_sensitive", "m-ETF is less sensitive than m-SCT (mean |ratio - 1| over p and seeds)",
                    keys, [("m_etf", "m_sct")], value="deviation"),
    ]
    big = table.get("batch_pairs", [])
    if big:
        claims.append(C.Claim("bigger_batch_less_sensitive", "a bigger batch is less sensitive (256 vs 128)",
                              _batch_check(big, table["placers"])))
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster, ctx, ["perturbation p: each op's compute time and each "
                                                                "tensor's bytes × U[1, 1 + p]; seeds per p: " + ", ".join(
                                                                    f"{s.key} {s.spec.get('seeds', table['seeds'])}" for s in sets)]),
                      header, rows, records + [{**x, "summary": True} for x in sens],
                      C.verdicts(claims, sens), ["Cells: mean [min, max] of step time / unperturbed placement's."])
    if ctx.plots:
        _plot_fig8(summary, sets, table["placers"], ps, ctx.out_dir / "perturbation.png", table["title"])
        out.figures.append("perturbation.png")
    return out


def _batch_check(pairs, placers) -> C.Check:
    def check(records):
        parts, ok = [], True
        for small, big in pairs:
            for n in placers:
                a, b = C.find(records, small, n), C.find(records, big, n)
                if a is None or b is None:
                    return None, f"no record of {n} on {small}/{big}"
                ok &= b["deviation"] <= a["deviation"]
                parts.append(f"{n}: {big} {b['deviation']:.1%} vs {small} {a['deviation']:.1%}")
        return ok, "; ".join(parts)

    return check


def _fig8_summary(records):
    out = {}
    for r in records:
        out.setdefault((r["model"], r["placer"], r["p"]), []).append(r["ratio"])
    return {k: (float(np.mean(v)), float(np.min(v)), float(np.max(v))) for k, v in out.items()}


def _plot_fig8(summary, sets, placers, ps, path, title):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s in sets:
        for k, n in enumerate(placers):
            mean = [summary[s.key, n, p][0] for p in ps]
            lo = [summary[s.key, n, p][1] for p in ps]
            hi = [summary[s.key, n, p][2] for p in ps]
            line, = ax.plot(ps, mean, marker="o", linestyle="-" if k == 0 else "--", label=f"{n}, {s.label}")
            ax.fill_between(ps, lo, hi, alpha=0.12, color=line.get_color())
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xlabel("perturbation p (factor U[1, 1 + p])")
    ax.set_ylabel("step time / unperturbed")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
