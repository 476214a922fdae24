"""Options as schemas. A config dataclass (the apps' schema, the agents' configs) is the one
place an option's default lives; its allowed values sit beside it as field metadata
(``allowed``), checked by ``check_ranges`` before an app does any work. Code that takes its
options as keyword arguments (placers, backends, loggers) has its signature as its schema:
``signature_schema`` turns it into a dataclass Hydra can store and ``checked`` refuses an unknown
option or a value of the wrong type in one line naming the key."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from rlplace.errors import ConfigError, first_line

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

    def error(self, key: str, value: Any) -> ConfigError:
        return ConfigError(f"{key} must be {self.describe()}, got {value!r}")


FLAG = Allowed(bool)
SEED = Allowed(int, low=0)
COUNT = Allowed(int, low=1)
SECONDS = Allowed(float, low=0, open_low=True)


def allowed(default: Any, rule: Allowed) -> Any:
    """A dataclass field with ``default`` whose values ``rule`` governs (``check_ranges``)."""
    return field(default=default, metadata={"allowed": rule})


def rule_of(cls: type, name: str) -> Allowed | None:
    """The ``allowed`` rule of field ``name`` of the dataclass ``cls``, if it has one."""
    if not dataclasses.is_dataclass(cls):
        return None
    found = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    return None if found is None else found.metadata.get("allowed")


def check_fields(instance: Any, prefix: str = "") -> None:
    """A ConfigError for the first field of the dataclass ``instance`` whose ``allowed`` rule
    does not admit its value (the Python API's check of what ``check_ranges`` checks in a config)."""
    for f in dataclasses.fields(instance):
        rule = f.metadata.get("allowed")
        value = getattr(instance, f.name)
        if rule is not None and not rule.admits(value):
            raise rule.error(f"{prefix}{f.name}", value)


def check_ranges(cfg: DictConfig, prefix: str = "") -> None:
    """A ConfigError for the first value of ``cfg`` (walked depth first) that the ``allowed``
    rule of its dataclass field does not admit. Nodes without a dataclass schema are skipped."""
    schema = OmegaConf.get_type(cfg)
    for key in cfg.keys():
        name = f"{prefix}{key}"
        try:
            value = cfg[key]
        except OmegaConfBaseException as exc:  # a broken interpolation
            raise ConfigError(f"{name}: {first_line(exc)}") from None
        if isinstance(value, DictConfig):
            check_ranges(value, f"{name}.")
            continue
        rule = rule_of(schema, str(key))
        if rule is not None and not rule.admits(value):
            raise rule.error(name, value)


# --------------------------------------------------------------------------- signature schemas

_PLAIN = (int, float, bool, str, bytes, Path)


def _storable(hint: Any) -> Any:
    """``hint`` where OmegaConf can type-check it (a plain type, an Enum, Optional or a list or
    dict of them), else Any."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _PLAIN or (isinstance(hint, type) and issubclass(hint, enum.Enum)) or dataclasses.is_dataclass(hint):
        return hint
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _storable(rest[0])
            return Any if inner is Any else typing.Optional[inner]
        return Any
    if origin in (list, tuple) or hint in (list, tuple):
        return typing.List[_storable(args[0])] if args and _storable(args[0]) is not Any else list
    if origin is dict or hint is dict:
        plain_values = len(args) == 2 and args[0] is str and _storable(args[1]) is not Any
        return typing.Dict[str, _storable(args[1])] if plain_values else dict
    return Any


def _parameters(fn: Callable, skip: Iterable[str]) -> list[inspect.Parameter]:
    skip = set(skip)
    return [p for p in inspect.signature(fn).parameters.values()
            if p.name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _hints(fn: Callable) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn if dataclasses.is_dataclass(fn) or not isinstance(fn, type) else fn.__init__)
    except Exception:  # noqa: BLE001 - a hint that does not evaluate is no hint
        return {}


def _defaults(fn: Callable, skip: Iterable[str]) -> dict[str, Any]:
    """Parameter name -> a field spec with its default (``???`` where it has none), for the
    parameters whose default is a config value (not an object such as a Generator)."""
    if dataclasses.is_dataclass(fn):
        return {f.name: field(default=f.default) if f.default is not dataclasses.MISSING
                else field(default_factory=f.default_factory) if f.default_factory is not dataclasses.MISSING
                else field(default="???") for f in dataclasses.fields(fn) if f.init and f.name not in set(skip)
                if f.default is dataclasses.MISSING or _is_plain(f.default)}
    specs = {}
    for p in _parameters(fn, skip):
        default = p.default
        if default is inspect.Parameter.empty:
            specs[p.name] = field(default="???")
        elif isinstance(default, (list, dict)) and _is_plain(default):
            specs[p.name] = field(default_factory=lambda d=default: type(d)(d))
        elif _is_plain(default):
            specs[p.name] = field(default=default)
    return specs


def signature_schema(fn: Callable, skip: Iterable[str] = ()) -> type:
    """A dataclass with one field per keyword parameter of ``fn`` (less ``skip``; for a
    dataclass, per init field): its type hint where OmegaConf can check it, its default (a
    parameter without one is MISSING, ``???``). Parameters whose default is an object (a
    Generator, a Backend) are not config values and are left out."""
    hints = _hints(fn)
    fields = [(name, _storable(hints.get(name, Any)), spec) for name, spec in _defaults(fn, skip).items()]
    name = getattr(fn, "__name__", "options")
    return dataclasses.make_dataclass(f"{name[0].upper()}{name[1:]}Options", fields)


def checked(fn: Callable, options: Mapping[str, Any], where: str, skip: Iterable[str] = ()) -> dict[str, Any]:
    """``options`` for ``fn`` checked against its signature: a key it does not take, or a value
    its type hint refuses, is a ConfigError naming ``where`` and the key. Returns the options with
    plain values converted as the hints say (``"3"`` for an int is 3)."""
    names = [p.name for p in _parameters(fn, skip)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    unknown = [k for k in options if k not in names]
    if unknown and not takes_any:
        raise ConfigError(f"{where}: bad options: no option {unknown[0]!r} (it takes: {', '.join(names) or 'none'})")
    schema = signature_schema(fn, skip)
    known = {f.name for f in dataclasses.fields(schema)}
    plain = {k: v for k, v in options.items() if k in known and _is_plain(v)}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), plain)
    except ConfigKeyError as exc:  # pragma: no cover - unknown keys are refused above
        raise ConfigError(f"{where}: bad options: {first_line(exc)}") from None
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ConfigError(f"{where}: bad options: {key}: {first_line(exc)}") from None
    converted = OmegaConf.to_container(merged)
    return {k: converted[k] if k in plain else v for k, v in options.items()}


def _is_plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return value is None or isinstance(value, (*_PLAIN, enum.Enum))


def default_of(fn: Callable, name: str) -> Any:
    """The default of parameter ``name`` of ``fn``: a schema field that takes it over keeps one
    source for it."""
    default = inspect.signature(fn).parameters[name].default
    if default is inspect.Parameter.empty:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)}: parameter {name!r} has no default")
    return default
