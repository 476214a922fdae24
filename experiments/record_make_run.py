"""Record what ``make run`` prints: run ``rlplace-compare`` with its defaults (or the given
overrides) in a scratch directory and keep its results, with the command and the cluster, in
experiments/results/make_run.json, from which experiments/readme_numbers.py writes README's table.

    .venv/bin/python experiments/record_make_run.py [override ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from omegaconf import OmegaConf

from rlplace.presets import instantiate_node

RESULTS = Path(__file__).resolve().parent / "results" / "make_run.json"


def record(overrides: list[str], out: Path = RESULTS) -> dict | None:
    """The recorded run, or None when rlplace-compare ran none (``--help``). Bad overrides: its
    one-line error and exit status, nothing written."""
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        done = subprocess.run([str(Path(sys.executable).with_name("rlplace-compare")), *overrides, "plots=false",
                               f"hydra.run.dir={run}"])
        if done.returncode:
            sys.exit(done.returncode)
        if not (run / "results.json").is_file():
            return None
        config = OmegaConf.load(run / ".hydra" / "config.yaml")
        recorded = {"command": " ".join(["rlplace-compare", *overrides]),
                    "cluster": asdict(instantiate_node(config, "cluster")),
                    "results": json.loads((run / "results.json").read_text())}
    out.write_text(json.dumps(recorded, indent=1) + "\n")
    return recorded


if __name__ == "__main__":
    if record(sys.argv[1:]) is not None:
        print(f"wrote {RESULTS}")
