"""Devices and the interconnect: Device, CommModel, Cluster.

Transfer time follows the linear model of Baechi, Celeritas and Pesto:
``t = latency + bytes * seconds_per_byte``. ``mode`` says whether a device may move several
tensors at once (``parallel``) or owns one send and one receive channel served first come first
served (``sequential``, Baechi §3.4). ``memory_model`` says how buffers are counted
(``rlplace.schedule.aliases``): ``default`` gives every output its own buffer (docs/design.md's
rules); ``tf_reuse`` follows TensorFlow's executor, where an output may share an input's buffer
(views, in-place forwarding). Presets of the papers' machines are Hydra configs in
``rlplace/conf/cluster/``; ``load_preset`` reads one from Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rlplace.datafile import brief, finite_number, load_yaml_data
from rlplace.errors import ConfigError

COMM_MODES = ("parallel", "sequential")
MEMORY_MODELS = ("default", "tf_reuse")


@dataclass(frozen=True)
class Device:
    """One device: ``memory_bytes`` of memory and a ``speed`` relative to the reference device
    the op costs were measured on (op time = compute_time / speed)."""

    name: str
    memory_bytes: int
    speed: float = 1.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"device name must be a non-empty string, got {self.name!r}")
        if not (isinstance(self.memory_bytes, (int, float, np.integer, np.floating))
                and math.isfinite(self.memory_bytes) and self.memory_bytes > 0):
            raise ConfigError(f"device {self.name!r}: memory_bytes must be > 0, got {self.memory_bytes!r}")
        object.__setattr__(self, "memory_bytes", int(self.memory_bytes))
        if not (isinstance(self.speed, (int, float, np.integer, np.floating)) and math.isfinite(self.speed) and self.speed > 0):
            raise ConfigError(f"device {self.name!r}: speed must be > 0, got {self.speed!r}")


@dataclass(frozen=True)
class CommModel:
    """Transfer time between two different devices: ``latency + bytes * seconds_per_byte``."""

    latency: float = 0.0
    seconds_per_byte: float = 0.0
    mode: str = "parallel"

    def __post_init__(self):
        for key in ("latency", "seconds_per_byte"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"comm.{key} must be a finite number >= 0, got {value!r}")
        if self.mode not in COMM_MODES:
            raise ConfigError(f"comm.mode must be one of {COMM_MODES}, got {self.mode!r}")

    def transfer_time(self, nbytes):
        """Seconds to move ``nbytes`` (a number or an array) between two devices."""
        return self.latency + np.asarray(nbytes, dtype=np.float64) * self.seconds_per_byte

    @property
    def bandwidth(self) -> float:
        """Bytes per second (infinite when seconds_per_byte is 0)."""
        return 1.0 / self.seconds_per_byte if self.seconds_per_byte > 0 else math.inf


@dataclass(frozen=True)
class Cluster:
    """The devices a graph is placed on and the interconnect between them."""

    devices: tuple[Device, ...]
    comm: CommModel = field(default_factory=CommModel)
    name: str = ""
    memory_model: str = "default"

    def __post_init__(self):
        devices = tuple(self.devices)
        if not devices:
            raise ConfigError("a cluster needs at least one device")
        if not all(isinstance(d, Device) for d in devices):
            raise ConfigError("cluster devices must be Device objects")
        names = [d.name for d in devices]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"duplicate device name {sorted(dup)[0]!r}")
        if not isinstance(self.comm, CommModel):
            raise ConfigError("cluster comm must be a CommModel")
        if self.memory_model not in MEMORY_MODELS:
            raise ConfigError(f"cluster memory_model must be one of {MEMORY_MODELS}, got {self.memory_model!r}")
        object.__setattr__(self, "devices", devices)

    @classmethod
    def homogeneous(cls, n: int, memory_bytes: int, comm: CommModel | None = None,
                    speed: float = 1.0, prefix: str = "/device:GPU:", name: str = "",
                    memory_model: str = "default") -> Cluster:
        """``n`` identical devices named ``prefix0 .. prefix{n-1}``."""
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"cluster size must be a positive integer, got {n!r}")
        devices = tuple(Device(f"{prefix}{i}", memory_bytes, speed) for i in range(n))
        return cls(devices, comm if comm is not None else CommModel(), name, memory_model)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def memory(self) -> np.ndarray:
        return np.array([d.memory_bytes for d in self.devices], dtype=np.int64)

    @property
    def speeds(self) -> np.ndarray:
        return np.array([d.speed for d in self.devices], dtype=np.float64)

    def device_index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise ConfigError(f"unknown device {name!r} (cluster has {self.device_names})")

    def with_memory(self, memory_bytes: int | Sequence[int]) -> Cluster:
        """The same cluster with other memory sizes (one for all devices, or one each)."""
        sizes = np.broadcast_to(np.asarray(memory_bytes), (self.num_devices,))
        return replace(self, devices=tuple(replace(d, memory_bytes=int(m))
                                           for d, m in zip(self.devices, sizes)))


def load_preset(name: str, **overrides) -> Cluster:
    """The cluster preset ``rlplace/conf/cluster/<name>.yaml`` (e.g. ``baechi_2080``), with overrides."""
    from rlplace.presets import load_preset as load

    return load("cluster", name, **overrides)


# ------------------------------------------------------------------ cluster files (data only)
# A cluster file has the format of ``rlplace/conf/cluster/`` (and of what ``rlplace-calibrate`` writes),
# but it is read as data: ``_target_`` may only name one of these constructors, each key is
# checked against its fields, and nothing is instantiated by name.
MAX_DEVICES = 4096
_HOMOGENEOUS = "rlplace.cluster.Cluster.homogeneous"
_CLUSTER = "rlplace.cluster.Cluster"
_DEVICE = "rlplace.cluster.Device"
_COMM = "rlplace.cluster.CommModel"
_FILE = "rlplace.cluster.load_cluster_file"
_FIELDS = {  # constructor: {key: kind}; "number" is an int or float, never a bool
    _HOMOGENEOUS: {"n": "int", "memory_bytes": "number", "speed": "number", "prefix": "str",
                   "name": "str", "memory_model": "str", "comm": "comm"},
    _CLUSTER: {"devices": "devices", "name": "str", "memory_model": "str", "comm": "comm"},
    _DEVICE: {"name": "str", "memory_bytes": "number", "speed": "number"},
    _COMM: {"latency": "number", "seconds_per_byte": "number", "mode": "str"},
    _FILE: {"path": "str"},
}
_OLD_NAMES = {"rlplace.presets.load_cluster_file": _FILE}  # in run configs saved before it moved
_HYDRA_KEYS = {"_convert_", "_recursive_"}  # written by older presets; they change nothing here


def load_cluster_file(path: str | Path) -> Cluster:
    """A cluster preset from a YAML file anywhere (``cluster=file cluster.path=...``), such as
    the calibrated preset ``rlplace-calibrate`` writes: read as data (``rlplace.datafile``) and
    built by ``cluster_from_data``, never instantiated. Every problem is a ConfigError naming
    the file and the key."""
    try:
        data = load_yaml_data(path, ConfigError, "cluster preset file")
    except ConfigError as exc:  # names the file already
        raise ConfigError(f"cluster.path: {exc}") from None
    try:
        return cluster_from_data(data, follow_files=False)
    except ConfigError as exc:
        raise ConfigError(f"cluster.path: {path}: {exc}") from None


def cluster_from_data(data: Any, follow_files: bool = True) -> Cluster:
    """The Cluster a preset's plain data describes: ``Cluster.homogeneous``'s arguments, or a
    ``Cluster``'s ``devices`` list, or (with ``follow_files``) a ``load_cluster_file`` node
    with its ``path``. ``_target_`` may be omitted; when given it must name one of these."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"not a cluster preset (a mapping of keys, got {_kind(data)})")
    target = data.get("_target_", _CLUSTER if "devices" in data else _HOMOGENEOUS)
    target = _OLD_NAMES.get(target, target) if isinstance(target, str) else target
    allowed = (_HOMOGENEOUS, _CLUSTER, _FILE) if follow_files else (_HOMOGENEOUS, _CLUSTER)
    if target not in allowed:
        raise ConfigError(f"_target_: {brief(target)} is not a cluster constructor (a cluster "
                          f"preset here names one of {', '.join(allowed)})")
    args = _arguments(data, target, "")
    if target == _FILE:
        return load_cluster_file(args["path"])
    if "comm" in args:
        args["comm"] = CommModel(**_arguments(args["comm"], _COMM, "comm."))
    if target == _CLUSTER:
        args["devices"] = tuple(Device(**_arguments(d, _DEVICE, f"devices[{i}]."))
                                for i, d in enumerate(args["devices"]))
        return Cluster(**args)
    if not 1 <= args["n"] <= MAX_DEVICES:
        raise ConfigError(f"n: must be an integer in [1, {MAX_DEVICES}], got {args['n']}")
    return Cluster.homogeneous(**args)


_REQUIRED = {_HOMOGENEOUS: ("n", "memory_bytes"), _CLUSTER: ("devices",), _DEVICE: ("name", "memory_bytes"),
             _FILE: ("path",)}


def _arguments(data: Any, target: str, prefix: str) -> dict:
    """``data``'s keys and values checked against ``target``'s fields: its keyword arguments."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.')}: must be a mapping of keys, got {_kind(data)}")
    given = data.get("_target_", target)
    if not isinstance(given, str) or _OLD_NAMES.get(given, given) != target:
        raise ConfigError(f"{prefix}_target_: must be {target} here, got {brief(given)}")
    fields = _FIELDS[target]
    args = {}
    for key, value in data.items():
        if key == "_target_" or key in _HYDRA_KEYS:
            continue
        if key not in fields:
            raise ConfigError(f"{prefix}{brief(key)}: not a key of {target} (known: {', '.join(fields)})")
        args[key] = _checked_value(value, fields[key], f"{prefix}{key}")
    for key in _REQUIRED.get(target, ()):
        if key not in args:
            raise ConfigError(f"{prefix}{key}: missing ({target} needs {', '.join(_REQUIRED[target])})")
    return args


def _checked_value(value: Any, kind: str, key: str) -> Any:
    ok = {"str": isinstance(value, str),
          "int": isinstance(value, int) and not isinstance(value, bool),
          "number": finite_number(value),
          "comm": isinstance(value, Mapping),
          "devices": isinstance(value, list) and 0 < len(value) <= MAX_DEVICES}[kind]
    if not ok:
        wanted = {"str": "a string", "int": "an integer", "number": "a finite number",
                  "comm": "a mapping (latency, seconds_per_byte, mode)",
                  "devices": f"a list of 1 to {MAX_DEVICES} devices"}[kind]
        raise ConfigError(f"{key}: must be {wanted}, got {brief(value)}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
