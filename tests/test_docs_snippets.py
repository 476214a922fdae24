"""Every snippet of README.md and docs/*.md runs as written: each ```python block in a fresh
interpreter, and each rlplace-* command (in ```bash blocks and in inline code) composes its
config with Hydra, as ``--cfg job`` would, so a wrong override or group option fails here.
docs/your_own_model.md has its own test (tests/test_your_own_model.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

import rlplace.apps  # noqa: F401,E402  (registers the apps' structured configs, which rlplace.conf composes)
from rlplace.zoo.baechi import default_profile_path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "your_own_model.md")]
APPS = {"rlplace-compare": "compare", "rlplace-train": "train", "rlplace-profile": "profile",
        "rlplace-reproduce": "reproduce", "rlplace-calibrate": "calibrate"}
# Hydra launcher plugins a command may name that are not installed with rlplace (docs/distributed.md)
PLUGINS = {"ray": "hydra_plugins.hydra_ray_launcher", "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
           "submitit_local": "hydra_plugins.hydra_submitit_launcher", "joblib": "hydra_plugins.hydra_joblib_launcher"}
PLACEHOLDER_VALUES = {"N": "1", "S": "1", "M": "1"}   # budget=N, budget_seconds=S, table.finetune=M


def blocks(path: Path, language: str) -> list[tuple[int, str]]:
    """(line number, text) of every fenced block of ``language`` in ``path``."""
    found, lines = [], path.read_text().splitlines()
    k = 0
    while k < len(lines):
        if lines[k].strip() == f"```{language}":
            end = next(j for j in range(k + 1, len(lines)) if lines[j].strip() == "```")
            found.append((k + 1, "\n".join(lines[k + 1:end])))
            k = end
        k += 1
    return found


def commands(path: Path) -> list[tuple[str, list[str]]]:
    """(where, argv) of every rlplace-* command: the lines of ```bash blocks (continuations
    joined, comments dropped) and inline code that starts with one."""
    found = []
    for line, text in blocks(path, "bash"):
        for command in text.replace("\\\n", " ").splitlines():
            argv = shlex.split(command, comments=True)
            if argv and Path(argv[0]).name in APPS:
                found.append((f"{path.name}:{line}", argv))
    for k, line in enumerate(path.read_text().splitlines(), 1):
        for span in re.findall(r"`((?:\.venv/bin/)?rlplace-[a-z]+ [^`]*)`", line):
            found.append((f"{path.name}:{k}", shlex.split(span)))
    return sorted(found, key=lambda c: int(c[0].rsplit(":", 1)[1])) + override_lists(path, found)


def override_lists(path: Path, found: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """A sentence that lists overrides ("Every parameter is a Hydra override: `a=1`, ....")
    lists them for the last command above it: each is that command's app with the override."""
    out, text = [], path.read_text()
    for match in re.finditer(r"Hydra override:((?:[^.`]|`[^`]*`)*)\.", text):
        line = text[:match.start()].count("\n") + 1
        app = [argv[0] for where, argv in found if int(where.rsplit(":", 1)[1]) <= line][-1]
        out += [(f"{path.name}:{line}", [app, span]) for span in re.findall(r"`([^` ]+=[^` ]*)`", match.group(1))]
    return out


def sweep_values(overrides: list[str]) -> list[list[str]]:
    """The override lists to compose: the first value of every sweep, then each further value
    of each sweep in turn."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    first = [o.input_line if not o.is_sweep_override() else f"{o.get_key_element()}={next(o.sweep_string_iterator())}"
             for o in parsed]
    runs = [first]
    for k, o in enumerate(parsed):
        if o.is_sweep_override():
            for value in list(o.sweep_string_iterator())[1:]:
                runs.append(first[:k] + [f"{o.get_key_element()}={value}"] + first[k + 1:])
    return runs


def compose_command(argv: list[str]) -> None:
    app = APPS[Path(argv[0]).name]
    overrides = [a for a in argv[1:] if a not in ("--multirun", "-m")]
    overrides = [re.sub(r"=([NSM])$", lambda m: "=" + PLACEHOLDER_VALUES[m.group(1)], o) for o in overrides]
    for run in sweep_values(overrides):
        GlobalHydra.instance().clear()
        with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
            compose(config_name=app, overrides=run, return_hydra_config=True)


COMMANDS = [(where, argv) for path in DOCS for where, argv in commands(path)]


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[f"{w} {' '.join(a[:2])}" for w, a in COMMANDS])
def test_command_composes_its_config(where, argv):
    if any("<" in a or a == "..." for a in argv):
        pytest.skip(f"{where}: stands for a command (<...> or ... placeholders), not one to run")
    for a in argv:
        plugin = re.fullmatch(r"hydra/launcher=(\w+)", a)
        if plugin and plugin.group(1) in PLUGINS and find_spec(PLUGINS[plugin.group(1)]) is None:
            pytest.skip(f"{where}: the Hydra launcher plugin {plugin.group(1)!r} is not installed here")
    compose_command(argv)


SNIPPETS = [(f"{path.name}:{line}", text) for path in DOCS for line, text in blocks(path, "python")]


@pytest.mark.parametrize("where, code", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_python_snippet_runs(where, code):
    if re.search(r"baechi_gnmt|load_baechi_profile\(\)", code) and not default_profile_path().is_file():
        pytest.skip(f"{where} reads the Baechi GNMT profile, not found at {default_profile_path()}")
    if "rlplace.distributed" in code and find_spec("ray") is None:
        pytest.skip(f"{where} needs Ray: pip install 'rlplace[ray]'")
    # RAY_ADDRESS=local: a snippet that starts Ray starts its own instance, never joins one running here
    env = {**os.environ, "RAY_ADDRESS": "local", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{where} failed:\n{proc.stderr[-3000:]}"


def test_the_documents_have_snippets_and_commands():
    """The extraction finds what is there (an empty parametrization would pass silently)."""
    assert len(SNIPPETS) >= 3 and len(COMMANDS) >= 20
    assert any(w.startswith("distributed.md") for w, _ in SNIPPETS)
    assert any("--multirun" in argv for _, argv in COMMANDS)
