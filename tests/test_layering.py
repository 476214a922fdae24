"""Dependencies point one way (docs/design.md): nothing that installs with rlplace (rlplace/) imports
experiments/, and rlplace-reproduce runs where experiments/ cannot be imported, as it does when
installed outside a checkout."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

INSTALLED = ["rlplace"]


def imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` of the file names (absolute imports)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return [node] if isinstance(node, str) else []


def test_nothing_installed_imports_experiments():
    offenders = [f"{path.relative_to(REPO)}: {name}"
                 for top in INSTALLED for path in sorted((REPO / top).rglob("*.py"))
                 for name in imported_modules(path) if name.split(".")[0] == "experiments"]
    assert offenders == []


def test_no_config_names_code_under_experiments():
    """A config value such as a table's ``run:`` or a ``_target_:`` is imported by the apps."""
    offenders = [f"{path.relative_to(REPO)}: {value}"
                 for path in sorted((REPO / "rlplace" / "conf").rglob("*.yaml"))
                 for value in strings(yaml.safe_load(path.read_text()))
                 if value.strip().startswith("experiments.")]
    assert offenders == []


def test_the_checks_see_an_import_of_experiments(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\nfrom experiments.tables import common\n")
    assert "experiments.tables" in imported_modules(planted)


TINY_TABLE = ["table=baechi_table3", "mode=smoke", "plots=false",
              "table.smoke.models=[{key: g, label: tiny, family: gnmt, graph: layered, knobs: {num_ops: 40}}]"]


def test_rlplace_reproduce_runs_without_experiments(tmp_path):
    """``experiments`` made unimportable (as outside a checkout); run from another directory."""
    code = ("import sys; sys.modules['experiments'] = None; sys.argv = ['rlplace-reproduce', *sys.argv[1:]]; "
            "from rlplace.apps.reproduce import main; main()")
    run = subprocess.run([sys.executable, "-c", code, *TINY_TABLE, f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["table"] == "baechi_table3" and results["claims"]


def test_record_and_why_only_need_a_checkout_and_say_so_before_any_work(tmp_path, monkeypatch):
    import rlplace
    from hydra import compose, initialize_config_module

    from rlplace.apps import reproduce as app
    from rlplace.errors import ConfigError

    monkeypatch.setattr(rlplace, "__file__", str(tmp_path / "site-packages" / "rlplace" / "__init__.py"))
    monkeypatch.setattr(app, "import_module", lambda name: pytest.fail("the table ran"))
    for option in ("record", "why_only"):
        with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
            cfg = compose("reproduce", overrides=[*TINY_TABLE, f"{option}=true"])
        with pytest.raises(ConfigError, match=f"{option}: needs a source checkout"):
            app.reproduce(cfg, tmp_path / option)
