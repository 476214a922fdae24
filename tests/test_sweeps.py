"""Hydra sweepers: every app returns its objective, so Optuna (``hydra/sweeper=optuna`` and the
presets in rlplace/conf/hydra/sweeper/) optimizes it; the sweep's optimization_results.yaml holds the best
of the objectives its trials wrote."""

import json
import math
import subprocess

import pytest
import yaml

from rlplace.apps import compare, reproduce, train

TINY_TABLE = ["table=baechi_table3", "mode=smoke", "plots=false",
              "table.smoke.models=[{key: g, label: tiny, family: gnmt, graph: layered, knobs: {num_ops: 40}}]"]


def compare_objective(results: list[dict]) -> float:
    return min(r["step_time"] for r in results if "error" not in r and not r["oom"])


def train_objective(results: dict) -> float:
    assert not results["final_evaluation"]["oom"]
    return results["final_evaluation"]["step_time"]


def reproduce_objective(results: dict) -> float:
    return sum(c["holds"] is True for c in results["claims"])


SWEEPS = {
    "compare": (["hydra/sweeper=tune_local_search", "hydra.sweeper.n_trials=3", "graph=layered", "graph.num_ops=40",
                 "+placer_options.local_search.evaluations=40", "+placer_options.local_search.start=round_robin",
                 "plots=false"],
                compare_objective, min, {"+placer_options.local_search.batch", "+placer_options.local_search.run_fraction"}),
    "train": (["hydra/sweeper=tune_ppo", "hydra.sweeper.n_trials=3", "agent=mars", "graph=layered", "graph.num_ops=30",
               "budget.placements=20", "agent.policy.dgi.iterations=5", "agent.policy.dgi.cache_dir=null",
               "agent.policy.placer_hidden=16", "agent.policy.encoder_hidden=8", "progress=false", "plots=false",
               "torch_threads=1"],
              train_objective, min, {"agent.algorithm.options.lr", "agent.algorithm.options.clip",
                                     "agent.algorithm.options.entropy_coef", "agent.algorithm.options.epochs"}),
    "reproduce": (["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.direction=maximize",
                   *TINY_TABLE, "table.placers=choice([single,m_topo,m_etf,m_sct],[single,expert,m_topo,m_etf,m_sct])"],
                  reproduce_objective, max, {"table.placers"}),
}


@pytest.mark.parametrize("app", SWEEPS)
def test_optuna_sweep_gets_each_trials_objective(app, rlplace_cli, tmp_path):
    args, objective, best, params = SWEEPS[app]
    sweep_dir = tmp_path / "multirun"
    run = subprocess.run([*rlplace_cli(app), "--multirun", *args, f"hydra.sweep.dir={sweep_dir}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())
    n_trials = int(next(a for a in args if a.startswith("hydra.sweeper.n_trials=")).partition("=")[2])
    assert len(trials) == n_trials
    values = [float(objective(json.loads((trial / "results.json").read_text()))) for trial in trials]
    assert all(math.isfinite(v) for v in values)
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert isinstance(results["best_value"], float) and results["best_value"] == pytest.approx(best(values))
    assert set(results["best_params"]) == params


def test_compare_objective_is_the_best_step_time_that_fits():
    records = [{"placer": "a", "error": "ValueError: boom"}, {"placer": "b", "step_time": 0.1, "oom": True},
               {"placer": "c", "step_time": 0.3, "oom": False}, {"placer": "d", "step_time": 0.2, "oom": False}]
    assert compare.best_step_time(records) == 0.2
    assert compare.best_step_time(records[:2]) == math.inf


def test_train_objective_is_the_final_evaluation_unless_it_does_not_fit():
    final = {"step_time": 0.2, "oom": False}
    assert train.best_step_time({"best_step_time": 0.25, "final_evaluation": final}) == 0.2
    assert train.best_step_time({"best_step_time": 0.25, "final_evaluation": {**final, "oom": True}}) == math.inf
    assert train.best_step_time({"best_step_time": 0.25, "stopped": True}) == 0.25  # stopped early: no final


def test_reproduce_objective_counts_the_claims_that_hold(tmp_path):
    claims = [{"id": "a", "holds": True}, {"id": "b", "holds": False}, {"id": "c", "holds": None},
              {"id": "d", "holds": True}]
    (tmp_path / "results.json").write_text(json.dumps({"claims": claims}))
    assert reproduce.claims_holding(tmp_path / "results.json") == 2.0
