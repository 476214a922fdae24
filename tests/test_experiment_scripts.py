"""The scripts under experiments/ take bad input as the apps do: one line naming it on stderr and
exit status 2 (``rlplace.errors.ArgumentParser``, ``run_script``), and each runs as
``python experiments/NAME.py`` from the repository root without PYTHONPATH."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from rlplace.errors import run_script
from rlplace.errors import ConfigError

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SCRIPTS = sorted(p.name for p in EXPERIMENTS.glob("*.py") if "ArgumentParser(" in p.read_text())


def test_every_script_with_arguments_uses_the_one_line_parser():
    for name in SCRIPTS:
        text = (EXPERIMENTS / name).read_text()
        assert "argparse" not in text, f"{name}: argparse prints its usage line before the error"
        assert "run_script(main)" in text, f"{name}: errors of its main would be tracebacks"


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_argument_is_one_line_and_exit_status_2(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(EXPERIMENTS / name), "--no-such-flag"])
    monkeypatch.setattr(sys, "path", [str(EXPERIMENTS), *sys.path])   # as ``python experiments/NAME.py`` has it
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(EXPERIMENTS / name), run_name="__main__")
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    assert len(err) == 1 and err[0].startswith(f"{name}: error: "), err
    assert "--no-such-flag" in err[0] or "arguments are required" in err[0], err   # argparse checks those first


@pytest.mark.parametrize("name", ["bench_sim.py", "bench_search.py"])
def test_scripts_importing_experiments_run_without_pythonpath(name, tmp_path):
    """They import ``experiments.*`` (before: ModuleNotFoundError unless PYTHONPATH=.)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(EXPERIMENTS / name), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_run_script_turns_an_rlplace_error_into_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["some_script.py"])

    def main():
        raise ConfigError("placer 'nope': not one of m_etf, m_sct")

    with pytest.raises(SystemExit) as exit_:
        run_script(main)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "some_script.py: error: placer 'nope': not one of m_etf, m_sct\n"


@pytest.mark.parametrize("result, status", [(None, 0), (0, 0), (1, 1)])
def test_run_script_exits_with_mains_status(result, status):
    with pytest.raises(SystemExit) as exit_:
        run_script(lambda: result)
    assert exit_.value.code == status


def test_run_script_leaves_other_errors_as_tracebacks():
    """A bug is not bad input: it keeps its traceback."""
    def main():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_script(main)


def test_record_make_run_passes_on_a_bad_override_and_writes_nothing(tmp_path, capfd, monkeypatch):
    """``record_make_run.py`` hands its arguments to rlplace-compare: a bad one is rlplace-compare's
    one line and exit status 2 (before: a CalledProcessError traceback), and nothing is written."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    from record_make_run import record
    out = tmp_path / "make_run.json"
    with pytest.raises(SystemExit) as exit_:
        record(["placers=[no_such_placer]"], out=out)
    assert exit_.value.code == 2 and not out.exists()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_placer" in err[0], err
    assert record(["--help"], out=out) is None and not out.exists()
