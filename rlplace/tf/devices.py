"""The devices a measuring process places ops on, fixed once at start-up (TensorFlow allows
no change after its runtime initialises; hence the worker process of ``rlplace.tf.worker``).

* No GPU: ``num_devices`` logical CPU devices (``tf.config.set_logical_device_configuration``);
  they share the process's cores and its one CPU allocator.
* GPUs and no ``memory_limits``: the first ``num_devices`` physical GPUs.
* GPUs with ``memory_limits`` (bytes, one per device): logical GPUs with that ``memory_limit``,
  spread round-robin over the physical GPUs, so a placement that needs more memory fails with
  a real ``ResourceExhaustedError``.
"""

from __future__ import annotations

import re
from typing import Sequence

import tensorflow as tf

from rlplace.errors import ConfigError
from rlplace.tf.builder import session_config

v1 = tf.compat.v1
_DEVICE = re.compile(r"device:([A-Za-z_]+):(\d+)")


def configure_devices(num_devices: int, memory_limits: Sequence[int] | None = None) -> list[str]:
    """Set up the devices; returns their names (``/device:CPU:i`` or ``/device:GPU:i``),
    device index ``i`` of a Placement going to name ``i``."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
        return [f"/device:CPU:{i}" for i in range(num_devices)]
    if memory_limits is None:
        if len(gpus) < num_devices:
            raise ConfigError(f"backend tf: the cluster has {num_devices} devices but this machine "
                              f"{len(gpus)} GPUs; set logical_gpus=true to split them")
        tf.config.set_visible_devices(gpus[:num_devices], "GPU")
    else:
        per_gpu: list[list[tf.config.LogicalDeviceConfiguration]] = [[] for _ in gpus]
        for i, limit in enumerate(memory_limits):
            per_gpu[i % len(gpus)].append(tf.config.LogicalDeviceConfiguration(memory_limit=limit // 2**20))
        used = [g for g, configs in zip(gpus, per_gpu) if configs]
        tf.config.set_visible_devices(used, "GPU")
        for gpu, configs in zip(used, per_gpu):
            tf.config.set_logical_device_configuration(gpu, configs)
    return [f"/device:GPU:{i}" for i in range(num_devices)]


def device_session_config(inter_op_threads: int, intra_op_threads: int) -> v1.ConfigProto:
    """``builder.session_config`` on the configured devices: a ``tf.compat.v1.Session`` given
    its own config ignores ``tf.config``'s logical devices unless they are merged in."""
    from tensorflow.python.eager import context

    config = v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.MergeFrom(session_config(inter_op_threads, intra_op_threads))
    config.allow_soft_placement = False  # MergeFrom keeps the context's True
    return config


def device_index(name: str, devices: Sequence[str]) -> int | None:
    """Index in ``devices`` of a runtime device name (``/job:localhost/.../device:CPU:1``)."""
    match = _DEVICE.search(name)
    if match is None:
        return None
    short = f"/device:{match.group(1).upper()}:{match.group(2)}"
    return devices.index(short) if short in devices else None
