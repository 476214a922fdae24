"""The charts people look at: the memory chart keeps one readable size for any number of
placers and devices; the training curve shows the algorithmic placers and the lower bound."""

import numpy as np
import pytest
from matplotlib.image import imread

from rlplace.cluster import Cluster, CommModel, Device
from rlplace.report import GIB, memory_figure, plot_memory

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
