"""Devices and the interconnect: Device, CommModel, Cluster.

Transfer time follows the linear model of Baechi, Celeritas and Pesto:
``t = latency + bytes * seconds_per_byte``. ``mode`` says whether a device may move several
tensors at once (``parallel``) or owns one send and one receive channel served first come first
served (``sequential``, Baechi §3.4). ``memory_model`` says how buffers are counted
(``rlplace.schedule.aliases``): ``default`` gives every output its own buffer (DESIGN.md's
rules); ``tf_reuse`` follows TensorFlow's executor, where an output may share an input's buffer
(views, in-place forwarding). Presets of the papers' machines are Hydra configs in
``conf/cluster/``; ``load_preset`` reads one from Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

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
    """The cluster preset ``conf/cluster/<name>.yaml`` (e.g. ``baechi_2080``), with overrides."""
    from rlplace.presets import load_preset as load

    return load("cluster", name, **overrides)
