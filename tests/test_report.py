"""The charts people look at: the memory chart keeps one readable size for any number of
placers and devices; the training curve shows the algorithmic placers and the lower bound."""

import numpy as np
import pytest
from matplotlib.image import imread

from rlplace.cluster import Cluster, CommModel, Device
from rlplace.report import GIB, memory_figure, plot_memory, training_curve_figure

PLACERS = ["single", "round_robin", "random", "expert", "metis", "heft", "m_topo", "m_etf", "m_sct",
           "order_place", "celeritas", "local_search", "annealing"]


def cluster(n, memory=8 * GIB):
    return Cluster(tuple(Device(f"gpu{i}", memory, 1.0) for i in range(n)), CommModel(1e-4, 1e-10, "parallel"))


def records(names, ndev, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for name in names:
        peak = (rng.uniform(0.1, 9.0, ndev) * GIB).astype(int).tolist()
        out.append({"placer": name, "peak_memory": peak, "oom": max(peak) > 8 * GIB})
    return out


@pytest.mark.parametrize("placers, ndev", [(2, 2), (11, 4), (13, 8), (40, 16)])
def test_memory_chart_has_one_size_whatever_the_placers_and_devices(tmp_path, placers, ndev):
    names = (PLACERS * 4)[:placers]
    names = [f"{n}{k // len(PLACERS) or ''}" for k, n in enumerate(names)]
    plot_memory(records(names, ndev), cluster(ndev), tmp_path / "memory.png")
    assert imread(tmp_path / "memory.png").shape[:2] == (720, 1080)


def test_memory_chart_rows_are_placers_sorted_by_largest_peak_with_the_limit_drawn():
    recs = records(PLACERS[:11], 4)
    fig = memory_figure(recs, cluster(4))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    by_peak = sorted(recs, key=lambda r: max(r["peak_memory"]))
    assert labels == [r["placer"] + (" (OOM)" if r["oom"] else "") for r in by_peak]
    assert any(r["oom"] for r in recs) and any(not r["oom"] for r in recs)
    limits = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert limits == [pytest.approx(8.0)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["gpu0", "gpu1", "gpu2", "gpu3", "device memory: 8 GiB"]


def test_training_curve_shows_the_references_and_the_lower_bound():
    times = [0.030, 0.025, 0.040, 0.022, 0.021]
    references = [{"placer": "m_etf", "step_time": 0.024, "oom": False},
                  {"placer": "single", "step_time": 0.100, "oom": False},
                  {"placer": "local_search from m_etf (5 evaluations)", "step_time": 0.020, "oom": False}]
    ax = training_curve_figure(times, [True] * 5, references=references, lower_bound=0.015).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"m_etf: 24 ms", "single: 100 ms (off the axis)", "local_search from m_etf (5 evaluations): 20 ms",
            "lower bound"} <= set(legend)
    levels = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines() if len(line.get_ydata())}
    assert levels["m_etf: 24 ms"] == pytest.approx(24.0) and levels["lower bound"] == pytest.approx(15.0)
    assert "single: 100 ms (off the axis)" not in levels


def test_training_curve_draws_a_reference_with_a_curve_as_a_step_line_on_the_placements_axis():
    times = [0.030, 0.025, 0.040, 0.022, 0.021]
    search = {"placer": "local_search from m_etf (4 evaluations)", "step_time": 0.019, "oom": False,
              "curve": [0.024, 0.024, 0.020, 0.019]}
    heuristics = [{"placer": f"h{k}", "step_time": 0.0221 + 1e-4 * k, "oom": False} for k in range(9)]
    ax = training_curve_figure(times, [True] * 5, references=[*heuristics, search]).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    drawn = lines["local_search from m_etf (4 evaluations): 19 ms"]
    assert list(drawn.get_xdata()) == [1, 2, 3, 4] and list(drawn.get_ydata()) == pytest.approx([24, 24, 20, 19])
    styles = {(line.get_color(), line.get_linestyle()) for label, line in lines.items() if label.startswith("h")}
    assert len(styles) == 9  # no two horizontal lines look alike, though the free colours are fewer
