"""The one exception family of rlplace, and how a command reports one.

Every message names the offending op, file or key. The Hydra apps turn these into one line on
stderr and exit status 2 (``rlplace.apps.common``); plain scripts (experiments/, ``python -m
rlplace.tf.comm``) do the same with ``ArgumentParser`` and ``run_script`` below.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn


class RlplaceError(Exception):
    """Base of every error rlplace raises on bad input."""


class GraphError(RlplaceError):
    """An OpGraph (or a graph file) is malformed: cycle, bad cost, unknown op, ..."""


class ConfigError(RlplaceError):
    """A configuration value or name is invalid: unknown placer, bad cluster, ..."""


class PlacementError(RlplaceError):
    """A placement does not fit its graph and cluster: wrong length, bad device, split group."""


class BackendError(RlplaceError):
    """A backend could not evaluate a placement."""


class CheckpointError(RlplaceError):
    """A checkpoint file cannot be read (missing, empty, truncated, not a torch file, pickled
    code refused) or does not belong to the run (another agent, graph or cluster)."""


def first_line(exc: BaseException) -> str:
    """An exception's message cut to one short line, for a one-line error (OmegaConf and
    numpy append lines; the first says it all)."""
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` for plain scripts: a bad argument is one line and
    exit status 2 (argparse prints its usage line before the error)."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, f"{message} (--help lists the arguments)")


def fail(prog: str, message: str) -> NoReturn:
    """Bad input of a script: one line naming it on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_script(main: Callable[[], Any], prog: str | None = None) -> None:
    """A script's entry point: an RlplaceError (an unknown placer, a malformed graph file, ...)
    is one line and exit status 2, not a traceback; ``main``'s integer result is the exit status.
    ``prog`` names the script in that line (default: its file name)."""
    prog = prog or Path(sys.argv[0]).name
    try:
        status = main()
    except RlplaceError as exc:
        fail(prog, str(exc))
    sys.exit(status if isinstance(status, int) else 0)
