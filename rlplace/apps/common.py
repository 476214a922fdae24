"""What the Hydra apps share: bad input becomes one line on stderr and exit status 2; a run
never overwrites another run's results; log lines go to the console and the run's log file
(rlplace/conf/run.yaml, rlplace/conf/hydra/job_logging/rlplace.yaml). The scripts under experiments/ get the
same one line for bad input from ``rlplace.errors``' ``ArgumentParser`` and ``run_script``."""

from __future__ import annotations

import logging
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from rlplace.errors import ConfigError, RlplaceError, fail
from rlplace.extras import PLUGIN_EXTRA, install_hint, missing_extra
from rlplace.options import rule_of

# unique run directories (rlplace/conf/run.yaml); cached, so that the jobs of a sweep share its directory
OmegaConf.register_new_resolver("rlplace.pid", os.getpid, replace=True, use_cache=True)


def app_groups() -> str:
    """The config groups this app composes (its defaults list, as ``hydra.runtime.choices``
    has them) with their options, the chosen one starred: what ``--help`` lists
    (rlplace/conf/hydra/help/rlplace.yaml), where Hydra lists every group of the config package."""
    loader = GlobalHydra.instance().config_loader()
    lines = []
    for group, chosen in sorted(HydraConfig.get().runtime.choices.items()):
        if group.startswith("hydra/") or group == "hydra":
            continue
        options = [f"{o}*" if o == chosen else o for o in sorted(loader.get_group_options(group))]
        lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


OmegaConf.register_new_resolver("rlplace.app_groups", app_groups, replace=True)

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
    except (RlplaceError, ModuleNotFoundError) as exc:
        if isinstance(exc, ModuleNotFoundError):
            exc = missing_extra(exc) or exc
            if not isinstance(exc, RlplaceError):
                raise
        logging.getLogger(prog).error(f"{prog}: error: {exc}")
        sys.exit(2)


def refuse_to_overwrite(out_dir: Path, *names: str, hint: str = "give another hydra.run.dir") -> None:
    """A run directory that already holds another run's results (``hydra.run.dir`` given
    again) is refused before anything is written there."""
    for name in names:
        if (out_dir / name).exists():
            raise ConfigError(f"{out_dir / name} exists: the run directory holds another run's results ({hint})")


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
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        composing = isinstance(exc, (HydraException, OmegaConfBaseException)) or str(exc).startswith(GROUP_VALUE)
        if _task_started or user_wants_full_error or not composing:
            raise
        fail(prog, composition_error(exc))
    except OSError as exc:  # Hydra makes the run directory before the task starts
        if _task_started or user_wants_full_error:
            raise
        fail(prog, f"cannot make the run directory {exc.filename} ({exc.strerror}; give another "
                   "hydra.run.dir, or hydra.sweep.dir with --multirun)")
    finally:
        if not user_wants_full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)


# Hydra's ValueError for a config group given a number or a dict (``cluster=3``)
GROUP_VALUE = "Config group override must be a string or a list"


def composition_error(exc: BaseException) -> str:
    """Hydra's report of a config it could not compose, in one line: the key or group, the
    keys or options it has, and Hydra's hint where it gives one (or the command line's override,
    where Hydra's report does not name it)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if text.startswith(GROUP_VALUE):
        return group_given_a_value(sys.argv[1:]) or text
    if isinstance(exc, OverrideParseException):
        return unreadable_override(sys.argv[1:]) or "; ".join(lines)
    plugin = re.search(r"Could not load 'hydra/(launcher|sweeper)/([^/']+)'", text)
    if plugin and plugin.group(2) in PLUGIN_EXTRA:
        group, option = plugin.groups()
        return (f"hydra/{group}: needs Hydra's {option} {group} plugin, which the core install leaves out: "
                f"{install_hint(PLUGIN_EXTRA[option])}")
    missing = re.search(r"Could not find '(.+)/([^/']+)'", text)
    if isinstance(exc, MissingConfigException) and missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.partition("Available options")[2].partition("Config search path")[0],
                             re.MULTILINE)
        known = f"options: {', '.join(options)}" if options else "it has no options"
        return f"{group}={option}: no such {group} config ({known})"
    cause = exc.__cause__
    parent = getattr(cause, "parent_node", None)
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        node = getattr(cause, "child_node", None)
        if isinstance(node, DictConfig) and not isinstance(cause.value, (dict, DictConfig)):
            return node_given_one_value(str(cause.full_key), node, cause.value)
        rule = rule_of(cause.object_type, str(cause.key))
        if rule is not None:
            return str(rule.error(cause.full_key, cause.value))
        return f"{cause.full_key}: {str(cause).strip().splitlines()[0]}"
    if isinstance(parent, DictConfig) and getattr(cause, "full_key", None):
        keys = [k for k in parent.keys() if k != "hydra"]
        hint = next((line for line in lines if line.startswith("To append")), "")
        hint = f"; {hint[0].lower()}{hint[1:]}" if hint else ""
        there = f"keys there: {', '.join(map(str, keys))}" if keys else "nothing there yet"
        return f"{cause.full_key}: no such key ({there}){hint}"
    return "; ".join(lines) if lines else type(exc).__name__


def node_given_one_value(key: str, node: DictConfig, value) -> str:
    """One line for ``key=value`` where ``key`` is a config node, a group of keys (``budget=2``):
    its keys (the first few) and, where the value suits the first key, the override meant."""
    names = list(node.keys())
    if not names:
        return f"{key}: a group of keys, not one value"
    keys = [f"{key}.{name}" for name in names]
    shown = ", ".join(keys[:4]) + (f", ... {len(keys)} in all; --help lists them" if len(keys) > 4 else "")
    meant = f"{keys[0]}={value}" if type(node.get(names[0])) is type(value) else f"{keys[0]}=..."
    return f"{key}: a group of keys ({shown}), not one value: give one of them, e.g. {meant}"


def unreadable_override(argv: Sequence[str]) -> str | None:
    """The first argument of ``argv`` Hydra's override grammar cannot read, as one line with
    what the grammar said (None if each reads alone)."""
    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            parser.parse_overrides([arg])
        except HydraException as exc:
            said = str(exc).strip().splitlines()[0].split("; See https")[0]
            return (f"cannot read the override {arg!r}: {said} (key=value, a dotted key of ASCII letters, "
                    "digits and _; lists in balanced [ ]; quote a value with spaces, brackets or commas)")
    return None


def group_given_a_value(argv: Sequence[str]) -> str | None:
    """The first override of ``argv`` that gives a config group a number or a mapping instead
    of an option's name, as one line with the group's options (None if there is none)."""
    try:
        overrides = OverridesParser.create().parse_overrides([a for a in argv if "=" in a and not a.startswith("-")])
    except HydraException:
        return None
    with rlplace_config():   # Hydra has cleared its own when its app failed
        loader = GlobalHydra.instance().config_loader()
        for override in overrides:
            options = loader.get_group_options(override.key_or_group)
            if options and not isinstance(override.value(), (str, list)):
                return (f"{override.key_or_group}={override.get_value_element_as_str()}: {override.key_or_group} is "
                        f"a config group, give one of its options ({', '.join(options)})")
    return None


@contextmanager
def rlplace_config():
    """Hydra initialised on rlplace.conf for the block: the running app's, inside one, or its own."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        yield


def compose_app(app: str, overrides: list[str]) -> DictConfig:
    """The config ``rlplace-<app> *overrides`` runs with (Hydra's compose API), from inside a
    running rlplace app (whose Hydra reads rlplace.conf) or from anywhere else."""
    with rlplace_config():
        return compose(app, overrides=overrides)


def verifying(real, cfg: DictConfig):
    """``real`` itself, or with ``verify_top_k`` (rlplace.apps.schema.Verify) a VerifyingBackend that
    answers from the simulator and measures the top-k on ``real``."""
    if cfg.get("verify_top_k") is None:
        return real
    if real.simulated:
        raise ConfigError("verify_top_k needs a measuring backend (e.g. backend=tf): "
                          "it measures the best simulated placements on it")
    from rlplace.verify import VerifyingBackend

    recalibrate = None
    if cfg.verify_recalibrate:
        from rlplace.calibration import recalibrate
    return VerifyingBackend(real, cfg.verify_top_k, cfg.verify_every, recalibrate=recalibrate)
