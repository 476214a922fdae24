"""One source of config defaults (issue 18 item 5): the apps' and groups' schemas are dataclasses
in Hydra's ConfigStore (rlplace.apps.schema), the YAML under rlplace/conf/ holds presets only, the
defaults of agents, backends, loggers and the trainer are the code's own, bad keys and values
are one line and exit status 2, and --help lists only the app's groups without importing torch."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from importlib.resources import files

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from rlplace.learn.configs import AGENTS, TrainConfig, WarmStartConfig
from rlplace.learn.loggers import LOGGER_ARGUMENTS, LOGGERS
from rlplace.backends import SimBackend, backend_class, backend_names, make_backend
from rlplace.distributed import RayBackend
from rlplace.learn.env import PlacementEnv
from rlplace.errors import ConfigError
from rlplace.options import checked
from rlplace.placers import make_placer

from test_app_inputs import assert_one_line_exit_2, run  # noqa: F401  (the fixture)

APPS = ["compare", "train", "profile", "reproduce", "calibrate"]


def composed(app: str, *overrides: str):
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        return compose(app, overrides=list(overrides))


def app_yaml(app: str) -> dict:
    return yaml.safe_load(files("rlplace.conf").joinpath(f"{app}.yaml").read_text())


def app_groups(app: str) -> set[str]:
    """The groups an app's YAML names in its defaults list."""
    return {next(iter(d)) for d in app_yaml(app)["defaults"] if isinstance(d, dict)}


def signature_defaults(fn, skip=()) -> dict:
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.name not in skip and p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("app", APPS)
def test_every_app_composes_with_its_defaults_onto_its_schema(app):
    cfg = composed(app)
    assert OmegaConf.get_type(cfg).__name__ == f"{app.capitalize()}App"
    assert not OmegaConf.missing_keys(cfg), OmegaConf.missing_keys(cfg)
    assert set(app_groups(app)) <= set(cfg)


@pytest.mark.parametrize("app", APPS)
def test_the_app_yaml_is_a_defaults_list_only(app):
    """No value of an app's own is kept in YAML: its schema holds them. Only interpolations that
    wire presets together may sit beside the defaults list (calibrate: the graph profiles the
    model it measures)."""
    doc = app_yaml(app)
    wiring = OmegaConf.to_container(OmegaConf.create({k: v for k, v in doc.items() if k != "defaults"}))
    leaves = [v for node in wiring.values() for v in (node.values() if isinstance(node, dict) else [node])]
    assert all(isinstance(v, str) and v.startswith("${") for v in leaves), wiring
    assert doc["defaults"][0] == f"{app}_schema" and doc["defaults"][-1] == "_self_"


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_agent_defaults_are_the_dataclass_defaults(name):
    cfg = composed("train", f"agent={name}")
    assert type(OmegaConf.to_object(cfg.agent)) is AGENTS[name]
    assert OmegaConf.to_object(cfg.agent) == AGENTS[name]()  # seed 0: the seeds the run's seed fills agree


def seeds(node: dict, prefix: str = "") -> dict:
    """Every key whose name says it is a seed, by its dotted path."""
    found = {}
    for key, value in node.items():
        if isinstance(value, dict):
            found |= seeds(value, f"{prefix}{key}.")
        elif "seed" in key:
            found[f"{prefix}{key}"] = value
    return found


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_agent_seed_is_the_run_seed(name):
    found = seeds(OmegaConf.to_container(composed("train", f"agent={name}", "seed=7").agent, resolve=True))
    assert found and set(found.values()) == {7}, found


@pytest.mark.parametrize("name", backend_names())
def test_backend_options_are_the_constructor_defaults(name):
    cfg = composed("compare", f"backend={name}")
    options = OmegaConf.to_container(cfg.backend.options, resolve=True)
    expected = signature_defaults(backend_class(name))
    interpolated = {k for k in cfg.backend.options if OmegaConf.is_interpolation(cfg.backend.options, k)}
    assert {k: v for k, v in options.items() if k not in interpolated} == \
        {k: v for k, v in expected.items() if k not in interpolated}
    assert cfg.backend.name == name and cfg.backend.workers == 1


@pytest.mark.parametrize("name", sorted(LOGGERS))
def test_logger_options_are_the_constructor_defaults(name):
    cfg = composed("train", f"logger={name}")
    assert OmegaConf.to_container(cfg.logger.options) == signature_defaults(LOGGERS[name], LOGGER_ARGUMENTS)


def test_train_app_defaults_are_the_trainers_and_the_envs():
    cfg = composed("train")
    defaults = TrainConfig()
    assert (cfg.budget.placements, cfg.budget.seconds) == (defaults.budget_placements, defaults.budget_seconds)
    for key in ("checkpoint_every", "resume", "stop_after_updates", "init_checkpoint", "seed", "progress", "plots"):
        assert cfg[key] == getattr(defaults, key), key
    assert OmegaConf.to_object(cfg.warm_start) == WarmStartConfig()
    assert cfg.agent.samples == defaults.samples
    env = signature_defaults(PlacementEnv)
    assert dict(cfg.env) == {k: env[k] for k in cfg.env}
    ray = signature_defaults(RayBackend)
    assert dict(cfg.ray) == {k: ray[k] for k in cfg.ray}


BAD = [
    ("compare", ["plotz=false"], ["plotz", "no such key", "plots"]),
    ("train", ["agent.policy.num_groupz=3"], ["agent.policy.num_groupz", "no such key", "num_groups"]),
    ("train", ["logger=wandb", "logger.options.projec=x"], ["logger.options.projec", "project"]),
    ("train", ["agent.samples=x"], ["agent.samples must be an integer >= 1", "'x'"]),
    ("train", ["warm_start.bc_lr=abc"], ["warm_start.bc_lr must be a finite number > 0", "'abc'"]),
    ("train", ["backend.workers=0"], ["backend.workers must be an integer >= 1", "0"]),
    ("calibrate", ["rounds=0"], ["rounds must be an integer >= 1", "0"]),
    ("compare", ["verify_top_k=0"], ["verify_top_k must be an integer >= 1", "measure every placement"]),
    ("train", ["agent=mars", "agent.algorithm.options.epochs=1.5"], ["agent.algorithm.options.epochs", "1.5"]),
    ("compare", ["placers=[single]", "+placer_options.single.devise=1"], ["placer 'single'", "'devise'", "device"]),
]


@pytest.mark.parametrize("app,args,needles", BAD, ids=[" ".join(a) for _, a, _ in BAD])
def test_a_bad_key_or_value_is_one_line_naming_it_and_exit_2(run, tmp_path, app, args, needles):  # noqa: F811
    small = ["graph.num_ops=30"] if app in ("compare", "train") else []  # calibrate's graph is a TF model
    proc = run(app, *small, "plots=false", *args, f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, f"rlplace-{app}", needles)


def test_a_key_added_to_an_agent_is_refused_when_the_policy_is_built(run, tmp_path):  # noqa: F811
    proc = run("train", "graph.num_ops=30", "+agent.policy.bogus=1", "budget.placements=4", "progress=false",
               "plots=false", "torch_threads=1", f"hydra.run.dir={tmp_path}/run")
    assert_one_line_exit_2(proc, "rlplace-train", ["agent.policy", "'bogus'", "num_groups"])


HELP = "import runpy, sys\nsys.argv = ['rlplace-{app}', '--help']\n" \
       "try:\n    runpy.run_module('rlplace.apps.{app}', run_name='__main__')\nexcept SystemExit:\n    pass\n" \
       "print('IMPORTED', *sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))"


@pytest.mark.parametrize("app", APPS)
def test_help_lists_only_the_apps_groups_and_imports_no_torch(app):
    proc = subprocess.run([sys.executable, "-c", HELP.format(app=app)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.partition("== Configuration groups ==")[2].partition("== Config ==")[0]
    listed = {line.partition(":")[0] for line in section.splitlines()[1:] if ": " in line}
    assert listed == app_groups(app), section
    assert proc.stdout.strip().splitlines()[0].startswith(f"rlplace-{app}")
    assert proc.stdout.strip().splitlines()[-1] == "IMPORTED"  # neither torch nor tensorflow


def test_checked_names_the_key_and_converts_values():
    with pytest.raises(ConfigError, match=r"placer 'local_search': bad options: no option 'batches' \(it takes: .*batch"):
        make_placer("local_search", batches=3)
    with pytest.raises(ConfigError, match="placer 'local_search': bad options: batch: .*'x'"):
        make_placer("local_search", batch="x")
    assert make_placer("local_search", batch="3").batch == 3
    sim = SimBackend()
    assert make_placer("local_search", backend=sim).backend is sim  # an object option passes as it is

    def fn(a: int, b: float | None = None, *, c: list[int] = [1]):  # noqa: B006
        return a, b, c

    assert fn(**checked(fn, {"a": "2", "c": [3]}, "fn")) == (2, None, [3])
    with pytest.raises(ConfigError, match=r"fn: bad options: c\[0\]|fn: bad options: c"):
        checked(fn, {"a": 1, "c": ["x"]}, "fn")


def test_backend_and_logger_options_are_checked_against_their_signatures():
    with pytest.raises(ConfigError, match="backend 'sim': bad options: no option 'workers' .*trace"):
        make_backend("sim", workers=2)
    from rlplace.learn.loggers import check_logger

    with pytest.raises(ConfigError, match="logger 'wandb': bad options: no option 'projekt' .*project"):
        check_logger("wandb", projekt="x")


def test_the_tables_compose_rlplace_trains_config(tmp_path):
    from rlplace.apps.tables.common import Setting
    from rlplace.apps.tables.learned import train_config
    from rlplace.zoo import layered

    setting = Setting("tiny", "tiny", layered(20, seed=1), "synthetic")
    agent = {"name": "mars", "label": "Mars", "policy": {"placer_hidden": 16}}
    cfg = train_config(setting, "hrl_k40x2", agent, budget=10, seed=3, graph_path=tmp_path / "g.json.gz")
    expected = composed("train", "graph=file", f"graph.path={tmp_path / 'g.json.gz'}", "cluster=hrl_k40x2",
                        "agent=mars", "agent.policy.placer_hidden=16", "seed=3", "budget.placements=10",
                        f"progress={str(sys.stderr.isatty()).lower()}")
    assert OmegaConf.to_container(cfg, resolve=True) == OmegaConf.to_container(expected, resolve=True)
    with pytest.raises(ConfigError, match="placer_hiden"):
        train_config(setting, "hrl_k40x2", {"name": "mars", "policy": {"placer_hiden": 16}}, 10, 3, tmp_path / "h.json.gz")


def test_the_schema_field_types_are_the_dataclass_types():
    """The agent groups are the agents' dataclasses themselves, not copies of their fields."""
    cfg = composed("train", "agent=mars")
    for node, cls in ((cfg.agent, AGENTS["mars"]), (cfg.agent.policy, type(AGENTS["mars"]().policy))):
        assert OmegaConf.get_type(node) is cls
        assert [f.name for f in dataclasses.fields(cls)] == list(node)
