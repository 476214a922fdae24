"""What the Hydra apps share: bad input becomes one line on stderr and exit status 2."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import Callable

from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

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


def run_app(hydra_main: Callable[[], None], prog: str) -> None:
    """Console entry point around a ``@hydra.main`` function. A config Hydra cannot compose
    (unknown group option or key, bad override) is bad input too: one line naming the key and
    the values it allows, and exit status 2, where Hydra prints several lines of help and exits
    with status 1. Errors inside the task are handled by ``user_errors``. With
    ``HYDRA_FULL_ERROR=1`` set by the user, Hydra's own report is kept."""
    global _task_started
    _task_started = False
    user_wants_full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing and exiting 1
    try:
        hydra_main()
    except (HydraException, OmegaConfBaseException) as exc:
        if _task_started or user_wants_full_error:
            raise
        print(f"{prog}: error: {composition_error(exc)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if not user_wants_full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)


def composition_error(exc: BaseException) -> str:
    """Hydra's report of a config it could not compose, in one line: the key or group, the
    keys or options it has, and Hydra's hint where it gives one."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    missing = re.search(r"Could not find '(.+)/([^/']+)'", text)
    if isinstance(exc, MissingConfigException) and missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.partition("Available options")[2].partition("Config search path")[0],
                             re.MULTILINE)
        known = f"options: {', '.join(options)}" if options else "it has no options"
        return f"{group}={option}: no such {group} config ({known})"
    cause = exc.__cause__
    parent = getattr(cause, "parent_node", None)
    if isinstance(parent, DictConfig) and getattr(cause, "full_key", None):
        keys = [k for k in parent.keys() if k != "hydra"]
        hint = next((line for line in lines if line.startswith("To append")), "")
        hint = f"; {hint[0].lower()}{hint[1:]}" if hint else ""
        return f"{cause.full_key}: no such key (keys there: {', '.join(map(str, keys))}){hint}"
    return "; ".join(lines) if lines else type(exc).__name__
