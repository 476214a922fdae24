"""Measure one placement of a zoo model's training step on real TensorFlow devices
(Hierarchical Planner §4: warm-up steps, then the median of the next steps).

``measure`` sets every step op's device (``op._set_device``; the ops TensorFlow adds outside
the step, such as initializers, follow their colocation group or default to device 0), opens a
fresh session, initialises the variables and runs ``warmup`` then ``steps`` training steps.

* A real out-of-memory error (``ResourceExhaustedError``) ends the measurement as an OOM, on the
  devices its message names (all devices when it names none).
* With ``step_time_limit``, every step runs with that deadline (``RunOptions.timeout_in_ms``);
  a step that exceeds it stops the measurement (Mars §3.4). The first step includes TensorFlow's
  one-time set-up (partitioning, kernel creation), so a limit near the step time can stop it.
* After the timed steps one traced step (``FULL_TRACE``) gives per device the peak of the bytes
  the step's ops allocate and free (their allocation records, replayed in time order) and the
  busy time (the sum of its ops' ``all_end_rel_micros``). Persistent memory (variables, held
  from initialisation) is not in these records; the backend adds it from the OpGraph.
  With ``trace_ops`` it also gives each op's device, start and end in that step (TensorFlow's
  own schedule, ``op_trace``).
* Where the allocator keeps statistics (GPUs; CPUs with ``TF_CPU_ALLOCATOR_USE_BFC=true`` set
  before TensorFlow starts), each timed step's peak bytes in use (``allocator_peaks``,
  ``tf.config.experimental.reset_memory_stats`` before the step, ``get_memory_info`` after) and
  the bytes in use before it (``allocator_base``: variables and what the session keeps), per
  allocator: logical CPU devices share one, so these are the process's, not a device's. With
  oneDNN on and no BFC, TensorFlow's CPU allocator answers ``get_memory_info`` with zeros; an
  allocator that reports nothing in use once the variables are initialised keeps no statistics.

The result is a plain dict, so the process that asked needs no TensorFlow to read it.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from rlplace.tf.builder import TFModel
from rlplace.tf.devices import device_index, device_session_config
from rlplace.tf.profile import ARG_NODE

v1 = tf.compat.v1


def apply_placement(model: TFModel, device_of: dict[str, int], devices: Sequence[str]) -> None:
    for name, d in device_of.items():
        model.graph.get_operation_by_name(name)._set_device(devices[d])


def measure(model: TFModel, device_of: dict[str, int], devices: Sequence[str], warmup: int = 5,
            steps: int = 5, step_time_limit: float | None = None, inter_op_threads: int = 1,
            intra_op_threads: int = 1, seed: int = 0, trace_ops: bool = False) -> dict[str, Any]:
    """Run the placed training step; returns ``step_time`` (median of the timed steps, or the
    time of the step that hit the limit), ``step_times``, ``timed_out``, ``oom``,
    ``oom_devices``, ``transient_peak`` and ``busy_time`` (per device), ``allocator_peaks`` and
    ``allocator_base`` (None where the allocator keeps no statistics) and, with ``trace_ops``,
    ``op_trace`` ({op name: [device, start s, end s]})."""
    apply_placement(model, device_of, devices)
    n = len(devices)
    result: dict[str, Any] = {"step_time": float("inf"), "step_times": [], "timed_out": False,
                              "oom": False, "oom_devices": [], "transient_peak": [0] * n,
                              "busy_time": None, "allocator_peaks": None, "allocator_base": None}
    stats = devices[0] if _has_allocator_stats(devices[0]) else None
    options = v1.RunOptions()
    if step_time_limit is not None:
        options.timeout_in_ms = max(1, int(np.ceil(step_time_limit * 1e3)))
    fetches, feeds = [model.train_op, model.loss], model.feed_dict(seed)
    config = device_session_config(inter_op_threads, intra_op_threads)
    try:
        with v1.Session(graph=model.graph, config=config) as sess:
            sess.run(model.init_op)
            if stats is not None and tf.config.experimental.get_memory_info(stats)["current"] == 0:
                stats = None  # an allocator that reports no bytes under the variables keeps no statistics
            for k in range(warmup + steps):
                if stats is not None and k == warmup:
                    result.update(allocator_peaks=[], allocator_base=[])
                if stats is not None and k >= warmup:
                    tf.config.experimental.reset_memory_stats(stats)
                    result["allocator_base"].append(tf.config.experimental.get_memory_info(stats)["current"])
                start = time.perf_counter()
                try:
                    sess.run(fetches, feeds, options=options)
                except tf.errors.DeadlineExceededError:
                    result.update(step_time=max(time.perf_counter() - start, step_time_limit),
                                  timed_out=True)
                    return result
                if k >= warmup:
                    result["step_times"].append(time.perf_counter() - start)
                    if stats is not None:
                        result["allocator_peaks"].append(tf.config.experimental.get_memory_info(stats)["peak"])
            result["step_time"] = float(np.median(result["step_times"]))
            metadata = v1.RunMetadata()
            sess.run(fetches, feeds, options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
                     run_metadata=metadata)
            result["transient_peak"], result["busy_time"] = _per_device(metadata, devices)
            if trace_ops:
                result["op_trace"] = op_trace(metadata, devices)
    except tf.errors.ResourceExhaustedError as exc:
        named = sorted({i for i in (device_index(w, devices) for w in exc.message.split())
                        if i is not None})
        result.update(oom=True, oom_devices=named or list(range(n)))
    return result


def _has_allocator_stats(device: str) -> bool:
    try:
        tf.config.experimental.get_memory_info(device)
    except ValueError:  # "Allocator stats not available"
        return False
    return True


def op_trace(metadata, devices: Sequence[str]) -> dict[str, list]:
    """{op name: [device index, start, end]} of a traced step, in seconds from its first op;
    a fed placeholder runs as ``_arg_<name>_0_<k>``."""
    spans = {}
    for dev in metadata.step_stats.dev_stats:
        d = device_index(dev.device, devices)
        if d is None or "/stream:" in dev.device or "/memcpy" in dev.device:
            continue
        for node in dev.node_stats:
            match = ARG_NODE.match(node.node_name)
            start = node.all_start_micros * 1e-6
            spans[match.group(1) if match else node.node_name] = [d, start, start + node.all_end_rel_micros * 1e-6]
    first = min((s for _, s, _ in spans.values()), default=0.0)
    return {name: [d, s - first, e - first] for name, (d, s, e) in spans.items()}


def _per_device(metadata, devices: Sequence[str]) -> tuple[list[int], list[float]]:
    events: list[list[tuple[int, int]]] = [[] for _ in devices]
    busy = [0.0] * len(devices)
    for dev in metadata.step_stats.dev_stats:
        d = device_index(dev.device, devices)
        if d is None or "/stream:" in dev.device or "/memcpy" in dev.device:
            continue
        for node in dev.node_stats:
            busy[d] += node.all_end_rel_micros * 1e-6
            for mem in node.memory:
                events[d].extend((r.alloc_micros, r.alloc_bytes) for r in mem.allocation_records)
    peaks = []
    for ev in events:
        ev.sort()  # at one instant frees (negative) first: the peak is not overstated
        live = np.cumsum([b for _, b in ev]) if ev else np.zeros(1)
        peaks.append(int(max(live.max(), 0)))
    return peaks, busy
