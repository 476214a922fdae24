"""The trainer (checkpoint, resume, warm start, outputs) and the rlplace-train app."""

import csv
import json
import subprocess

import pytest
import torch

from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.loggers import make_logger
from rlplace.learn.train import TrainConfig, train
from rlplace.learn.warmstart import WarmStartConfig
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.errors import ConfigError
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS
from rlplace.sim import simulate
from rlplace.zoo import layered

torch.set_num_threads(1)
TINY = {"num_groups": 8, "placer_hidden": 16, "noise_steps": 3}


@pytest.fixture(scope="module")
def problem():
    return layered(30, seed=1), load_preset("baechi_2080")


def config(**overrides):
    return TrainConfig(**{"policy": TINY, "budget_placements": 40, "checkpoint_every": 4, "progress": False,
                          "plots": False, "seed": 3,
                          "algorithm_options": {"valid_only_after": 5}, **overrides})


@pytest.mark.parametrize("samples", [4, 1])
def test_resume_after_a_kill_gives_the_uninterrupted_result(problem, tmp_path, samples):
    graph, cluster = problem
    full = train(graph, cluster, SimBackend(), config(samples=samples), tmp_path / "full")
    updates = 40 // samples
    killed = train(graph, cluster, SimBackend(), config(samples=samples, stop_after_updates=updates // 2 + 1),
                   tmp_path / "cut")  # killed one update after the checkpoint at updates // 2 (even)
    assert killed["stopped"] and killed["updates"] == updates // 2 + 1
    assert not (tmp_path / "cut" / "results.json").exists()
    resumed = train(graph, cluster, SimBackend(), config(samples=samples, resume=True), tmp_path / "cut")
    for key in ("updates", "evaluated", "best_step_time", "greedy_evaluation", "final_evaluation"):
        assert resumed[key] == full[key], key
    a = read_checkpoint(tmp_path / "full" / "checkpoint.pt")
    b = read_checkpoint(tmp_path / "cut" / "checkpoint.pt")
    assert a.graph_progress()["step_times"] == b.graph_progress()["step_times"]
    assert a.algorithm["graphs"][0]["baseline"] == b.algorithm["graphs"][0]["baseline"]
    for key, value in a.policy.items():
        assert torch.equal(value, b.policy[key]), key


def test_outputs_warm_start_and_logger(problem, tmp_path):
    graph, cluster = problem
    warm = WarmStartConfig(placer="heft", behaviour_cloning=True, first_sample=True, bc_steps=5)
    result = train(graph, cluster, SimBackend(), config(warm_start=warm, plots=True), tmp_path,
                   lambda start_step: make_logger("csv", tmp_path, start_step))
    assert result["evaluated"] == 41 and result["updates"] == 10  # the heuristic counts as one
    assert result["best_step_time"] <= result["heuristic_step_time"]
    assert result["bc_steps"] >= 5 and 0 <= result["bc_accuracy"] <= 1
    best = Placement.load(tmp_path / "best_placement.json", graph, cluster)
    assert len(best) == graph.num_ops
    assert result["final_evaluation"]["step_time"] == pytest.approx(result["best_step_time"])
    assert json.loads((tmp_path / "results.json").read_text())["evaluated"] == 41
    assert (tmp_path / "training_curve.png").stat().st_size > 0
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert len(rows) == 10 and {"reward", "step_time", "best_step_time", "oom_rate", "entropy", "loss"} <= set(rows[0])
    # the greedy placement, evaluated at the end, competes with the best sample
    sampled, greedy = float(rows[-1]["best_step_time"]), result["greedy_evaluation"]
    greedy_time = float("inf") if greedy["oom"] else greedy["step_time"]
    assert result["best_step_time"] == pytest.approx(min(sampled, greedy_time))
    assert result["best_is_greedy"] == (greedy_time < sampled)
    assert (torch.tensor([1e-38]) * 1e-3).item() > 0  # subnormals are back once training is over


def test_training_curve_lines_are_the_algorithmic_placers_and_the_searches_computed_once(problem, tmp_path):
    graph, cluster = problem
    train(graph, cluster, SimBackend(), config(plots=True, budget_placements=8), tmp_path / "on")
    references = read_checkpoint(tmp_path / "on" / "checkpoint.pt").graph_progress()["references"]
    heuristics, searches = references[:-2], references[-2:]
    assert [r["placer"] for r in heuristics] == list(HEURISTICS)
    for r in heuristics:
        placement = make_placer(r["placer"], seed=3).place(graph, cluster)
        assert r["step_time"] == simulate(graph, cluster, placement).step_time, r["placer"]
    for name, search in zip(("local_search", "annealing"), searches):
        assert search["placer"].startswith(f"{name} from ") and search["placer"].endswith("(9 evaluations)")
        assert search["step_time"] <= min(r["step_time"] for r in heuristics if not r["oom"])
        assert len(search["curve"]) == 9 and search["curve"][-1] == search["step_time"]
    assert (tmp_path / "on" / "training_curve.png").is_file()
    train(graph, cluster, SimBackend(), config(budget_placements=8), tmp_path / "off")  # plots off: none
    assert read_checkpoint(tmp_path / "off" / "checkpoint.pt").graph_progress()["references"] == []


def test_subnormals_flush_only_inside_training():
    from rlplace.learn.train import flushed_subnormals

    subnormal = lambda: (torch.tensor([1e-38]) * 1e-3).item()  # noqa: E731
    assert subnormal() > 0
    with flushed_subnormals():
        assert subnormal() == 0
        with flushed_subnormals():
            pass
        assert subnormal() == 0  # an inner use restores the outer state, not the default
    assert subnormal() > 0


def test_fine_tuning_hook_copies_matching_weights(problem, tmp_path):
    graph, cluster = problem
    train(graph, cluster, SimBackend(), config(budget_placements=8), tmp_path / "a")
    other = layered(25, seed=2)
    result = train(other, cluster, SimBackend(),
                   config(budget_placements=8, init_checkpoint=str(tmp_path / "a" / "checkpoint.pt")), tmp_path / "b")
    assert result["init_tensors_copied"] > 0


def test_trainer_config_errors(problem, tmp_path):
    graph, cluster = problem
    with pytest.raises(ConfigError, match="budget"):
        config(budget_placements=None)
    with pytest.raises(ConfigError, match="no .*checkpoint"):
        train(graph, cluster, SimBackend(), config(resume=True), tmp_path)
    with pytest.raises(ConfigError, match="warm_start.placer"):
        train(graph, cluster, SimBackend(), config(warm_start=WarmStartConfig(first_sample=True)), tmp_path)
    with pytest.raises(ConfigError, match="unknown placer"):
        train(graph, cluster, SimBackend(), config(warm_start=WarmStartConfig(placer="nope")), tmp_path)


TINY_CLI = ["graph=layered", "graph.num_ops=30", "agent=hierarchical", "agent.policy.num_groups=8",
            "agent.policy.placer_hidden=16", "budget.placements=12", "checkpoint_every=2", "progress=false"]


def test_rlplace_train_end_to_end(rlplace_cli, tmp_path):
    run = subprocess.run([*rlplace_cli("train"), *TINY_CLI, f"hydra.run.dir={tmp_path}",
                          "warm_start.placer=heft", "warm_start.first_sample=true"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for name in ("checkpoint.pt", "best_placement.json", "results.json", "metrics.csv", "training_curve.png"):
        assert (tmp_path / name).is_file(), name
    assert "best step time" in run.stdout
    # a finished run resumed does nothing more
    again = subprocess.run([*rlplace_cli("train"), *TINY_CLI, f"hydra.run.dir={tmp_path}", "resume=true"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "results.json").read_text())["evaluated"] == 13


def logged_by(logger: str, run_dir) -> bytes:
    """The bytes the logger itself wrote: TensorBoard's event files (the metrics', the hparams'),
    wandb's offline run record."""
    pattern = {"tensorboard": "tensorboard/events.out.tfevents.*", "wandb": "wandb/offline-run-*/run-*.wandb"}[logger]
    files = sorted(run_dir.glob(pattern))
    assert files and (logger == "tensorboard" or len(files) == 1), [str(p.relative_to(run_dir)) for p in files]
    return b"".join(f.read_bytes() for f in files)


@pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
def test_rlplace_train_logs_to_its_logger_and_to_metrics_csv(rlplace_cli, tmp_path, logger):
    """Metrics at every update; at the end the training curve as an image, the final numbers and
    the reference lines (heuristics, searches, lower bound), and (wandb) the checkpoint and best
    placement as an artifact: read back from what the logger wrote."""
    run = subprocess.run([*rlplace_cli("train"), *TINY_CLI, f"logger={logger}", f"hydra.run.dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows] == [4, 8, 12]  # 3 updates of 4 samples
    written = logged_by(logger, tmp_path)
    assert b"best_step_time" in written
    if logger == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
        events.Reload()
        assert "figures/training_curve" in events.Tags()["images"]
        assert "summary/text_summary" in events.Tags()["tensors"]
        assert b"final/reference/m_etf" in written and b"final/lower_bound" in written
    else:
        files = next(tmp_path.glob("wandb/offline-run-*/files"))
        assert list(files.glob("media/images/figures/training_curve_*.png"))
        # an offline run keeps its summary and artifacts in its record (wandb sync uploads it)
        for key in (b"reference/m_etf", b"lower_bound", b"best_placement.json", b"checkpoint.pt"):
            assert key in written, key


def test_rlplace_train_mars_end_to_end(rlplace_cli, tmp_path):
    run = subprocess.run([*rlplace_cli("train"), "agent=mars", "graph=layered", "graph.num_ops=40",
                          "agent.policy.dgi.iterations=5", "agent.policy.dgi.cache_dir=null",
                          "agent.policy.placer_hidden=16", "agent.policy.encoder_hidden=8",
                          "budget.placements=20", f"hydra.run.dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["evaluated"] == 20 and (tmp_path / "best_placement.json").is_file()

    # the trained policy as a placer of rlplace-compare: its greedy placement, as the trainer evaluated it
    checkpoint = tmp_path / "checkpoint.pt"
    compare = subprocess.run([*rlplace_cli("compare"), "graph=layered", "graph.num_ops=40", "plots=false",
                              f"placers=[single,mars:{checkpoint}]", f"hydra.run.dir={tmp_path}/compare"],
                             capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0, compare.stderr
    records = json.loads((tmp_path / "compare" / "results.json").read_text())
    assert records[1]["placer"] == f"mars:{checkpoint}"
    assert records[1]["step_time"] == pytest.approx(results["greedy_evaluation"]["step_time"])
    for placer, message in ((f"hierarchical:{checkpoint}", "holds a 'mars' policy"),
                            (f"mars:{tmp_path}/missing.pt", "no such checkpoint file")):
        bad = subprocess.run([*rlplace_cli("compare"), "graph=layered", "graph.num_ops=40", f"placers=[{placer}]",
                              f"hydra.run.dir={tmp_path}/bad"], capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("override, message", [
    ("agent.policy.grouping=bogus", "grouping"),
    ("budget.placements=null", "budget"),
    ("warm_start.placer=nope", "unknown placer"),
    ("logger.name=nope", "unknown logger"),
    ("agent=nope", None),  # Hydra cannot compose the config
])
def test_rlplace_train_bad_input_is_one_line_and_exit_2(rlplace_cli, tmp_path, override, message):
    run = subprocess.run([*rlplace_cli("train"), *TINY_CLI, f"hydra.run.dir={tmp_path}", override],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    if message is not None:
        lines = [line for line in run.stderr.splitlines() if line.startswith("rlplace-train: error:")]
        assert len(lines) == 1 and message in lines[0]
        assert "Traceback" not in run.stderr
