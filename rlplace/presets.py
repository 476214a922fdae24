"""Named presets: the Hydra configs shipped in ``rlplace.conf`` (``rlplace/conf/<group>/<name>.yaml``),
instantiated from Python without running a Hydra app."""

from __future__ import annotations

from importlib.resources import files

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlplace.errors import ConfigError, RlplaceError
from rlplace.options import first_line


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
    """``hydra.utils.instantiate(cfg[key])``; failures become errors that name ``key``."""
    try:
        return instantiate(cfg[key])
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RlplaceError):
            raise cause from None
        raise ConfigError(f"{key}: {first_line(cause if cause is not None else exc)}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key}: {first_line(exc)}") from None
