"""Bad config values and names in the four apps (issue 17): one line on stderr naming the key,
exit status 2, and nothing written but what Hydra writes before the task starts."""

import gzip
import json
import logging
import sys
from importlib import import_module

import pytest
from hydra import compose, initialize_config_module

from rlplace.apps.compare import compare
from rlplace.errors import PlacementError
from rlplace.placers import _REGISTRY
from rlplace.zoo import chain

HYDRA_FILES = {".hydra"}  # Hydra's own, before the task; the run's log files aside
RESULT_FILES = {"results.json", "best_placement.json", "metrics.csv", "checkpoint.pt", "profile.json"}


class Finished:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run(monkeypatch, capsys):
    """Run an app's console entry point in this process, as ``rlplace-<app> *args``."""
    # Hydra's logging setup closes every logging handler; absl's (there once TensorFlow is
    # imported) then closes its stream, which may be pytest's captured stderr of an earlier test.
    root = logging.getLogger()  # and sets up the root logger, for this test only
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    absl_logging = sys.modules.get("absl.logging")
    if absl_logging is not None:
        monkeypatch.setattr(absl_logging.get_absl_handler().python_handler, "stream", sys.__stderr__)

    def run_app(app, *args):
        monkeypatch.setattr(sys, "argv", [f"rlplace-{app}", *args])
        try:
            import_module(f"rlplace.apps.{app}").main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return Finished(code, out, err)
    return run_app


def assert_one_line_exit_2(proc, prog, needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def assert_no_results(run_dir):
    written = {p.name for p in run_dir.iterdir()} if run_dir.exists() else set()
    assert not written & RESULT_FILES, written


BAD_VALUES = [
    ("compare", ["placers=[]"], ["placers", "non-empty list", "single"]),
    ("compare", ["placers=[single,1]"], ["placers"]),
    ("compare", ["graph.compute_mean=-1"], ["compute_mean", ">= 0", "-1"]),
    ("compare", ["seed=abc"], ["seed", "integer >= 0", "abc"]),
    ("compare", ["cluster=bogus"], ["cluster=bogus", "baechi_2080", "local_cpu"]),
    ("compare", ["plotz=false"], ["plotz", "no such key", "plots", "+plotz=false"]),
    ("compare", ["graph.num_opz=3"], ["graph.num_opz", "num_ops"]),
    ("compare", ["graph=nonexistent"], ["graph=nonexistent", "layered"]),
    ("train", ["budget.placements=-5"], ["budget.placements", "integer >= 1", "-5"]),
    ("train", ["budget.placements=0"], ["budget.placements", "integer >= 1"]),
    ("train", ["budget.seconds=-1"], ["budget.seconds", "> 0"]),
    ("train", ["budget.seconds=abc"], ["budget.seconds", "'abc'"]),
    ("train", ["torch_threads=-1"], ["torch_threads", "integer >= 1"]),
    ("train", ["agent=bogus"], ["agent=bogus", "hierarchical", "mars"]),
    ("reproduce", ["table=baechi_table3", "mode=smoke", "budget=-5"], ["budget", "integer >= 1"]),
    ("reproduce", ["table=baechi_table3", "mode=smoke", "seed=abc"], ["seed", "'abc'"]),
    ("profile", ["model.batch_size=-1"], ["model.batch_size", "integer >= 1", "-1"]),
    ("profile", ["model=resnet"], ["model=resnet", "gnmt"]),
    # a group given a number (Hydra: a ValueError and a traceback) or a group of keys given one value
    ("compare", ["cluster=3"], ["cluster=3", "config group", "mars_p100"]),
    ("compare", ["placers=[m_sct]", "+placer_options={m_sct:3}"], ["placer_options.m_sct", "options by name", "got 3"]),
    ("train", ["agent=2"], ["agent=2", "config group", "hierarchical, learned, mars"]),
    ("compare", ["placers=[single"], ["cannot read the override 'placers=[single'", "balanced"]),
    ("compare", ["gräph.num_ops=3"], ["cannot read the override 'gräph.num_ops=3'", "ASCII"]),
    ("train", ["budget=2"], ["budget: a group of keys (budget.placements, budget.seconds)", "budget.placements=2"]),
    ("train", ["warm_start=3"], ["warm_start: a group of keys (warm_start.placer,", "in all", "warm_start.placer=..."]),
]


@pytest.mark.parametrize("app,args,needles", BAD_VALUES, ids=[f"{a}:{' '.join(x)}" for a, x, _ in BAD_VALUES])
def test_bad_config_is_one_line_exit_2_and_writes_nothing(run, tmp_path, app, args, needles):
    extra = {"compare": ["graph.num_ops=30", "plots=false"], "train": ["graph.num_ops=30"]}.get(app, [])
    if any(a.startswith("graph=") for a in args):
        extra = ["plots=false"]
    proc = run(app, *extra, *args, f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, f"rlplace-{app}", needles)
    assert_no_results(tmp_path / "run")


def test_one_placer_name_is_a_list_of_one(run, tmp_path):
    proc = run("compare", "graph.num_ops=30", "plots=false", "placers=single", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 0, proc.stderr
    assert [r["placer"] for r in json.loads((tmp_path / "run" / "results.json").read_text())] == ["single"]


def test_a_gzip_bomb_is_refused_by_the_size_cap(run, tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 2_000_000 + b"{}"))
    proc = run("compare", "graph=file", f"graph.path={bomb}", "graph.max_bytes=1000000", "plots=false",
               f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, "rlplace-compare", ["bomb.json.gz", "more than 1000000 bytes", "graph.max_bytes"])
    assert_no_results(tmp_path / "run")


class Boom:
    def __init__(self, seed=None):
        pass

    def place(self, graph, cluster):
        raise RuntimeError("boom\nsecond line")


@pytest.fixture
def boom_placer(monkeypatch):
    monkeypatch.setitem(_REGISTRY, "boom", Boom)


def compare_config(*overrides):
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        return compose("compare", overrides=["graph=layered", "graph.num_ops=40", "plots=false", *overrides])


def test_a_placer_that_raises_is_reported_and_the_others_still_run(boom_placer, tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)  # compare's table and last line are log lines (compare.log)
    records = compare(compare_config("placers=[single,boom,round_robin]"), tmp_path)
    assert [r["placer"] for r in records] == ["single", "boom", "round_robin"]
    assert records[1]["error"] == "RuntimeError: boom" and "step_time" not in records[1]
    assert json.loads((tmp_path / "results.json").read_text()) == records
    out, err = caplog.text, capsys.readouterr().err
    table = out.splitlines()
    assert any(line.startswith("boom") and "failed" in line for line in table)
    assert "boom failed: RuntimeError: boom" in out and "placer boom failed: RuntimeError: boom" in err
    assert "best: single" in out or "best: round_robin" in out
    assert (tmp_path / "best_placement.json").is_file()


def test_when_every_placer_fails_the_errors_are_kept_and_it_is_an_error(boom_placer, tmp_path):
    with pytest.raises(PlacementError, match="every placer failed"):
        compare(compare_config("placers=[boom]"), tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())[0]["error"] == "RuntimeError: boom"
    assert not (tmp_path / "best_placement.json").exists()


def test_graph_file_errors_in_compare_name_the_file_and_the_op(run, tmp_path):
    path = tmp_path / "huge.json.gz"
    chain(3).save(path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["ops"][1]["persistent_bytes"] = 10**30
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    proc = run("compare", "graph=file", f"graph.path={path}", "plots=false", f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, "rlplace-compare", ["huge.json.gz", "op 'op1'", "persistent_bytes"])


def test_a_value_error_that_is_not_hydras_composition_keeps_its_traceback():
    """Only Hydra's "group given a number" ValueError is bad input; another one is a bug."""
    from rlplace.apps.common import run_app

    def hydra_main():
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run_app(hydra_main, "rlplace-compare")


@pytest.mark.parametrize("where, needle", [("afile/x.json.gz", "a file is in the way"), (".", "is a directory")])
def test_a_profile_output_that_cannot_be_written_is_refused_before_profiling(run, tmp_path, where, needle):
    """(before: TensorFlow profiled the model, then graph.save raised FileNotFoundError)"""
    (tmp_path / "afile").write_text("")
    proc = run("profile", "model=linear_regression", f"output={tmp_path / where}", f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, "rlplace-profile", ["output=", needle])
    assert_no_results(tmp_path / "run")


def test_options_for_a_placer_not_run_are_a_warning_not_silence(run, tmp_path):
    proc = run("compare", "graph.num_ops=30", "plots=false", "placers=[single]", "+placer_options.loca_search.evaluations=5",
               f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 0, proc.stderr
    assert "placer_options.loca_search: loca_search is not among placers=['single']" in proc.stdout + proc.stderr


@pytest.mark.parametrize("args, needles", [
    (["placers=[single]", "+placer_options.single.device=99"], ["every placer failed", "single", "device 99"]),
    (["placers=[single,single]", "+placer_options.single.device=99"],
     ["every placer failed", "single", "device 99", "1 more"]),
])
def test_when_every_placer_fails_the_first_error_is_the_one_line(run, tmp_path, args, needles):
    proc = run("compare", "graph.num_ops=20", *args, f"hydra.run.dir={tmp_path}")
    assert_one_line_exit_2(proc, "rlplace-compare", needles)
    assert len(json.loads((tmp_path / "results.json").read_text())) == len(args[0].split(","))


def test_a_placer_option_may_set_the_seed_the_run_gives(run, tmp_path):
    proc = run("compare", "graph.num_ops=20", "placers=[random]", "+placer_options.random.seed=7",
               f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("where", ["file", "under_file", "proc"])
def test_a_run_directory_that_cannot_be_made_is_one_line(run, tmp_path, where):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    path = {"file": blocker, "under_file": blocker / "sub", "proc": "/proc/rlplace_run"}[where]
    proc = run("compare", "graph.num_ops=20", "placers=[single]", f"hydra.run.dir={path}")
    assert_one_line_exit_2(proc, "rlplace-compare", ["cannot make the run directory", str(path), "hydra.run.dir"])
    assert blocker.read_text() == "not a directory"


def test_a_run_where_nothing_fits_says_so(run, tmp_path):
    proc = run("compare", "graph.num_ops=30", "placers=[single,m_etf]", "cluster.memory_bytes=1000", "plots=false",
               f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "nothing fits: every placement runs out of memory on baechi_2080" in out and "best: " not in out
