"""What the Hydra apps share: bad input becomes one line on stderr and exit status 2; a run
never overwrites another run's results; log lines go to the console and the run's log file
(conf/run.yaml, conf/hydra/job_logging/rlplace.yaml)."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from omegaconf import OmegaConf

from rlplace.errors import ConfigError, RlplaceError

# unique run directories (conf/run.yaml); cached, so that the jobs of a sweep share its directory
OmegaConf.register_new_resolver("rlplace.pid", os.getpid, replace=True, use_cache=True)

_task_started = False


class BelowWarning(logging.Filter):
    """Lets through records below WARNING (stdout); the others go to stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


@contextmanager
def user_errors(prog: str):
    """Run an app's task: an RlplaceError is one line on stderr (and in the run's log) and
    exit status 2."""
    global _task_started
    _task_started = True
    try:
        yield
    except RlplaceError as exc:
        logging.getLogger(prog).error(f"{prog}: error: {exc}")
        sys.exit(2)


def refuse_to_overwrite(out_dir: Path, *names: str, hint: str = "give another hydra.run.dir") -> None:
    """A run directory that already holds another run's results (``hydra.run.dir`` given
    again) is refused before anything is written there."""
    for name in names:
        if (out_dir / name).exists():
            raise ConfigError(f"{out_dir / name} exists: the run directory holds another run's results ({hint})")


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
