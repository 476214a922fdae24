"""rlplace installs as a normal wheel, and its core does not reach up (issue 40, item 1).

The other tests run against an editable install of the checkout, which cannot see a file the
wheel leaves out; here the wheel is built, installed without ``-e`` into a fresh virtual
environment (reusing this one's dependencies) and run from a folder outside the checkout."""

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

APPS = ["compare", "train", "profile", "reproduce", "calibrate"]
ABOVE_THE_CORE = ("rlplace.apps", "rlplace.learn", "rlplace.learn.env", "rlplace.calibration", "torch", "tensorflow")


@pytest.mark.parametrize("module", ["rlplace", "rlplace.cluster", "rlplace.sim", "rlplace.placers"])
def test_the_core_imports_nothing_above_it(module):
    code = (f"import sys, json, {module}\n"
            "from rlplace.cluster import load_preset\n"
            "load_preset('baechi_2080')\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(out.stdout)
    assert [m for m in loaded if m.startswith(ABOVE_THE_CORE)] == []


def make_wheel_env(where, dependencies: list[str]):
    """A virtual environment in ``where`` with the wheel of this checkout installed (not editable)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(where / "dist")], check=True, capture_output=True, cwd=where)
    wheel = next((where / "dist").glob("rlplace-*.whl"))
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # This environment's dependencies, but not its editable rlplace: a path in a .pth file is
    # put on sys.path without reading the .pth files inside it (the editable finder's).
    purelib = next(venv.glob("lib/python*/site-packages"))
    (purelib / "deps.pth").write_text("\n".join(dependencies) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True)
    return wheel, venv, where


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    return make_wheel_env(tmp_path_factory.mktemp("wheel"), site.getsitepackages())


# What ``pip install rlplace`` leaves out (pyproject.toml's extras): the top-level modules and Hydra
# plugins a core environment must not see.
EXTRAS = {"tensorflow", "keras", "tf_keras", "torch", "torch_geometric", "wandb", "tensorboard", "ray",
          "stable_baselines3", "sb3_contrib", "accelerate"}
EXTRA_PLUGINS = {"hydra_joblib_launcher", "hydra_optuna_sweeper", "hydra_submitit_launcher"}


@pytest.fixture(scope="module")
def core_env(tmp_path_factory):
    """The wheel over this environment's dependencies less the extras: a folder of links to every
    installed package but those, so that importing one fails as on a core install."""
    where = tmp_path_factory.mktemp("core")
    core_site = where / "core-site"
    (core_site / "hydra_plugins").mkdir(parents=True)
    for site_dir in map(Path, site.getsitepackages()):
        for entry in site_dir.iterdir():
            if entry.name not in EXTRAS | {"hydra_plugins"} and entry.suffix != ".pth":
                (core_site / entry.name).symlink_to(entry)
        for plugin in (site_dir / "hydra_plugins").iterdir():
            if plugin.name not in EXTRA_PLUGINS:
                (core_site / "hydra_plugins" / plugin.name).symlink_to(plugin)
    _, venv, where = make_wheel_env(where, [str(core_site)])
    return venv, where


def core_run(core_env, *command: str) -> subprocess.CompletedProcess:
    venv, where = core_env
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], capture_output=True, text=True,
                          cwd=where, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_the_core_install_compares_placers_and_runs_the_environment(core_env):
    venv, where = core_env
    hidden = core_run(core_env, "python", "-c", "import torch")
    assert hidden.returncode == 1 and "No module named 'torch'" in hidden.stderr  # the hook works
    proc = core_run(core_env, "rlplace-compare", "graph.num_ops=60", "placers=[single,m_etf,heft,learned,local_search]",
                    f"hydra.run.dir={where / 'run'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(json.loads((where / "run" / "results.json").read_text())) == 5
    env = core_run(core_env, "python", "-c",
                   "import gymnasium as gym\n"
                   "from gymnasium.utils.env_checker import check_env\n"
                   "env = gym.make('rlplace.learn.env:rlplace/Placement-v0', graph='layered', graph_options={'num_ops': 30})\n"
                   "check_env(env.unwrapped)\nprint('ok')")
    assert env.returncode == 0 and env.stdout.strip() == "ok", env.stderr[-2000:]


@pytest.mark.parametrize("command, extra", [
    (["rlplace-train", "graph.num_ops=30"], "learn"),
    (["rlplace-compare", "graph.num_ops=30", "placers=[mars:run/checkpoint.pt]"], "learn"),
    (["rlplace-compare", "graph=baechi_gnmt"], "tensorboard"),
    (["rlplace-compare", "graph=tf_model", "backend=tf"], "tf"),
    (["rlplace-compare", "graph=torch_model", "backend=torch"], "learn"),
    (["rlplace-profile"], "tf"),
    (["rlplace-compare", "--multirun", "hydra/launcher=local", "graph.num_ops=30,40"], "joblib"),
    (["rlplace-compare", "--multirun", "hydra/sweeper=tune_local_search"], "optuna"),
    (["python", "-c", "from rlplace import from_torch"], "learn"),
])
def test_a_missing_extra_is_one_line_naming_it(core_env, command, extra):
    proc = core_run(core_env, *command)
    if command[0] == "python":  # the Python API raises MissingExtra, a RlplaceError
        assert proc.returncode == 1 and "MissingExtra" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]
        last = proc.stderr.splitlines()[-1]
    else:
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        last = proc.stderr.strip()
    assert f'pip install "rlplace[{extra}]"' in last, last


def test_the_wheel_holds_rlplace_only_with_every_package_and_config(wheel_env):
    wheel, _, _ = wheel_env
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("rlplace-")}
    assert tops == {"rlplace"}
    packaged = {n for n in names if n.endswith((".py", ".yaml"))}
    in_checkout = {str(p.relative_to(REPO)) for p in (REPO / "rlplace").rglob("*") if p.suffix in (".py", ".yaml")}
    assert in_checkout - packaged == set()


def test_the_installed_wheel_runs_outside_the_checkout(wheel_env):
    _, venv, where = wheel_env
    python = venv / "bin" / "python"
    origin = subprocess.run([python, "-c", "import rlplace; print(rlplace.__file__)"], capture_output=True,
                            text=True, check=True, cwd=where).stdout
    assert origin.startswith(str(venv)), origin
    preset = subprocess.run([python, "-c", "from rlplace.cluster import load_preset; print(load_preset('baechi_2080'))"],
                            capture_output=True, text=True, cwd=where)
    assert preset.returncode == 0 and "baechi_2080" in preset.stdout, preset.stderr
    for app in APPS:
        proc = subprocess.run([venv / "bin" / f"rlplace-{app}", "--help"], capture_output=True, text=True, cwd=where)
        assert proc.returncode == 0, (app, proc.stderr[-2000:])
        assert "== Configuration groups ==" in proc.stdout and "== Config ==" in proc.stdout, (app, proc.stdout)
    run_dir = where / "run"
    proc = subprocess.run([venv / "bin" / "rlplace-compare", "graph.num_ops=40", "placers=[single,m_etf,learned]",
                           "plots=false", f"hydra.run.dir={run_dir}"], capture_output=True, text=True, cwd=where)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert {r["placer"] for r in results} == {"single", "m_etf", "learned"}  # the weights ship in the wheel


def test_the_top_level_api_loads_its_heavy_parts_on_first_use():
    code = ("import sys, rlplace\n"
            "assert 'torch' not in sys.modules and 'rlplace.placers' not in sys.modules\n"
            "from rlplace import from_torch, load_preset, make_placer, simulate, torch_device_map\n"
            "assert 'torch' in sys.modules and callable(from_torch) and callable(torch_device_map)\n"
            "graph = rlplace.OpGraph.from_records([{'name': 'a', 'compute_time': 1e-3, 'persistent_bytes': 0, "
            "'temporary_bytes': 0, 'output_bytes': [8]}], [])\n"
            "cluster = load_preset('baechi_2080')\n"
            "print(simulate(graph, cluster, make_placer('single').place(graph, cluster)).step_time)\n"
            "try:\n    rlplace.no_such_name\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.splitlines() == ["0.001", "module 'rlplace' has no attribute 'no_such_name'"]
