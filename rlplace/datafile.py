"""Reading files a user may have received from someone else: data, never code.

A cluster preset written by ``rlplace-calibrate`` and shared, a calibration run folder, a saved
run config: each is parsed here as plain data (YAML's safe subset, a bounded size, a bounded
number of aliases, a regular file only) and then checked against the project's own schema by
its reader. Nothing read here is handed to ``hydra.utils.instantiate`` or unpickled.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from rlplace.errors import RlplaceError

MAX_DATA_FILE_BYTES = 1 << 20  # a cluster preset is a few hundred bytes
MAX_ALIASES = 16               # YAML anchors reused more often than this are an alias bomb


def regular_file(path: str | Path, error: type[RlplaceError], what: str) -> Path:
    """``path`` when it names a regular file; otherwise ``error`` naming it. A FIFO, a device or
    a directory would block a reader or read forever, so it is refused before it is opened."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, ValueError) as exc:  # permission, a name too long, a NUL in the name
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise error(f"{path}: {kind} (expected a {what})")
    return path


def read_bounded(path: Path, max_bytes: int, error: type[RlplaceError], what: str) -> bytes:
    """The bytes of the regular file ``path``, refused past ``max_bytes``."""
    path = regular_file(path, error, what)
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise error(f"{path}: more than {max_bytes} bytes (the limit for a {what})")
    return data


class _BoundedSafeLoader(yaml.SafeLoader):
    """YAML's safe loader (no ``!!python`` tags: plain mappings, lists, strings and numbers)
    that refuses more than ``MAX_ALIASES`` alias uses, so a "billion laughs" file is refused
    instead of expanded by whoever walks the result."""

    def __init__(self, stream):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} YAML aliases")
        return super().compose_node(parent, index)


# As OmegaConf reads YAML (and so the presets): 1e-6 is a float, not the string YAML 1.1 makes it.
_BoundedSafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)$"),
    list("-+0123456789"))


def load_yaml_data(path: str | Path, error: type[RlplaceError], what: str,
                   max_bytes: int = MAX_DATA_FILE_BYTES) -> Any:
    """The content of a YAML file as plain Python data (dicts, lists, str, int, float, bool,
    None), or ``error`` naming the file."""
    raw = read_bounded(Path(path), max_bytes, error, what)
    try:
        return yaml.load(raw.decode("utf-8"), Loader=_BoundedSafeLoader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError:
        raise error(f"{path}: not a {what} (not UTF-8 text)") from None
    except (yaml.YAMLError, RecursionError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"{path}: not a {what} ({detail})") from None


def finite_number(value: Any) -> bool:
    """An int or float (never a bool) that is finite, without overflowing on a huge int."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False


def brief(value: Any, width: int = 60) -> str:
    """A short repr of untrusted input for an error message (a huge int by its size: its repr
    may be refused, past Python's digit limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."
