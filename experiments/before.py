"""A module as an older commit had it (``git show``), for before/after benchmarks that alternate
the two in one process (this machine's speed drifts by tens of percent between runs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def load_module_at(commit: str, path: str, work: Path) -> ModuleType:
    """The file ``path`` (relative to the repository root) as it was at ``commit``, imported
    from a copy written under ``work``; it imports today's versions of everything else."""
    source = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parent).stdout
    name = f"{Path(path).stem}_{commit}"
    copy = work / f"{name}.py"
    copy.write_text(source)
    spec = importlib.util.spec_from_file_location(name, copy)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
