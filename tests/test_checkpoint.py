"""Checkpoints are read by one function that never runs code from the file, and every bad
checkpoint (planted pickle, truncated, empty, of another agent or graph) is one line and exit 2
in every app path, with the run's files left as they were."""

import logging
import os
import pickle
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from hypothesis import given, strategies as st

from rlplace.learn.checkpoint import read_checkpoint
from rlplace.learn.train import TrainConfig, train
from rlplace.apps.common import user_errors
from rlplace.backends import SimBackend
from rlplace.cluster import load_preset
from rlplace.errors import CheckpointError, RlplaceError
from rlplace.zoo import layered

torch.set_num_threads(1)
TINY = ["graph=layered", "graph.num_ops=30", "agent=hierarchical", "agent.policy.num_groups=8",
        "agent.policy.placer_hidden=16", "progress=false", "plots=false", "torch_threads=1"]
RESUMABLE = ["budget.placements=40", "checkpoint_every=2"]


class Payload:
    """A pickle that creates ``marker`` when unpickled, as a planted command would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("valid")
    config = TrainConfig(policy={"num_groups": 8, "placer_hidden": 16, "noise_steps": 3}, budget_placements=8,
                         checkpoint_every=1, progress=False, plots=False)
    train(layered(30, seed=1), load_preset("baechi_2080"), SimBackend(), config, out)
    return out / "checkpoint.pt"


def planted(valid: Path, path: Path, marker: Path) -> Path:
    """``valid`` with a payload beside its fields, saved to ``path``."""
    state = torch.load(valid, weights_only=True)
    torch.save({**state, "progress": {**state["progress"], "note": Payload(marker)}}, path)
    return path


def corrupt(valid: Path, path: Path, kind: str, marker: Path) -> Path:
    if kind == "planted":
        return planted(valid, path, marker)
    data = valid.read_bytes()
    path.write_bytes(b"" if kind == "empty" else data[:len(data) // 2])
    return path


def test_the_planted_payload_is_real(tmp_path):
    """Unpickled as the old reader did (pickle, no allow-list), it runs."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def test_reader_refuses_a_planted_payload(valid, tmp_path):
    marker = tmp_path / "ran"
    path = planted(valid, tmp_path / "evil.pt", marker)
    with pytest.raises(CheckpointError, match=r"evil\.pt: refused: it names posix\.system") as info:
        read_checkpoint(path)
    assert not marker.exists()
    assert "\n" not in str(info.value)


def test_reader_reads_a_valid_checkpoint(valid):
    checkpoint = read_checkpoint(valid)
    assert checkpoint.agent == "hierarchical" and checkpoint.progress["evaluated"] == 8
    assert checkpoint.problem == {"graph": "layered30", "ops": 30, "edges": 30, "devices": 4}
    assert all(isinstance(v, torch.Tensor) for v in checkpoint.policy.values())


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such checkpoint file"),
    (lambda p: p.mkdir(), "not a checkpoint file"),
    (lambda p: p.write_bytes(b""), "empty file"),
    (lambda p: p.write_text("not a checkpoint"), "not a readable checkpoint"),
    (lambda p: torch.save([1, 2], p), "holds a list"),
    (lambda p: torch.save({"agent": "mars"}, p), "'policy' is nothing"),
])
def test_reader_names_the_file_for_every_bad_file(tmp_path, make, message):
    path = tmp_path / "checkpoint.pt"
    make(path)
    with pytest.raises(CheckpointError, match=message) as info:
        read_checkpoint(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_reader_names_a_truncated_file(valid, tmp_path):
    path = corrupt(valid, tmp_path / "cut.pt", "truncated", tmp_path / "unused")
    with pytest.raises(CheckpointError, match=r"cut\.pt: not a readable checkpoint"):
        read_checkpoint(path)


corruptions = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1), st.binary(max_size=0)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
)


@given(st.lists(corruptions, min_size=1, max_size=3))
def test_fuzzed_checkpoints_give_only_rlplace_errors(valid, changes):
    data = bytearray(valid.read_bytes())
    for kind, where, junk in changes:
        at = int(where * len(data))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip":
            for i, byte in enumerate(junk):
                if at + i < len(data):
                    data[at + i] ^= byte or 0xFF
        else:
            data[at:at] = junk
    path = valid.parent / "fuzzed.pt"
    path.write_bytes(bytes(data))
    try:
        read_checkpoint(path)
    except RlplaceError:
        pass


# ------------------------------------------------------------------------- every app path
def app(name, *args):
    return subprocess.run([sys.executable, "-m", f"rlplace.apps.{name}", *args], capture_output=True, text=True,
                          timeout=300)


def one_error_line(run, prog: str) -> str:
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), run.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """An rlplace-train run stopped after 3 updates (metrics.csv: 3 rows) with a checkpoint
    after 2 (a resume drops the third row and logs it again)."""
    out = tmp_path_factory.mktemp("run")
    run = app("train", *TINY, *RESUMABLE, "stop_after_updates=3", f"hydra.run.dir={out}")
    assert run.returncode == 0, run.stderr
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 3
    return out


def bad_checkpoint_run(valid: Path, tmp_path: Path, kind: str, path: str):
    """(app, overrides, run directory, bad file, marker) for a bad checkpoint given to ``path``."""
    marker, run_dir = tmp_path / "ran", tmp_path / "run"
    run_dir.mkdir()
    bad = corrupt(valid, run_dir / "checkpoint.pt" if path == "resume" else tmp_path / "bad.pt", kind, marker)
    if path == "compare":
        return "compare", ["graph=layered", "graph.num_ops=30", f"placers=[hierarchical:{bad}]"], run_dir, bad, marker
    extra = "resume=true" if path == "resume" else f"init_checkpoint={bad}"
    return "train", [*TINY, "budget.placements=8", extra], run_dir, bad, marker


@pytest.mark.parametrize("path", ["resume", "init_checkpoint", "compare"])
def test_every_app_refuses_a_planted_checkpoint(valid, tmp_path, path):
    name, overrides, run_dir, bad, marker = bad_checkpoint_run(valid, tmp_path, "planted", path)
    line = one_error_line(app(name, *overrides, f"hydra.run.dir={run_dir}"), f"rlplace-{name}")
    assert f"{bad}: refused: it names posix.system" in line
    assert not marker.exists()
    assert not (run_dir / "metrics.csv").exists() and not (run_dir / "results.json").exists()


@pytest.mark.parametrize("kind, message", [("truncated", "not a readable checkpoint"), ("empty", "empty file")])
@pytest.mark.parametrize("path", ["resume", "init_checkpoint", "compare"])
def test_every_app_path_names_a_truncated_or_empty_checkpoint(valid, tmp_path, caplog, kind, message, path):
    """In process (the subprocess runs above show the task's errors reach the console)."""
    name, overrides, run_dir, bad, _ = bad_checkpoint_run(valid, tmp_path, kind, path)
    module = import_module(f"rlplace.apps.{name}")
    with initialize_config_module("rlplace.conf", version_base=None):
        cfg = compose(name, overrides=overrides)
    with pytest.raises(SystemExit) as exit, caplog.at_level(logging.ERROR):
        with user_errors(module.PROG):
            (module.compare if name == "compare" else module.train_from_config)(cfg, run_dir)
    assert exit.value.code == 2
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith(f"rlplace-{name}: error: {bad}: {message}") and "\n" not in line
    assert not (run_dir / "metrics.csv").exists() and not (run_dir / "results.json").exists()


def run_files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and not p.name.endswith(".log")}


MARS = ["graph=layered", "graph.num_ops=30", "agent=mars", "agent.policy.dgi.iterations=2",
        "agent.policy.dgi.cache_dir=null", "agent.policy.placer_hidden=16", "agent.policy.encoder_hidden=8",
        "progress=false", "plots=false", "torch_threads=1"]


@pytest.mark.parametrize("args, message", [
    (MARS, "holds a 'hierarchical' policy, not 'mars'"),
    ([*TINY, "graph.num_ops=40"], "saved for graph 'layered30' (30 ops"),
    ([*TINY, "agent.policy.num_groups=6"], "a hierarchical policy with other options"),
])
def test_resume_with_another_runs_checkpoint_leaves_the_run_as_it_was(stopped_run, tmp_path, args, message):
    run_dir = tmp_path / "run"
    shutil.copytree(stopped_run, run_dir)
    before = run_files(run_dir)
    run = app("train", *args, *RESUMABLE, "resume=true", f"hydra.run.dir={run_dir}")
    line = one_error_line(run, "rlplace-train")
    assert str(run_dir / "checkpoint.pt") in line and message in line
    assert run_files(run_dir) == before  # metrics.csv keeps its 3 rows


def tampered(valid: Path, path: Path, change) -> Path:
    """``valid`` loaded, changed in place by ``change(state)``, saved to ``path``: still a valid
    torch file that ``weights_only`` reads, with the wrong contents."""
    state = torch.load(valid, weights_only=True)
    change(state)
    torch.save(state, path)
    return path


def _graph(state):
    return next(iter(state["progress"]["graphs"].values()))


def _first_moments(state):
    return next(iter(state["algorithm"]["graphs"][0]["optimizer"]["state"].values()))


TAMPERINGS = {
    "step times a string": (lambda s: _graph(s).update(step_times="fast"), "step_times is 'fast', not a list"),
    "a missing count": (lambda s: _graph(s).pop("evaluated"), "evaluated is missing"),
    "a string for a number": (lambda s: s["progress"].update(elapsed="12"), "progress.elapsed is '12'"),
    "NaN in a step time": (lambda s: _graph(s)["step_times"].__setitem__(0, float("nan")), "step_times is"),
    "flags and times apart": (lambda s: _graph(s)["valid"].pop(), "validity flags"),
    "NaN weights": (lambda s: next(v for v in s["policy"].values() if v.is_floating_point()).fill_(float("nan")),
                    "holds a NaN"),
    "infinite Adam moment": (lambda s: _first_moments(s)["exp_avg"].fill_(float("inf")), "holds a NaN or an inf"),
    "Adam without its step": (lambda s: _first_moments(s).pop("step"), "with their step"),
    "a baseline of the wrong type": (lambda s: s["algorithm"]["graphs"][0].update(baseline="x"), "baseline is 'x'"),
    "an unknown progress field": (lambda s: s["progress"].update(seconds=3.0), "unexpected field 'seconds'"),
}


@pytest.mark.parametrize("name", TAMPERINGS)
def test_a_tampered_checkpoint_is_one_line_naming_the_field(valid, tmp_path, name):
    change, message = TAMPERINGS[name]
    path = tampered(valid, tmp_path / "checkpoint.pt", change)
    with pytest.raises(CheckpointError, match=message) as info:
        read_checkpoint(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_adam_moment_of_another_shape_is_refused_on_resume(valid, tmp_path):
    """Shapes are known only once the policy is built: the resumed run refuses it, before training."""
    tampered(valid, tmp_path / "checkpoint.pt", lambda s: _first_moments(s).update(exp_avg=torch.zeros(3, 1)))
    config = TrainConfig(policy={"num_groups": 8, "placer_hidden": 16, "noise_steps": 3}, budget_placements=16,
                         checkpoint_every=1, progress=False, plots=False, resume=True)
    with pytest.raises(CheckpointError, match=r"optimizer state exp_avg of parameter 0 .* is \(3, 1\)"):
        train(layered(30, seed=1), load_preset("baechi_2080"), SimBackend(), config, tmp_path)
