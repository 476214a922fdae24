"""rlplace installs as a normal wheel, and its core does not reach up (issue 40, item 1).

The other tests run against an editable install of the checkout, which cannot see a file the
wheel leaves out; here the wheel is built, installed without ``-e`` into a fresh virtual
environment (reusing this one's dependencies) and run from a folder outside the checkout."""

import json
import site
import subprocess
import sys
import zipfile

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


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """A virtual environment with the wheel of this checkout installed (not editable)."""
    where = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(where / "dist")], check=True, capture_output=True, cwd=where)
    wheel = next((where / "dist").glob("rlplace-*.whl"))
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # This environment's dependencies, but not its editable rlplace: a path in a .pth file is
    # put on sys.path without reading the .pth files inside it (the editable finder's).
    purelib = next(venv.glob("lib/python*/site-packages"))
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True)
    return wheel, venv, where


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
