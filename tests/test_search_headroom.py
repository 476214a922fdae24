"""experiments/search_headroom.py: long searches from the warm start beside the equal-evaluation targets."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from experiments import search_headroom as H  # noqa: E402


def recorded(searches: dict[str, float]) -> dict:
    graph = {"best_heuristic": "m_etf", "lower_bound": 0.4, "communication_bound": 0.4}
    cell = {seed: {"budgets": {"500": {"search": t}}} for seed, t in searches.items()}
    return {"graphs": {"layered": graph}, "cells": {"layered/mars/warm": cell, "layered/hp/warm": cell,
                                                   "layered/hp/cold": {"0": {"budgets": {"500": {"search": 9.0}}}}}}


def test_the_warm_searches_are_one_per_seed_and_skip_cold_cells():
    assert sorted(H.warm_searches(recorded({"0": 0.5, "1": 0.6}), "layered", "500")) == [0.5, 0.6]
    assert H.warm_searches(recorded({"0": 0.5}), "layered", "2000") == []


@pytest.mark.slow
def test_the_searches_never_get_worse_and_the_table_shows_the_target(tmp_path):
    (tmp_path / "equal_evaluations.json").write_text(json.dumps(recorded({"0": 0.5, "1": 0.6, "2": 0.7})))
    H.main(["--graphs", "layered", "--seeds", "0", "--evaluations", "600", "--results", str(tmp_path),
            "--work", str(tmp_path)])
    runs = json.loads((tmp_path / "search_headroom.json").read_text())["runs"]["layered"]
    assert set(runs) == set(H.SEARCHERS)
    for run in runs.values():
        assert run["0"]["start"] == "m_etf"
        assert run["0"]["step_time"] <= run["0"]["start_step_time"]
        assert list(run["0"]["at"]) == ["500"]  # the reported points within the budget
        assert run["0"]["step_time"] <= run["0"]["at"]["500"] <= run["0"]["start_step_time"]
    md = (tmp_path / "search_headroom.md").read_text()
    assert f"| {0.97 * 0.6 * 1e3:.2f} | — |" in md  # 3% under the median search at 500; none at 2,000
    assert md.count("| layered |") == 2


@pytest.mark.parametrize("args, needle", [
    ([], "equal_evaluations.json: cannot read it (FileNotFoundError)"),
    (["--graphs", "gnmt9"], "--graphs 'gnmt9': not one of layered"),
    (["--graphs", "layered", "--searchers", "tabu"], "--searchers 'tabu': not one of local_search, annealing"),
    (["--graphs", "layered", "--seeds", "0,one"], "--seeds 'one': not a non-negative integer")])
def test_bad_input_is_one_line_and_exit_2_and_keeps_the_runs(tmp_path, capsys, args, needle):
    if args:
        (tmp_path / "equal_evaluations.json").write_text(json.dumps(recorded({"0": 0.5})))
    (tmp_path / "search_headroom.json").write_text('{"runs": {"layered": {}}}')
    with pytest.raises(SystemExit) as exit_:
        H.main([*args, "--results", str(tmp_path), "--work", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("search_headroom.py: error: ")
    assert needle in err
    assert (tmp_path / "search_headroom.json").read_text() == '{"runs": {"layered": {}}}'
