"""Every numeric option of the learned agents (rlplace.learn.configs) is range-checked before any
work (issue 44 item 2): a value out of range, NaN or of the wrong kind is one ConfigError naming
the key, where it used to end in a traceback from torch or numpy, or train silently."""

import dataclasses
import math

import pytest
from hydra import compose, initialize_config_module

import rlplace.apps  # noqa: F401  (registers the structured configs)
from rlplace.learn import configs
from rlplace.errors import ConfigError
from rlplace.options import check_ranges, rule_of

SECTIONS = {"hierarchical": [("policy", configs.HierarchicalConfig), ("algorithm.options", configs.ReinforceConfig)],
            "mars": [("policy", configs.MarsConfig), ("policy.dgi", configs.DGIConfig),
                     ("algorithm.options", configs.PPOConfig)]}


def train_config(agent: str, *overrides):
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        return compose("train", overrides=[f"agent={agent}", *overrides])


def numeric_fields():
    for agent, sections in SECTIONS.items():
        for where, cls in sections:
            for f in dataclasses.fields(cls):
                if f.type in ("int", "float", int, float):
                    yield agent, f"agent.{where}.{f.name}", cls, f.name


FIELDS = list(numeric_fields())


@pytest.mark.parametrize("agent,key,cls,name", FIELDS, ids=[k for _, k, _, _ in FIELDS])
def test_every_numeric_agent_option_has_a_rule(agent, key, cls, name):
    assert rule_of(cls, name) is not None, key


@pytest.mark.parametrize("agent,key,cls,name", FIELDS, ids=[k for _, k, _, _ in FIELDS])
def test_out_of_range_values_are_one_error_naming_the_key(agent, key, cls, name):
    rule = rule_of(cls, name)
    bad = [v for v in (rule.low - 1 if math.isfinite(rule.low) else None, rule.high + 1 if math.isfinite(rule.high)
                       else None, "nan" if rule.kind is float else 2.5) if v is not None]
    if rule.open_low:
        bad.append(rule.low)
    for value in bad:
        try:
            cfg = train_config(agent, f"{key}={value}")
        except Exception as exc:  # noqa: BLE001 - OmegaConf refuses a wrong kind while composing: fine too
            assert name in str(exc)
            continue
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            check_ranges(cfg)


def test_the_defaults_pass():
    for agent in SECTIONS:
        check_ranges(train_config(agent))


def test_transformer_heads_must_divide_the_width():
    with pytest.raises(ConfigError, match="transformer_heads"):
        configs.MarsConfig(placer="transformer", placer_hidden=512, transformer_heads=3)
