"""A user's model named by its module path, ``"package.module:function"`` (``model.name`` of
``graph=tf_model``, ``graph=torch_model`` and their backends)."""

from __future__ import annotations

import importlib
from typing import Callable

from rlplace.errors import ConfigError


def resolve(path: str) -> Callable:
    """The function ``package.module:function`` names (ConfigError if it cannot be imported)."""
    module, _, attr = path.partition(":")
    try:
        target = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"model.name: cannot import {module!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"model.name: module {module!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"model.name: {path!r} is not callable")
    return target
