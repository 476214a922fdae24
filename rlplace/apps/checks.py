"""Range checks of the apps' config values, run once before an app does any work or writes a
file: each app lists its keys and their allowed values; a value outside them is a ConfigError
naming the key and the range (one line, exit status 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlplace.errors import ConfigError

_ABSENT = object()


@dataclass(frozen=True)
class Allowed:
    """The values a config key may take: ``kind`` is ``int``, ``float`` (ints count) or
    ``bool``; numbers lie in [``low``, ``high``] (``low`` itself excluded when ``open_low``);
    ``null`` allows null (its meaning goes in ``null``'s place in the message)."""

    kind: type
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    null: str | None = None

    def admits(self, value: Any) -> bool:
        if value is None:
            return self.null is not None
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
            return False
        if not math.isfinite(value):
            return False
        return (value > self.low if self.open_low else value >= self.low) and value <= self.high

    def describe(self) -> str:
        if self.kind is bool:
            text = "true or false"
        else:
            text = "an integer" if self.kind is int else "a finite number"
            if self.high < math.inf:
                text += f" in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}]"
            elif self.low > -math.inf:
                text += f" {'>' if self.open_low else '>='} {self.low:g}"
        return text + (f" (or null: {self.null})" if self.null is not None else "")


FLAG = Allowed(bool)
SEED = Allowed(int, low=0)
COUNT = Allowed(int, low=1)
SECONDS = Allowed(float, low=0, open_low=True)
VERIFY = {"verify_top_k": Allowed(int, low=1, null="measure every placement"),
          "verify_every": Allowed(int, low=1, null="at the end only"), "verify_recalibrate": FLAG}


def check_config(cfg: DictConfig, allowed: Mapping[str, Allowed]) -> None:
    """Raise a ConfigError for the first key of ``allowed`` whose value ``cfg`` has and
    ``allowed`` does not admit. Keys the config lacks are skipped (an optional group)."""
    for key, rule in allowed.items():
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT)
        except OmegaConfBaseException as exc:  # a broken interpolation
            raise ConfigError(f"{key}: {str(exc).strip().splitlines()[0]}") from None
        if value is _ABSENT:
            continue
        if not rule.admits(value):
            raise ConfigError(f"{key} must be {rule.describe()}, got {value!r}")
