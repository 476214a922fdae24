"""No lost results: every run has its own directory, a run never overwrites another run's
results, and the run's log lines (errors included) are in <run dir>/<app>.log."""

import json
import subprocess
import sys

AT_A_FIXED_TIME = """
import datetime, sys
import hydra.core.utils

class Fixed(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2030, 1, 2, 3, 4, 5)

hydra.core.utils.datetime = Fixed  # the clock of Hydra's ${now:...}
sys.argv = ["rlplace-compare", *sys.argv[1:]]
from rlplace.apps.compare import main
main()
"""
COMPARE = ["graph=layered", "graph.num_ops=30", "plots=false"]
TRAIN = ["graph=layered", "graph.num_ops=30", "agent=hierarchical", "agent.policy.num_groups=8",
         "agent.policy.placer_hidden=16", "budget.placements=8", "progress=false", "plots=false", "torch_threads=1"]


def run(args, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def one_error_line(proc, prog: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
    return lines[0]


def test_compare_runs_in_the_same_second_keep_their_results_and_logs(tmp_path):
    for placers in ("[single]", "[round_robin]"):
        proc = run(["-c", AT_A_FIXED_TIME, *COMPARE, f"placers={placers}"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    run_dirs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/results.json"))
    assert len(run_dirs) == 2
    assert sorted(json.loads((d / "results.json").read_text())[0]["placer"] for d in run_dirs) == \
        ["round_robin", "single"]
    for d in run_dirs:
        log = (d / "compare.log").read_text()
        assert "step time (ms)" in log and "best: " in log and "graph layered30: 30 ops" in log

    # the same run directory again: refused, its results kept, the error in its log
    first = run_dirs[0]
    kept = (first / "results.json").read_bytes()
    proc = run(["-m", "rlplace.apps.compare", *COMPARE, "placers=[heft]", f"hydra.run.dir={first}"], cwd=tmp_path)
    line = one_error_line(proc, "rlplace-compare")
    assert f"{first / 'results.json'} exists" in line
    assert (first / "results.json").read_bytes() == kept
    assert line in (first / "compare.log").read_text()


def test_train_logs_and_never_starts_over_a_run(tmp_path):
    proc = run(["-m", "rlplace.apps.train", *TRAIN, f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "train.log").read_text()
    assert "rlplace-train: hierarchical on layered30" in log and "best step time" in log
    kept = {name: (tmp_path / name).read_bytes() for name in ("results.json", "checkpoint.pt", "metrics.csv")}

    proc = run(["-m", "rlplace.apps.train", *TRAIN, "seed=1", f"hydra.run.dir={tmp_path}"])
    line = one_error_line(proc, "rlplace-train")
    assert "exists" in line and "resume=true" in line
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert line in (tmp_path / "train.log").read_text()
