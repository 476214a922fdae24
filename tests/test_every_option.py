"""Every option of every schema refuses a bad value with one line naming the key (issue 44 item
2): for each app and each group option that has its own keys (agents, backends, loggers), every
key with an ``allowed`` rule is given values below and above its range, NaN, a non-integer and
a string; the composed config is refused by Hydra's type check (turned into one line by
``rlplace.apps.common.composition_error``) or by ``check_ranges``, and the line names the key."""

import math

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import rlplace.apps  # noqa: F401  (registers the schemas)
from rlplace.apps.common import composition_error
from rlplace.errors import ConfigError
from rlplace.learn.configs import AGENTS
from rlplace.learn.loggers import LOGGERS
from rlplace.options import Allowed, check_ranges, rule_of

SETTINGS = {"compare": [[], ["backend=tf"]], "profile": [[]], "reproduce": [[]], "calibrate": [[]],
            "train": [[f"agent={a}"] for a in AGENTS] + [[f"logger={name}"] for name in LOGGERS]}


def composed(app: str, overrides: list[str]) -> DictConfig:
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        return compose(app, overrides=overrides)


def ruled(cfg: DictConfig, prefix: str = ""):
    """(dotted key, rule) of every value of ``cfg`` with an ``allowed`` rule."""
    schema = OmegaConf.get_type(cfg)
    for key in cfg.keys():
        if key == "hydra":
            continue
        value = cfg._get_node(key)
        if isinstance(value, DictConfig):
            yield from ruled(value, f"{prefix}{key}.")
        elif (rule := rule_of(schema, str(key))) is not None:
            yield f"{prefix}{key}", rule


def bad_values(rule: Allowed) -> list[str]:
    """A string, and a value of the right type out of range (NaN where the range is unbounded)."""
    if rule.kind is bool:
        return ["maybe"]   # OmegaConf reads an integer as a boolean (its documented conversion)
    if math.isfinite(rule.low):
        out = rule.low if rule.open_low else (rule.low - 1 if rule.kind is int else rule.low - 0.5)
    elif math.isfinite(rule.high):
        out = rule.high + 1
    else:
        out = 2.5 if rule.kind is int else float("nan")
    return ["abc", str(int(out) if rule.kind is int and float(out).is_integer() else out)]


def cases():
    """(app, the setting that brings the key, key, value), each key of an app once."""
    seen = set()
    for app, settings in SETTINGS.items():
        for setting in settings:
            for key, rule in ruled(composed(app, setting)):
                if (app, key) not in seen:
                    seen.add((app, key))
                    yield from ((app, tuple(setting), key, value) for value in bad_values(rule))


CASES = list(cases())


def test_every_schema_has_ruled_options():
    assert len({(app, key) for app, _, key, _ in CASES}) > 80   # 95 when written


@pytest.mark.parametrize("app, setting, key, value", CASES, ids=[f"{a}:{k}={v}" for a, _, k, v in CASES])
def test_a_bad_value_is_one_line_naming_the_key(app, setting, key, value):
    try:
        cfg = composed(app, [*setting, f"{key}={value}"])
    except (HydraException, OmegaConfBaseException) as exc:
        line = composition_error(exc)
    else:
        with pytest.raises(ConfigError) as info:
            check_ranges(cfg)
        line = str(info.value)
    assert key in line and "\n" not in line, line
