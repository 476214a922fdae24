"""What the Hydra apps share: bad input becomes one line on stderr and exit status 2, and
config nodes are instantiated with errors that name their key."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from rlplace.errors import ConfigError, RlplaceError

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


def instantiate_node(cfg: DictConfig, key: str):
    """``hydra.utils.instantiate(cfg[key])``; failures become errors that name ``key``."""
    try:
        return instantiate(cfg[key])
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RlplaceError):
            raise cause from None
        raise ConfigError(f"{key}: {_first_line(cause if cause is not None else exc)}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """OmegaConf appends ``full_key``/``object_type`` lines; the first line says it all."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
