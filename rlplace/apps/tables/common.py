"""What the paper tables share: the graphs of a table config (zoo models with analytical costs
for the paper's GPU, the real GNMT profile, synthetic graphs), the cluster, running placers
(``run_placer``: every placement is judged by the simulator), progress bars, and the outputs of
a run (markdown beside the paper's numbers, ``results.json``, bar charts)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rlplace.apps.beside import MAX_SECONDS  # noqa: E402
from rlplace.cluster import Cluster  # noqa: E402
from rlplace.costs import with_analytical_costs  # noqa: E402
from rlplace.datafile import load_yaml_data  # noqa: E402
from rlplace.errors import ConfigError  # noqa: E402
from rlplace.graph import OpGraph  # noqa: E402
from rlplace.placers import make_placer  # noqa: E402
from rlplace.placers.run import run_placer as placer_run  # noqa: E402
from rlplace.presets import load_preset  # noqa: E402
from rlplace.progress import progress_bar  # noqa: E402
from rlplace.zoo import cache_dir, zoo_graph  # noqa: E402,F401  (the tables' and experiments' import)
from rlplace.zoo import layered, linear_regression  # noqa: E402
from rlplace.apps.tables.claims import Verdict  # noqa: E402

GIB = 2**30
T = TypeVar("T")

# The graph optimizer switched off / on, per placer that has one (Baechi §3, Celeritas §5.1).
OPTIMIZER_OFF = {
    "m_topo": {"coplacement": False, "fusion": False, "forward_only": False},
    "m_etf": {"coplacement": False, "fusion": False, "forward_only": False},
    "m_sct": {"coplacement": False, "fusion": False, "forward_only": False},
    "order_place": {"fusion": False},
    "celeritas": {"fusion": False},
}
OPTIMIZER_ON = {name: {key: True for key in options} for name, options in OPTIMIZER_OFF.items()}


def progress(items: Iterable[T], desc: str, unit: str) -> Iterable[T]:
    """A bar on stderr over one table row (or the table's graphs), gone when the row is done; in a
    log, a line every few seconds (``rlplace.progress``)."""
    return progress_bar(items, desc=desc, unit=unit, leave=False)


@dataclass
class Context:
    """What a table function gets besides its config."""

    mode: str                  # "full" or "smoke"
    seed: int
    out_dir: Path
    budget: int | None = None  # learned tables: evaluated placements per training run
    budget_seconds: float | None = None  # ... and seconds of training per run, whichever ends first
    plots: bool = True
    beside_seconds: float | None = MAX_SECONDS  # the search beside a learned run: equal wall time capped at this


@dataclass
class Setting:
    """One graph of a table (a row or column of the paper's table)."""

    key: str
    label: str
    graph: OpGraph
    source: str                # cost source, as stated above the table
    spec: Mapping[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ graphs
def build_setting(spec: Mapping[str, Any], device: str | None) -> Setting:
    """A table config's graph entry: ``model`` + ``knobs`` (zoo, analytical costs for
    ``device``), ``profile: baechi_gnmt`` (the Baechi authors' GTX 2080 profile) or ``graph``
    + ``knobs`` (a ``rlplace/conf/graph`` preset)."""
    key, label = spec["key"], spec.get("label", spec["key"])
    knobs = dict(spec.get("knobs", {}))
    if "model" in spec:
        if device is None:
            raise ConfigError(f"table.models.{key}: a zoo model needs table.cost.device")
        graph = with_analytical_costs(zoo_graph(spec["model"], knobs), device)
        source = f"analytical (roofline, {device})"
    elif spec.get("profile") == "baechi_gnmt":
        from rlplace.zoo import load_baechi_profile

        graph, source = load_baechi_profile(), "profiled (Baechi authors' GNMT, GTX 2080)"
    elif "graph" in spec:
        graph, source = load_preset("graph", spec["graph"], **knobs), f"synthetic ({spec['graph']})"
    else:
        raise ConfigError(f"table.models.{key}: give model, profile or graph")
    return Setting(key, label, graph, source, spec)


def settings(table: Mapping[str, Any]) -> list[Setting]:
    device = table.get("cost", {}).get("device")
    return [build_setting(spec, device) for spec in progress(table["models"], f"{table['name']}: graphs", "graph")]


def cluster_name(table: Mapping[str, Any], setting: Setting | None = None) -> str:
    """The setting's own cluster preset, else the table's."""
    return (setting.spec.get("cluster") if setting is not None else None) or table["cluster"]


def cluster_of(table: Mapping[str, Any], memory_fraction: float | None = None,
               setting: Setting | None = None) -> Cluster:
    """The cluster preset with the table's ``cluster_options`` (e.g. ``memory_model``)."""
    cluster = load_preset("cluster", cluster_name(table, setting), **(table.get("cluster_options") or {}))
    if memory_fraction is not None:
        cluster = cluster.with_memory((cluster.memory * memory_fraction).astype(np.int64))
    return cluster


# The papers' placers as the papers define them: the fallback to the whole graph on one device
# (``single_fallback``, rlplace.placers.fit) and Baechi's co-placement sets bounded by a device's
# memory (``bounded_sets``, rlplace.placers.baechi.optimizer) are rlplace's, so the tables turn
# them off and show where the papers' algorithms lose to one device or run out of memory.
PAPER_ALGORITHM = {"m_topo": {"bounded_sets": False},
                   **{name: {"single_fallback": False, "bounded_sets": False} for name in ("m_etf", "m_sct")},
                   **{name: {"single_fallback": False} for name in ("heft", "order_place", "celeritas")}}


def placer_options(setting: Setting, table: Mapping[str, Any], placer: str) -> dict:
    """Options of ``placer`` for this setting: the paper's algorithm, the table's, then the setting's."""
    return {**PAPER_ALGORITHM.get(placer, {}), **table.get("placer_options", {}).get(placer, {}),
            **setting.spec.get("placer_options", {}).get(placer, {})}


_WARMED: set[str] = set()


def warm_up(name: str, cluster: Cluster, options: dict | None = None) -> None:
    """Place two small graphs with placer ``name`` first, once per options in a process, so that
    a timed placement does not include numba compiling its functions (after a code change the
    first m-SCT placement with the graph optimizer took 3-4 s, then 0.15 s): a layered DAG and
    linear regression, whose forward ops and colocation groups take the optimizer's paths."""
    key = repr((name, sorted((options or {}).items())))
    if key not in _WARMED:
        for small in (layered(200, seed=1), linear_regression()):
            make_placer(name, seed=0, **(options or {})).place(small, cluster)
        _WARMED.add(key)


def run_placer(name: str, graph: OpGraph, cluster: Cluster, options: dict | None = None) -> dict:
    """Place ``graph`` with placer ``name`` (seed 0), time the placement (after ``warm_up``) and
    simulate it: one record."""
    warm_up(name, cluster, options)
    run = placer_run(name, make_placer(name, seed=0, **(options or {})), graph, cluster)
    return {**run.record(graph), "options": options or {}, "graph": graph.name, "ops": graph.num_ops}


def run_placers(setting: Setting, cluster: Cluster, placers: Sequence[str], table: Mapping[str, Any],
                **extra) -> list[dict]:
    """Place ``setting.graph`` with each placer and simulate; one record per placer."""
    records = []
    for name in progress(placers, f"{table['name']}: {setting.label}", "placer"):
        record = run_placer(name, setting.graph, cluster, placer_options(setting, table, name) or None)
        records.append({"model": setting.key, **record, **extra})
    return records


# ------------------------------------------------------------------------------ output
@dataclass
class TableOutput:
    """A reproduced table: ``rows`` of strings under ``header`` (ours and the paper's), the
    raw ``records``, the claims' verdicts and the figures written."""

    name: str
    title: str
    setting: list[str]
    header: list[str]
    rows: list[list[str]]
    records: list[dict]
    verdicts: list[Verdict]
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"# {self.title}", "", *(f"- {s}" for s in self.setting), "",
                 "| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines += ["", *self.notes]
        lines += [""] + [f"![{f}]({f})" for f in self.figures]
        lines += ["", "## Claims", "", *(v.line() for v in self.verdicts)]
        return "\n".join(lines) + "\n"

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{self.name}.md").write_text(self.markdown())
        (out_dir / "results.json").write_text(json.dumps(
            {"table": self.name, "title": self.title, "setting": self.setting, "records": self.records,
             "claims": [v.as_dict() for v in self.verdicts]}, indent=1, default=json_default))


def update_why(out_dir: Path, name: str) -> str:
    """Rewrite a recorded table's claim lines with the notes of ``out_dir/why.yaml`` (claim id:
    why it does not hold here, as measured); the verdicts and numbers stay as recorded. Returns
    the new markdown."""
    results_path, md_path, why_path = out_dir / "results.json", out_dir / f"{name}.md", out_dir / "why.yaml"
    why = load_yaml_data(why_path, ConfigError, "why notes file") if why_path.is_file() else {}
    if not (isinstance(why, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in why.items())):
        raise ConfigError(f"{why_path}: not a mapping of claim ids to text")
    results = json.loads(results_path.read_text())
    found = [Verdict(**{**v, "why": why.get(v["id"], "")}) for v in results["claims"]]
    results["claims"] = [v.as_dict() for v in found]
    head = md_path.read_text().split("## Claims")[0]
    text = head + "## Claims\n\n" + "\n".join(v.line() for v in found) + "\n"
    md_path.write_text(text)
    results_path.write_text(json.dumps(results, indent=1))
    return text


def json_default(x):
    """``json.dumps``' default for numpy scalars and arrays."""
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x).__name__)


def setting_lines(table: Mapping[str, Any], settings_: Sequence[Setting], cluster: Cluster,
                  ctx: Context, extra: Sequence[str] = ()) -> list[str]:
    """The lines stated above a table: graphs and their sizes, cluster, cost source, backend."""
    mem = cluster.memory / GIB
    comm = cluster.comm
    lines = [f"mode: {ctx.mode}" + (" (tiny graphs: a smoke test, not the paper's sizes)" if ctx.mode == "smoke" else ""),
             f"cluster: `{table['cluster']}`: {cluster.num_devices} devices × {mem.min():.3g} GiB, "
             f"{comm.mode} transfers, {comm.latency * 1e6:.0f} µs + {comm.seconds_per_byte * 1e9:.3g} ns/B"
             + (f", memory model {cluster.memory_model}" if cluster.memory_model != "default" else ""),
             "backend: sim (rlplace's execution simulator; every placement judged by it)"]
    for s in settings_:
        knobs = ", ".join(f"{k}={v}" for k, v in s.spec.get("knobs", {}).items())
        what = s.spec.get("model") or s.spec.get("profile") or s.spec.get("graph")
        lines.append(f"{s.label}: `{what}`{f' ({knobs})' if knobs else ''}, {s.graph.num_ops:,} ops, "
                     f"{s.graph.num_edges:,} edges; costs {s.source}")
    for agent, options in (table.get("agent_overrides") or {}).items():
        lines.append(f"agent overrides ({agent}): " + ", ".join(f"{k}={v}" for k, v in _flat(options)))
    return lines + list(extra)


def _flat(options: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested options as dotted keys: {"policy": {"placer_hidden": 128}} -> [("policy.placer_hidden", 128)]."""
    items = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            items += _flat(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def paper_value(table: Mapping[str, Any], model: str, column: str) -> Any:
    return table.get("paper", {}).get(model, {}).get(column)


def cell(ours: str, paper: Any) -> str:
    """``ours (paper)``; the paper's value alone in parentheses when we have none."""
    if paper is None:
        return ours
    return f"{ours} ({paper})"


def fmt_step(record: Mapping | None) -> str:
    if record is None:
        return "—"
    return "OOM" if record.get("oom") else f"{record['step_time']:.4g}"


def plot_step_times(records: Sequence[Mapping], labels: Mapping[str, str], path: Path, title: str,
                    placers: Sequence[str] | None = None, value: str = "step_time",
                    ylabel: str = "step time (s)") -> None:
    """Bar chart: one panel per model, one bar per placer; OOM bars hatched and labelled."""
    models = list(dict.fromkeys(r["model"] for r in records))
    placers = list(placers or dict.fromkeys(r["placer"] for r in records))
    fig, axes = plt.subplots(1, len(models), figsize=(max(4, 2.2 + 0.45 * len(placers)) * len(models) ** 0.8, 3.8),
                             squeeze=False)
    for ax, m in zip(axes[0], models):
        rows = {r["placer"]: r for r in records if r["model"] == m}
        names = [p for p in placers if p in rows]
        vals = [rows[p][value] for p in names]
        bars = ax.bar(range(len(names)), vals, color=[f"C{placers.index(p) % 10}" for p in names])
        for b, p in zip(bars, names):
            if rows[p].get("oom"):
                b.set_hatch("//")
                b.set_edgecolor("red")
                ax.annotate("OOM", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                            va="bottom", fontsize=7, color="red")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.set_title(labels.get(m, m), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
