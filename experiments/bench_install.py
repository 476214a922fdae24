"""What ``pip install rlplace`` costs: the core install (no extras) from this checkout's wheel into
a fresh virtual environment, against the environment ``make test`` builds (every extra).

    .venv/bin/python experiments/bench_install.py [--cold]

Installs the wheel with the pinned versions of constraints.txt, timing ``pip install`` (pip's
cache as it is; ``--cold`` bypasses it, so every package is downloaded), sizes the environment
on disk, and runs ``rlplace-compare`` on a 200-op graph in it twice (the core runs the apps; the
first run compiles the simulator's and placers' numba kernels into numba's cache, the second
loads them). Writes
experiments/results/install.json, from which experiments/readme_numbers.py writes README's
sentence.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlplace.errors import ArgumentParser, run_script  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "install.json"


def size_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (``du``, so hard links and sparse files count once)."""
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def distributions(python: Path) -> int:
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            check=True).stdout
    return len(json.loads(listed))


def timed(command: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, **kwargs)
    return time.perf_counter() - start


def measure(cold: bool) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(scratch / "dist")], check=True, capture_output=True)
        wheel = next((scratch / "dist").glob("rlplace-*.whl"))
        venv = scratch / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        empty = size_bytes(venv)
        pip = [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)]
        seconds = timed(pip + (["--no-cache-dir"] if cold else []))
        core = {"seconds": round(seconds, 1), "bytes": size_bytes(venv) - empty, "distributions": distributions(python)}
        compare = [str(venv / "bin" / "rlplace-compare"), "graph.num_ops=200", "plots=false",
                   f"hydra.run.dir={scratch / 'run'}"]
        first = timed(compare, capture_output=True, cwd=scratch)  # compiles the numba kernels into their cache
        again = timed(compare[:-1] + [f"hydra.run.dir={scratch / 'again'}"], capture_output=True, cwd=scratch)
        core["compare_200_ops_seconds"] = {"first": round(first, 1), "again": round(again, 1)}
    full_venv = ROOT / ".venv"
    full = {"bytes": size_bytes(full_venv), "distributions": distributions(full_venv / "bin" / "python")}
    return {"machine": f"{platform.machine()}, {platform.python_version()}", "pip_cache": "cold" if cold else "warm",
            "core": core, "make_test_env": full}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="bypass pip's cache (download every package)")
    args = parser.parse_args(argv)
    recorded = measure(args.cold)
    RESULTS.write_text(json.dumps(recorded, indent=1) + "\n")
    print(json.dumps(recorded, indent=1))
    return 0


if __name__ == "__main__":
    run_script(main)
