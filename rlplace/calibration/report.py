"""The calibration report: ``report.md`` (the fit with confidence intervals, R², held-out
fidelity before and after, cross-validation, noise floor and ceiling, every placement) and the
scatter plot of simulated against measured step time, before and after calibration."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlplace.calibration.study import Study


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _value(row: dict[str, Any]) -> str:
    v, (lo, hi) = row["value"], row["ci"]
    fmt = ".3g"
    return f"{v:{fmt}} | [{_num(lo, fmt)}, {_num(hi, fmt)}]"


def markdown(title: str, study: Study, notes: list[str]) -> str:
    s = study.summary()
    f = s["fit"]
    lines = [f"# {title}", "", *notes, "",
             f"Fitted on {s['fit_on']} placements ({s['rounds']} rounds each, median), scored on {s['held_out']} "
             f"held-out placements. Transfers: **{f['mode']}** (residual cost "
             + ", ".join(f"{k} {v:.4f}" for k, v in f["mode_cost"].items()) + f"). R² on the fitted placements "
             f"{f['r2']:.3f}.", "",
             "| parameter | value | 95% confidence interval | unit |", "|---|---|---|---|"]
    lines += [f"| {r['parameter']} | {_value(r)} | {r['unit']} |" for r in f["parameters"]]
    lines += ["", "| fidelity | placements | Spearman | Kendall τ | median relative error |", "|---|---|---|---|---|"]
    for name, key in (("held out, before calibration", "held_out_before"), ("held out, calibrated", "held_out_after"),
                      ("cross-validated (out of fold), calibrated", "cross_validated")):
        sc = s[key]
        if sc is not None:
            lines.append(f"| {name} | {sc['placements']} | {_num(sc['spearman'])} | {_num(sc['kendall_tau'])} | "
                         f"{_num(sc['median_relative_error'], '.1%')} |")
    lines += ["", "| noise | placements | split-half Spearman | reliability | noise ceiling (best Spearman) |",
              "|---|---|---|---|---|"]
    for name, nc in s["noise_ceiling"].items():
        if nc is not None:
            lines.append(f"| {name.replace('_', ' ')} | {nc['placements']} | {nc['half_spearman']:.3f} | "
                         f"{nc['reliability']:.3f} | {nc['ceiling']:.3f} |")
    lines += ["", f"Noise floor: the median over the placements of (max - min) / median over the rounds: "
              f"{_num(s['noise_floor'], '.1%')}.", "",
              "| placement | family | role | transfers | measured (ms) | rounds (ms) | simulated before (ms) | "
              "calibrated (ms) |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(study.rows(), key=lambda r: r["measured"]):
        lines.append(f"| {r['placement']} | {r['family']} | {r['role']} | {r['num_transfers']} | "
                     f"{r['measured'] * 1e3:.2f} | " + ", ".join(f"{t * 1e3:.1f}" for t in r["rounds"])
                     + f" | {r['simulated_before'] * 1e3:.2f} | {r['simulated_after'] * 1e3:.2f} |")
    return "\n".join(lines) + "\n"


def scatter(study: Study, path: Path, title: str, axes=None) -> None:
    """Simulated (x) against measured (y) step time, before and after calibration, held-out
    placements filled, fitted ones hollow; into ``axes`` (two of them) or a new figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = None
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    m, s = study.measurements, study.summary()
    ok, held = m.fits, study.held_out
    for ax, key, sim, what in ((axes[0], "held_out_before", study.before, "before calibration"),
                               (axes[1], "held_out_after", study.after, "calibrated")):
        for mask, style, label in ((ok & ~held, dict(facecolors="none", edgecolors="C0"), "fitted on"),
                                   (held, dict(color="C1"), "held out")):
            ax.scatter(sim[mask] * 1e3, m.median[mask] * 1e3, s=24, label=label, **style)
        values = [*sim[ok], *m.median[ok]]
        lo, hi = min(values) * 1e3 * 0.8, max(values) * 1e3 * 1.2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
        sc = s[key]
        ax.set(xscale="log", yscale="log", xlabel=f"simulated step time (ms), {what}", ylabel="measured step time (ms)",
               title=f"{title}: held-out Spearman {_num(sc['spearman'], '.2f')}, "
                     f"median rel. error {_num(sc['median_relative_error'], '.0%')}")
        ax.legend(fontsize=7)
    if fig is not None:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
