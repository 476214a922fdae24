"""experiments/equal_evaluations.py on a tiny setting: every cell's learned and search numbers
come from runs with the same start and the same number of evaluations, the learned number is the
run's best among its first `budget` placements, a rerun with a larger budget continues the runs
and does only what is missing, and the table lists cells not run as such (slow: 24 tiny runs)."""

import json
import math
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO))

from experiments import equal_evaluations as E  # noqa: E402
from rlplace.learn.checkpoint import read_checkpoint  # noqa: E402

GRAPH = ["graph=layered", "graph.num_ops=24", "graph.seed=0", "cluster=mars_p100"]
AGENTS = {"hp": ["agent=hierarchical", "agent.policy.num_groups=4", "agent.policy.placer_hidden=16",
                 "agent.policy.grouper_hidden=8", "agent.policy.noise_steps=2", "warm_start.bc_steps=20"],
          "mars": ["agent=mars", "agent.policy.placer_hidden=16", "agent.policy.encoder_hidden=8",
                   "agent.policy.segment_size=4", "agent.policy.pretrain=false", "warm_start.bc_steps=20"]}
SEEDS = (0, 1, 2)


def plan(budgets, agents=("hp", "mars")):
    return E.Plan(graphs={"tiny": GRAPH}, agents={a: AGENTS[a] for a in agents}, seeds=SEEDS, budgets=budgets)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Budget 6 first, then 6 and 12: the second call continues each run to 12 placements
    (24 tiny training runs, ~40 s of CPU: the tests using it are slow)."""
    out = tmp_path_factory.mktemp("eqeval")
    first = json.loads(json.dumps(E.report(plan([6]), out, out / "work")))
    calls = []
    train = E.train_from_config
    E.train_from_config = lambda cfg, run_dir: calls.append(cfg.budget.placements) or train(cfg, run_dir)
    try:
        second = E.report(plan([6, 12]), out, out / "work")
    finally:
        E.train_from_config = train
    return out, first, second, calls


@pytest.mark.slow
def test_learned_and_search_start_alike_and_evaluate_as_many(recorded):
    out, _, summary, _ = recorded
    graph = summary["graphs"]["tiny"]
    assert len(summary["cells"]) == 4
    for key, seeds in summary["cells"].items():
        agent, start = key.split("/")[1:]
        assert sorted(seeds) == [str(s) for s in SEEDS]
        for seed, record in seeds.items():
            progress = read_checkpoint(out / "work" / "tiny" / f"{agent}_{start}" / f"seed{seed}" / "checkpoint.pt").graph_progress()
            assert record["evaluated"] == progress["evaluated"] >= 12
            if start == "warm":
                assert record["warm_start_placer"] in graph["heuristics"]
                assert record["first_step_time"] == pytest.approx(record["warm_start_step_time"])
            for budget in (6, 12):
                cell = record["budgets"][str(budget)]
                assert cell["learned_evaluations"] == cell["search_evaluations"] == budget
                assert cell["search_start_step_time"] == pytest.approx(record["first_step_time"])
                fits = [t for t, ok in zip(progress["step_times"][:budget], progress["valid"][:budget]) if ok]
                assert cell["learned"] == pytest.approx(min(fits, default=math.inf))
                assert cell["search"] <= cell["search_start_step_time"]
                assert cell["search_curve"][-1] == [budget, pytest.approx(cell["search"])]
                assert cell["code"] == E.code_version()  # the commit the run loaded (the tree is unchanged since)


@pytest.mark.slow
def test_a_rerun_continues_the_runs_and_keeps_what_was_recorded(recorded):
    _, first, second, calls = recorded
    assert calls == [12] * (len(SEEDS) * 4)  # budget 6 was cached; each run continued once
    for key, seeds in first["cells"].items():
        for seed, record in seeds.items():
            assert second["cells"][key][seed]["budgets"]["6"] == record["budgets"]["6"]


@pytest.mark.slow
def test_the_table_has_every_cell_with_median_and_spread(recorded):
    out, _, summary, _ = recorded
    rows = E.cell_rows(summary, ["tiny"], ["hp", "mars"], ["warm", "cold"], [6, 12, 24], SEEDS)
    assert len(rows) == 12
    for row in rows:
        assert ("learned" in row) == (row["budget"] != 24)
    md = (out / "equal_evaluations.md").read_text()
    table = [line for line in md.splitlines() if line.startswith(("| tiny | hp |", "| tiny | mars |"))]
    assert len(table) == 8
    rows = E.cell_rows(summary, ["tiny"], ["hp", "mars"], ["warm", "cold"], [6, 12], SEEDS)  # cold target at 12
    cold12 = next(r for r in rows if (r["agent"], r["start"], r["budget"]) == ("hp", "cold", 12))
    median = sorted(cold12["learned"])[1]
    assert f"{median * 1e3:.2f} [{min(cold12['learned']) * 1e3:.2f}–{max(cold12['learned']) * 1e3:.2f}]" in md
    assert cold12["verdict"] == ("met" if sorted(cold12["search"])[1] > median else "not met")
    assert (out / "equal_evaluations.png").stat().st_size > 0


@pytest.mark.slow
def test_cells_not_run_are_marked(recorded):
    out, _, summary, _ = recorded
    E.report(E.Plan(graphs={"tiny": GRAPH}, agents=AGENTS, seeds=SEEDS, budgets=[6, 12, 24]), out, out, run=False)
    md = (out / "equal_evaluations.md").read_text()
    assert sum("not run (time)" in line for line in md.splitlines()) == 4
    E.report(E.Plan(graphs={"tiny": GRAPH}, agents=AGENTS, seeds=(0, 1, 2, 3), budgets=[6, 12]), out, out, run=False)
    assert sum("(3 of 4 seeds)" in line for line in (out / "equal_evaluations.md").read_text().splitlines()) == 8


def test_verdicts_follow_the_targets():
    assert E.verdict("warm", 500, [0.97], [1.0]) == ("+3.0%", "met")
    assert E.verdict("warm", 500, [0.98], [1.0])[1] == "not met"
    assert E.verdict("cold", 500, [0.5], [1.0])[1] == "no target"
    assert E.verdict("cold", 2000, [0.99], [1.0])[1] == "met"
    assert E.verdict("cold", 2000, [1.0], [1.0])[1] == "not met"
    assert E.verdict("cold", 24, [0.5], [1.0], cold_budget=24)[1] == "met"


def test_a_killed_run_is_continued_from_its_checkpoint(tmp_path, monkeypatch):
    overrides = GRAPH + AGENTS["mars"] + ["torch_threads=1", "progress=false", "plots=false", "checkpoint_every=1"]
    run_dir = tmp_path / "run"
    train = E.train_from_config
    monkeypatch.setattr(E, "train_from_config", lambda cfg, d: train(
        E.compose_train(overrides + ["budget.placements=20", "stop_after_updates=1"]), d))
    with pytest.raises(FileNotFoundError):       # stopped after 1 update as if killed: no results.json
        E.train_to(run_dir, overrides, 20)
    stopped = read_checkpoint(run_dir / "checkpoint.pt").graph_progress()["step_times"]
    assert not (run_dir / "results.json").is_file() and 0 < len(stopped) < 20
    resumed = []
    monkeypatch.setattr(E, "train_from_config", lambda cfg, d: resumed.append(cfg.resume) or train(cfg, d))
    done = E.train_to(run_dir, overrides, 20)
    assert resumed == [True] and done["evaluated"] >= 20 and done["step_times"][:len(stopped)] == stopped


def test_the_code_version_is_dirty_for_code_not_for_recorded_results(tmp_path, monkeypatch):
    """A run started while another's results are merged is from clean code (before: ``+dirty``)."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "experiments" / "results" / "r.json").write_text("{}")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(E, "ROOT", tmp_path)
    clean = E.code_version()
    assert clean and "+dirty" not in clean
    (tmp_path / "experiments" / "results" / "r.json").write_text('{"merged": 1}')
    assert E.code_version() == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert E.code_version() == clean + "+dirty"
