"""Search beside a learned run (issue 16): the local search starts where the run started and
evaluates as many placements; the curves plot has the learned and search curves, the heuristics
and the lower bound; rlplace-compare adds the search beside a trained policy; warm starts name
the heuristic they chose by its simulated step time."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.train import FIRST_PLACEMENT, TrainConfig, train
from rlplace.learn.warmstart import WarmStartConfig
from rlplace.apps.beside import LearnedRun, change_points, limits, search_beside
from rlplace.apps.compare import compare
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS
from rlplace.report import draw_curves
from rlplace.sim import simulate
from rlplace.zoo import fork_join, layered

torch.set_num_threads(1)
TINY = {"num_groups": 8, "placer_hidden": 16, "noise_steps": 3}


def tiny_run(graph, cluster, out_dir, **overrides):
    config = TrainConfig(**{"policy": TINY, "budget_placements": 12, "checkpoint_every": 1, "progress": False,
                            "plots": False, "seed": 3, **overrides})
    return train(graph, cluster, SimBackend(), config, out_dir)


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """A cold Hierarchical Planner run on a layered graph over 4 devices."""
    graph, cluster = layered(30, seed=1), load_preset("mars_p100")
    out = tmp_path_factory.mktemp("cold")
    return graph, cluster, out, tiny_run(graph, cluster, out)


def test_search_beside_starts_where_the_run_started_and_evaluates_as_many(cold):
    graph, cluster, out, summary = cold
    progress = read_checkpoint(out / "checkpoint.pt").graph_progress()
    run = LearnedRun.from_run_dir(out, graph, cluster, "hp", summary["evaluated"], summary["seconds"])
    first = simulate(graph, cluster, run.start)
    assert first.step_time == progress["step_times"][0]  # the run's first evaluated placement
    assert first.step_time != simulate(graph, cluster, make_placer("single").place(graph, cluster)).step_time
    evals, timed = search_beside(graph, cluster, run, seed=3, max_seconds=0.05)
    for record in (evals, timed):
        assert record["search"]["start_step_time"] == first.step_time
        assert record["curve"][0] == [1, first.step_time]
        assert record["step_time"] <= first.step_time and record["beside"] == "hp"
    assert evals["budget"] == "equal evaluations" and evals["search"]["evaluations"] == summary["evaluated"] == 12
    assert evals["curve"][-1][0] == 12
    assert timed["budget"] == "equal wall time" and timed["search"]["capped"] == (summary["seconds"] > 0.05)


def test_a_run_without_a_first_placement_is_searched_from_single(cold, tmp_path):
    graph, cluster, _, _ = cold
    run = LearnedRun.from_run_dir(tmp_path, graph, cluster, "old", 5, 1.0)
    assert "single" in run.start_name and set(np.asarray(run.start.device_of)) == {0}


def test_equal_wall_time_is_capped_and_the_curve_keeps_its_steps():
    run = LearnedRun("r", Placement(np.zeros(3, dtype=int)), "s", evaluations=7, seconds=1000.0)
    assert limits(run, "equal evaluations") == {"evaluations": 7, "seconds": None}
    assert limits(run, "equal wall time", 60.0) == {"evaluations": None, "seconds": 60.0}
    assert limits(run, "equal wall time", None)["seconds"] == 1000.0
    assert limits(LearnedRun("r", run.start, "s", 7, 2.5), "equal wall time", 60.0)["seconds"] == 2.5
    assert change_points([5.0, 5.0, 4.0, 4.0, 4.0, 3.0, 3.0]) == [[1, 5.0], [3, 4.0], [6, 3.0], [7, 3.0]]


def test_curves_plot_has_the_learned_and_search_curves_heuristics_and_lower_bound():
    records = [{"placer": "mars", "curve": [9.0e-3, 8.0e-3, 8.0e-3, 7.0e-3]},  # one value per evaluation
               {"placer": "local_search beside mars", "curve": [[1, 9.0e-3], [3, 6.0e-3], [4, 6.0e-3]]},
               {"placer": "m_etf", "step_time": 8.5e-3, "oom": False},
               {"placer": "single", "step_time": 9.5e-3, "oom": False}]
    fig, ax = plt.subplots()
    draw_curves(ax, records, lower_bound=5.0e-3)
    lines = {line.get_label(): line for line in ax.get_lines()}
    plt.close(fig)
    np.testing.assert_allclose(lines["mars"].get_ydata(), [9, 8, 8, 7])
    np.testing.assert_allclose(lines["local_search beside mars"].get_xdata(), [1, 3, 4])
    for label, ms in (("m_etf: 8.5 ms", 8.5), ("single: 9.5 ms", 9.5)):
        np.testing.assert_allclose(lines[label].get_ydata(), [ms, ms])
    bound = lines["lower bound"]
    assert bound.get_linestyle() == "--"
    np.testing.assert_allclose(bound.get_ydata(), [5.0, 5.0])


def test_best_warm_start_is_chosen_by_simulated_step_time_and_recorded(tmp_path):
    graph, cluster = fork_join(4, 3, compute_time=5e-3, output_bytes=1000), load_preset("mars_p100")
    steps = {h: simulate(graph, cluster, make_placer(h).place(graph, cluster)).step_time for h in HEURISTICS}
    fastest = min(steps, key=steps.get)
    assert fastest != HEURISTICS[0] and steps[fastest] < steps["single"]  # the choice is not the default
    summary = tiny_run(graph, cluster, tmp_path, warm_start=WarmStartConfig(placer="best", first_sample=True))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["warm_start_placer"] == summary["warm_start_placer"]
    assert steps[results["warm_start_placer"]] == steps[fastest]
    assert results["warm_start_step_time"] == pytest.approx(steps[fastest]) and results["warm_start_oom"] is False
    first = Placement.load(tmp_path / FIRST_PLACEMENT, graph, cluster)  # the heuristic was the first sample
    assert simulate(graph, cluster, first).step_time == pytest.approx(steps[fastest])


def test_compare_adds_the_search_beside_a_trained_policy(cold, tmp_path):
    graph, cluster, out, summary = cold
    graph_file = tmp_path / "g.json.gz"
    graph.save(graph_file)
    with initialize_config_module("rlplace.conf", version_base=None):
        cfg = compose("compare", overrides=["graph=file", f"graph.path={graph_file}", "cluster=mars_p100",
                                            f"placers=[single,hierarchical:{out / 'checkpoint.pt'}]",
                                            "beside_seconds=0.05"])
    records = {r["placer"]: r for r in compare(cfg, tmp_path)}
    policy = records[f"hierarchical:{out / 'checkpoint.pt'}"]
    assert len(policy["curve"]) == summary["evaluated"]  # its training curve
    evals = records[f"local_search beside hierarchical:{out / 'checkpoint.pt'} (equal evaluations)"]
    timed = records[f"local_search beside hierarchical:{out / 'checkpoint.pt'} (equal wall time)"]
    assert evals["search"]["evaluations"] == summary["evaluated"]
    first = read_checkpoint(out / "checkpoint.pt").graph_progress()["step_times"][0]
    assert evals["search"]["start_step_time"] == timed["search"]["start_step_time"] == first
    assert timed["search"]["max_seconds"] == 0.05
    assert (tmp_path / "curves.png").is_file()
