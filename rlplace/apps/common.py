"""What the Hydra apps share: bad input becomes one line on stderr and exit status 2."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable

from rlplace.errors import RlplaceError

_task_started = False


@contextmanager
def user_errors(prog: str):
    """Run an app's task: an RlplaceError is one line on stderr and exit status 2."""
    global _task_started
    _task_started = True
    try:
        yield
    except RlplaceError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)


def run_app(hydra_main: Callable[[], None]) -> None:
    """Console entry point around a ``@hydra.main`` function. Hydra exits with status 1 when
    it cannot compose the config (unknown group option, bad override); that is bad input too,
    so it becomes status 2. Errors inside the task are handled by ``user_errors``."""
    try:
        hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and not _task_started:
            sys.exit(2)
        raise
