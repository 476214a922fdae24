"""Tables and plots for people: the comparison table, the Gantt chart of a simulated schedule
and the peak memory per device. Units are converted here, for display only."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from rlplace.cluster import Cluster  # noqa: E402
from rlplace.graph import OpGraph  # noqa: E402
from rlplace.schedule import Schedule, critical_path  # noqa: E402

GIB = 2**30
CATEGORY_COLOURS = (0, 1, 2, 4, 5, 6, 8, 9)  # tab10 without red (the critical path) and grey


def format_table(records: Sequence[dict], cluster: Cluster) -> str:
    """A text table of comparison records (``placer``, ``step_time``, ``oom``,
    ``oom_devices``, ``peak_memory``, ``placement_time``, ``ops_placed``). A record with an
    ``error`` (a placer that failed) is a row that says so, its error under the table. Records
    that carry the lower bounds (``lower_bound``, ``communication_bound``: ``rlplace.bounds``)
    get a column of the step time over the communication bound, and the bounds under the table."""
    bounded = [r for r in records if "communication_bound" in r]
    header = ["placer", "step time (ms)", *(["/ bound"] if bounded else []), "OOM", "peak memory per device (GiB)",
              "placement time (s)", "ops placed"]
    rows, errors = [], []
    for r in records:
        if "error" in r:
            rows.append([r["placer"], "failed", *(["-"] if bounded else []), "-", "-", f"{r['placement_time']:.3f}", "-"])
            errors.append(f"{r['placer']} failed: {r['error']}")
            continue
        oom = ",".join(cluster.devices[d].name for d in r["oom_devices"]) if r["oom"] else "no"
        ratio = ([f"{r['step_time'] / r['communication_bound']:.2f}" if r.get("communication_bound") else "-"]
                 if bounded else [])
        rows.append([r["placer"], f"{r['step_time'] * 1e3:.3f}", *ratio, oom,
                     " ".join(f"{b / GIB:.2f}" for b in r["peak_memory"]),
                     f"{r['placement_time']:.3f}", str(r["ops_placed"])])
    align = ["left", "right", *(["right"] if bounded else []), "left", "left", "right", "right"]
    notes = [f"lower bound: {bounded[0]['communication_bound'] * 1e3:.3f} ms with communication, "
             f"{bounded[0]['lower_bound'] * 1e3:.3f} ms without (rlplace.bounds)"] if bounded else []
    table = tabulate(rows, header, tablefmt="simple", colalign=align, disable_numparse=True)
    return "\n".join([table, *notes, *errors])


def op_categories(graph: OpGraph, busy: np.ndarray, most: int = 8) -> tuple[list[str], np.ndarray]:
    """The legend of a Gantt chart: at most ``most`` labels and one label index per op. By op
    type when the graph has several (the types with the most ``busy`` time, the rest as
    "other"), else by layer (integer layers in contiguous ranges), else one "op"."""
    types = [t or "?" for t in graph.op_type]
    if len(set(types)) > 1:
        return _top(types, busy, most)
    layers = graph.layer
    if any(x is not None for x in layers):
        if all(isinstance(x, (int, np.integer)) for x in layers):
            values = np.asarray(layers, dtype=np.int64)
            chunks = np.array_split(np.unique(values), min(most, len(np.unique(values))))
            bins = np.searchsorted([c[0] for c in chunks], values, side="right") - 1
            labels = [f"layer {c[0]}" if len(c) == 1 else f"layers {c[0]}-{c[-1]}" for c in chunks]
            return labels, bins
        return _top([f"layer {x}" for x in layers], busy, most)
    return ["op"], np.zeros(graph.num_ops, dtype=np.int64)


def _top(names: list[str], busy: np.ndarray, most: int) -> tuple[list[str], np.ndarray]:
    totals: dict[str, float] = {}
    for name, t in zip(names, busy):
        totals[name] = totals.get(name, 0.0) + float(t)
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    kept = ranked if len(ranked) <= most else ranked[:most - 1]
    labels = kept + (["other"] if len(kept) < len(ranked) else [])
    index = {name: k for k, name in enumerate(kept)}
    return labels, np.array([index.get(name, len(kept)) for name in names], dtype=np.int64)


def schedule_figure(graph: OpGraph, cluster: Cluster, schedule: Schedule | None, title: str = ""):
    """Gantt chart: one row of ops per device, and under it the transfers it receives; ops
    coloured by ``op_categories`` (legend on the right); the critical path (the chain of ops and
    transfers that ends last, ``rlplace.schedule.critical_path``) in red: a strip above its
    ops, its transfers filled, joined by a line. With no schedule, an empty chart (nothing evaluated yet)."""
    ndev = cluster.num_devices
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.9 * ndev))
    if schedule is not None and graph.num_ops:
        _draw_schedule(ax, graph, ndev, schedule)
    ax.set_ylim(0, 2 * ndev)
    ax.set_yticks([y + 0.5 for d in range(ndev) for y in (2 * d, 2 * d + 1)])
    ax.set_yticklabels([label for dev in cluster.devices for label in (f"{dev.name}", "  ← transfers in")])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"Simulated schedule of {graph.name}")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _draw_schedule(ax, graph: OpGraph, ndev: int, schedule: Schedule) -> None:
    busy = schedule.op_end - schedule.op_start
    labels, category = op_categories(graph, busy, most=len(CATEGORY_COLOURS))
    colours = [plt.get_cmap("tab10")(k) for k in CATEGORY_COLOURS][:len(labels)]
    if labels[-1] == "other":
        colours[-1] = (0.8, 0.8, 0.8, 1.0)
    path = critical_path(graph, schedule)
    on_path_op = np.zeros(graph.num_ops, dtype=bool)
    on_path_op[path.ops] = True
    on_path_x = np.zeros(len(schedule.transfer_start), dtype=bool)
    on_path_x[path.transfers] = True
    for d in range(ndev):
        ops = np.flatnonzero(schedule.op_device == d)
        ax.broken_barh(list(zip(schedule.op_start[ops] * 1e3, busy[ops] * 1e3)), (2 * d + 0.2, 0.75),
                       facecolors=[colours[c] for c in category[ops]], linewidth=0)
        ops = ops[on_path_op[ops]]  # the critical path: a red strip above its ops
        ax.broken_barh(list(zip(schedule.op_start[ops] * 1e3, busy[ops] * 1e3)), (2 * d + 0.03, 0.14),
                       facecolors="C3", linewidth=0)
        xs = np.flatnonzero(schedule.transfer_dst_device == d)
        ax.broken_barh(list(zip(schedule.transfer_start[xs] * 1e3,
                                (schedule.transfer_end[xs] - schedule.transfer_start[xs]) * 1e3)),
                       (2 * d + 1.25, 0.5), facecolors=np.where(on_path_x[xs, None], to_rgba("C3"), to_rgba("0.6")),
                       edgecolors=np.where(on_path_x[xs, None], to_rgba("C3"), to_rgba("0.3")), linewidth=0.3)
    centres = [((schedule.op_start[i] + schedule.op_end[i]) / 2e-3, 2 * schedule.op_device[i] + 0.1)
               if kind == "op" else ((schedule.transfer_start[i] + schedule.transfer_end[i]) / 2e-3,
                                     2 * schedule.transfer_dst_device[i] + 1.5) for kind, i in path.steps]
    compute = float(busy[path.ops].sum()) * 1e3
    moving = float((schedule.transfer_end - schedule.transfer_start)[path.transfers].sum()) * 1e3
    handles = [Patch(facecolor=c, label=name) for c, name in zip(colours, labels)]
    handles.append(Patch(facecolor="C3", label=f"critical path (strip above ops; transfers):\n"
                                                f"{len(path.ops)} ops ({compute:.3g} ms), "
                                                f"{len(path.transfers)} transfers ({moving:.3g} ms)"))
    ax.plot(*zip(*centres), color="C3", linewidth=0.6, alpha=0.6)
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def plot_schedule(graph: OpGraph, cluster: Cluster, schedule: Schedule, path: str | Path,
                  title: str = "") -> None:
    """Write the Gantt chart of ``schedule_figure`` to ``path``."""
    fig = schedule_figure(graph, cluster, schedule, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figure_to_rgb(fig) -> np.ndarray:
    """An (height, width, 3) uint8 image of a figure, which is then closed."""
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return image


def memory_figure(records: Sequence[dict], cluster: Cluster, title: str = ""):
    """Peak memory per device for every placer, one row per placer sorted by its largest peak
    (the largest on top): a bar to the largest peak (red: out of memory), a mark per device, and
    each distinct device size as a dashed line. The figure has one size whatever the number of
    placers and devices."""
    fig, ax = plt.subplots(figsize=(9, 6))
    rows = sorted(records, key=lambda r: (max(r["peak_memory"], default=0), r["placer"]))
    peaks = np.array([r["peak_memory"] for r in rows], dtype=float).reshape(len(rows), cluster.num_devices) / GIB
    y = np.arange(len(rows))
    ax.barh(y, peaks.max(axis=1, initial=0.0), height=0.7,
            color=["#f4a6a6" if r["oom"] else "#c6d7ea" for r in rows])
    marks = "os^vDP*Xdph"
    for d, dev in enumerate(cluster.devices):
        many = cluster.num_devices > len(marks)
        ax.scatter(peaks[:, d], y, s=14 if many else 22, zorder=3, color="0.2" if many else f"C{d}",
                   marker="o" if many else marks[d], label=None if many and d else "device peaks" if many else dev.name)
    for size in sorted({dev.memory_bytes for dev in cluster.devices}):
        names = [dev.name for dev in cluster.devices if dev.memory_bytes == size]
        which = "device memory" if len(names) == cluster.num_devices else ", ".join(names)
        ax.axvline(size / GIB, color="k", linestyle="dashed", linewidth=1, label=f"{which}: {size / GIB:.3g} GiB")
    ax.set_yticks(y)
    ax.set_yticklabels([r["placer"] + (" (OOM)" if r["oom"] else "") for r in rows],
                       fontsize=min(9.0, max(4.0, 300 / max(len(rows), 1))))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(left=0)
    ax.set_xlabel("peak memory (GiB)")
    ax.set_title(title or "Peak memory per device, placers by their largest peak")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_memory(records: Sequence[dict], cluster: Cluster, path: str | Path, title: str = "") -> None:
    """Write the chart of ``memory_figure`` to ``path``."""
    fig = memory_figure(records, cluster, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def training_curve_figure(step_times: Sequence[float], valid: Sequence[bool], title: str = "",
                          references: Sequence[dict] = (), lower_bound: float | None = None):
    """Step time of every evaluated placement (dots; invalid ones at the top, crossed) and the
    best valid step time so far (line), against the number of placements evaluated;
    ``references`` (records ``{"placer", "step_time", "oom"}``: the algorithmic placers and the
    searches) with a ``curve`` (``curve_xy``) as step lines on the same axis, the others as
    horizontal lines, and ``lower_bound`` as a dashed one. Horizontal lines above the slowest
    valid sample are listed in the legend but not drawn."""
    times = np.asarray(step_times, dtype=float) * 1e3
    ok = np.asarray(valid, dtype=bool)
    x = np.arange(1, len(times) + 1)
    best = np.minimum.accumulate(np.where(ok, times, np.inf)) if len(times) else times
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.scatter(x[ok], times[ok], s=6, alpha=0.4, label="sampled placement")
    top = float(times[ok].max()) if ok.any() else float(times.max(initial=np.nan))
    if (~ok).any():
        ax.scatter(x[~ok], np.full((~ok).sum(), top), s=12, marker="x", color="0.5", label="invalid (OOM or slow)")
    ax.step(x[np.isfinite(best)], best[np.isfinite(best)], where="post", color="C3", label="best so far")
    curves = [r for r in references if r.get("curve")]
    colours = [c for c in range(10) if c not in (0, 3)][:len(curves)]
    for r, colour in zip(curves, colours):
        cx, cy = curve_xy(r["curve"])
        ax.step(cx, cy * 1e3, where="post", color=f"C{colour}", linewidth=1.5, label=_reference_label(r))
    _reference_lines(ax, [r for r in references if not r.get("curve")], 1.02 * top if np.isfinite(top) else np.inf,
                     taken=(0, 3, *colours))
    if lower_bound is not None:
        ax.axhline(lower_bound * 1e3, color="k", linestyle="dashed", linewidth=1, label="lower bound")
    ax.set_xlabel("placements evaluated")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title or "Training curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_training_curve(step_times: Sequence[float], valid: Sequence[bool], path: str | Path, title: str = "",
                        references: Sequence[dict] = (), lower_bound: float | None = None) -> None:
    """Write the chart of ``training_curve_figure`` to ``path``."""
    fig = training_curve_figure(step_times, valid, title, references, lower_bound)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _reference_label(record: dict) -> str:
    """A reference's legend entry: its placer, OOM if so, and its step time."""
    return f"{record['placer']}{' (OOM)' if record['oom'] else ''}: {record['step_time'] * 1e3:.4g} ms"


def _reference_lines(ax, records: Sequence[dict], top: float, taken: Sequence[int] = ()) -> None:
    """A horizontal line per record at its step time, labelled with it, in the colours (C0-C9)
    not ``taken``, dotted, then dash-dotted once the colours are used up; a record above
    ``top`` (ms) is only listed in the legend."""
    free = [c for c in range(10) if c not in taken] or list(range(10))
    for k, r in enumerate(records):
        ms, label = r["step_time"] * 1e3, _reference_label(r)
        if ms <= top:
            ax.axhline(ms, color=f"C{free[k % len(free)]}", linewidth=1.2, alpha=0.8,
                       linestyle=("dotted", "dashdot")[k // len(free) % 2], label=label)
        else:
            ax.plot([], [], " ", label=label + " (off the axis)")


def curve_xy(curve: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(placements evaluated, best step time) of a curve given as one best step time per
    evaluation, or as ``[placements evaluated, best step time]`` points (a step plot's corners);
    points with no valid placement yet (infinite) are left out."""
    a = np.asarray(curve, dtype=float)
    x, y = (a[:, 0], a[:, 1]) if a.ndim == 2 else (np.arange(1, len(a) + 1, dtype=float), a)
    keep = np.isfinite(y)
    return x[keep], y[keep]


def draw_curves(ax, records: Sequence[dict], lower_bound: float) -> None:
    """Onto ``ax``: best step time against placements evaluated for every record with a
    ``curve`` (``curve_xy``: search placers, learned placers), the other records' step times as
    horizontal lines, and the lower bound as a dashed line. The step-time axis ends a little
    above the slowest curve's start, so placers far slower than every curve are listed (with
    their step times) but not drawn."""
    curves = [(r, *curve_xy(r["curve"])) for r in records if r.get("curve")]
    curves = [(r, x, y * 1e3) for r, x, y in curves if len(y)]
    top = 1.15 * max(float(y[0]) for _, _, y in curves) if curves else np.inf
    for k, (r, x, y) in enumerate(curves):
        ax.step(x, y, where="post", color=f"C{k % 10}", linewidth=2, label=r["placer"])
    _reference_lines(ax, [r for r in records if not r.get("curve")], top, taken=range(len(curves)))
    ax.axhline(lower_bound * 1e3, color="k", linestyle="dashed", linewidth=1, label="lower bound")
    if curves:
        ax.set_ylim(0.97 * lower_bound * 1e3, top)
    ax.set_xscale("log")
    ax.set_xlabel("placements evaluated")
    ax.set_ylabel("step time (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def plot_curves(records: Sequence[dict], lower_bound: float, path: str | Path, title: str = "") -> None:
    """Write the chart of ``draw_curves`` to ``path``."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    draw_curves(ax, records, lower_bound)
    ax.set_title(title or "Best step time against placements evaluated")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
