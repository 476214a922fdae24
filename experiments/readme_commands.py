"""How long the documents' commands take: run every command of the bash blocks of README.md and
the pages under docs/, in the order of ``DOCUMENTS`` (README.md, then the pages in the order of
README's "Documentation" list), in a scratch directory, and record each one's wall time and exit
status in experiments/results/readme_commands.json, from which experiments/readme_numbers.py
writes README's table of times.

    .venv/bin/python experiments/readme_commands.py [--only SUBSTRING ...] [--timeout 1800]

A command is a line of a ```bash block that runs an rlplace app or module from ``.venv/bin/``
(with its ``\\`` continuation lines); a line with a placeholder (``<...>``, `` ... ``) is not one. The scratch
directory starts empty, so a command that reads what an earlier one wrote (calibration's
``outputs/calibrate-tiny``) finds it. ``--only`` re-runs the commands containing a substring
and keeps the others' records. The machine's other work slows the commands down: the times are
what a user of a shared 2-core machine sees.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlplace.errors import ArgumentParser, run_script  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "readme_commands.json"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
# The documents whose commands are timed, in this order (README's "Documentation" list); every
# page under docs/ is one of them (tests/test_readme_numbers.py checks it).
DOCUMENTS = ("README.md", "docs/design.md", "docs/search.md", "docs/learned.md", "docs/environment.md",
             "docs/reproduce.md", "docs/real_frameworks.md", "docs/distributed.md", "docs/your_own_model.md",
             "docs/reference.md")


def document_commands(document: Path) -> list[str]:
    """One document's runnable commands, continuation lines joined, in its order."""
    commands = []
    for block in BLOCK.findall(document.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(line.split(" #")[0].split())
            runnable = line.startswith((".venv/bin/rlplace-", ".venv/bin/python -m rlplace"))
            if runnable and "<" not in line and " ... " not in line:
                commands.append(line)
    return commands


def commands_by_document(root: Path = ROOT) -> list[tuple[str, str]]:
    """(document, command) of every runnable command of ``DOCUMENTS``, in their order."""
    return [(document, command) for document in DOCUMENTS for command in document_commands(root / document)]


def readme_commands(root: Path = ROOT) -> list[str]:
    """The runnable commands of README.md and the docs pages, in the order of ``DOCUMENTS``."""
    return [command for _, command in commands_by_document(root)]


def run(command: str, scratch: Path, timeout: float) -> dict:
    argv = shlex.split(command)
    argv[0] = str(ROOT / argv[0])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        status, tail = done.returncode, (done.stderr or done.stdout).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        status, tail = None, [f"did not finish in {timeout:.0f} s"]
    return {"command": command, "seconds": round(time.perf_counter() - start, 1), "status": status,
            "last_line": tail[0][:300] if tail else ""}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=None, help="re-run the commands containing one of these")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a command may take")
    args = parser.parse_args(argv)
    old = {r["command"]: r for r in json.loads(RESULTS.read_text())["commands"]} if RESULTS.is_file() else {}
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        for command in readme_commands():
            if args.only is None or any(s in command for s in args.only) or command not in old:
                print(f"running: {command}", flush=True)
                records.append(run(command, Path(scratch), args.timeout))
                print(f"  {records[-1]['seconds']} s, status {records[-1]['status']}", flush=True)
            else:
                records.append(old[command])
            RESULTS.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                           "commands": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_script(main)
