"""Named presets: the Hydra configs shipped in ``rlplace.conf`` (``rlplace/conf/<group>/<name>.yaml``),
instantiated from Python without running a Hydra app."""

from __future__ import annotations

from importlib.resources import files

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlplace.errors import ConfigError, RlplaceError, first_line
from rlplace.extras import missing_extra
from rlplace.options import checked


def preset_names(group: str) -> list[str]:
    folder = files("rlplace.conf").joinpath(group)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def preset_config(group: str, name: str) -> DictConfig:
    """The config ``rlplace/conf/<group>/<name>.yaml``, not instantiated."""
    path = files("rlplace.conf").joinpath(group, f"{name}.yaml")
    if not path.is_file():
        raise ConfigError(f"unknown {group} preset {name!r} (known: {', '.join(preset_names(group))})")
    return OmegaConf.load(str(path))


def load_preset(group: str, name: str, seed: int = 0, **overrides):
    """Instantiate ``rlplace/conf/<group>/<name>.yaml`` with ``overrides`` merged in. ``seed`` fills
    the ``${seed}`` interpolation that presets share with the apps' top-level config."""
    node = OmegaConf.merge(preset_config(group, name), overrides)
    return instantiate_node(OmegaConf.create({"seed": seed, group: node}), group)


def instantiate_node(cfg: DictConfig, key: str):
    """``hydra.utils.instantiate(cfg[key])``; failures become errors that name ``key``. The
    node's plain arguments are first checked against its target's signature
    (``rlplace.options.checked``), so ``graph.num_ops=2.5`` names the key and the value."""
    try:
        _check_arguments(cfg[key], key)
        return instantiate(cfg[key])
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RlplaceError):
            raise cause from None
        if isinstance(cause, ModuleNotFoundError) and (missing := missing_extra(cause, key)):
            raise missing from None
        raise ConfigError(f"{key}: {first_line(cause if cause is not None else exc)}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}: {first_line(exc)}") from None


def _check_arguments(node, key: str) -> None:
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        target = get_object(str(node._target_))
    except (ImportError, AttributeError, ValueError, InstantiationException):
        return  # instantiate says why, naming the key
    plain = OmegaConf.to_container(node, resolve=True)
    args = {k: v for k, v in plain.items() if not k.startswith("_") and not isinstance(v, dict)}
    if callable(target):
        checked(target, args, key)
