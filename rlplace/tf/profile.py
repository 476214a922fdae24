"""Profile a zoo model on one device into an OpGraph (Baechi §4.1, §5: five traced steps after
five warm-up steps), and Celeritas' Standard Evaluation (§4.2.1): per-op linear regression of
memory and time over small batch sizes, predicting a large batch.

Per op and traced step (``RunMetadata.step_stats`` with ``FULL_TRACE``):

* compute time: ``all_end_rel_micros`` (from the op's start to the end of its bookkeeping),
  averaged over the traced steps, at least 1 µs (Baechi's floor);
* memory: the bytes the op allocated (its allocation records, ``memory[].total_bytes``) are
  its outputs' ``allocated_bytes`` in port order as far as they go, the rest is temporary
  (scratch freed when the op ends); an output the op did not allocate (a forwarded or aliased
  input buffer) takes no new memory. The maximum over the traced steps is kept (as Baechi's
  cost model does). Persistent memory is ``memory_stats.persistent_memory_size`` or, for
  variables (allocated by the initializer, not the step), the variable's size.

Placeholders fed by the session run as ``_arg_<name>_0_<k>``; their outputs keep their shape's
size. Ops missing from the trace keep 1 µs and their shape-based sizes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from rlplace.errors import GraphError
from rlplace.graph import OpGraph
from rlplace.tf.builder import TFModel, session_config
from rlplace.tf.extract import op_records

v1 = tf.compat.v1
MIN_COMPUTE_TIME = 1e-6  # seconds
ARG_NODE = re.compile(r"^_arg_(.+)_0_\d+$")  # a fed placeholder as it runs


@dataclass
class OpMeasure:
    """What the traces say about one op (seconds and bytes)."""

    compute_times: list[float] = field(default_factory=list)
    output_bytes: list[int] = field(default_factory=list)
    temporary_bytes: int = 0
    persistent_bytes: int = 0


@dataclass
class Profile:
    graph: OpGraph
    step_time: float  # median wall-clock time of the traced steps, seconds
    traced_steps: int
    measured_ops: int  # ops of the graph seen in the traces


def trace(model: TFModel, warmup: int = 5, steps: int = 5, inter_op_threads: int = 1,
          intra_op_threads: int = 0, seed: int = 0) -> tuple[list[Any], list[float]]:
    """Run ``warmup`` untraced steps, then ``steps`` fully traced ones on the default device;
    returns their ``RunMetadata`` and wall-clock times."""
    if steps < 1 or warmup < 0:
        raise GraphError(f"{model.name}: need steps >= 1 and warmup >= 0, got {steps} and {warmup}")
    options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
    feeds = model.feed_dict(seed)
    fetches = [model.train_op, model.loss]  # a training loop reads the loss too
    metadata, times = [], []
    config = session_config(inter_op_threads, intra_op_threads)
    with v1.Session(graph=model.graph, config=config) as sess:
        sess.run(model.init_op)
        for _ in range(warmup):
            sess.run(fetches, feeds)
        for _ in range(steps):
            md = v1.RunMetadata()
            start = time.perf_counter()
            sess.run(fetches, feeds, options=options, run_metadata=md)
            times.append(time.perf_counter() - start)
            metadata.append(md)
    return metadata, times


def parse_step_stats(metadata: list[Any]) -> dict[str, OpMeasure]:
    """Per-op measurements from the step stats of several traced steps."""
    measures: dict[str, OpMeasure] = {}
    for md in metadata:
        for dev in md.step_stats.dev_stats:
            if "/stream:" in dev.device or "/memcpy" in dev.device:
                continue  # GPU kernel streams: not read yet (CPU profiles only)
            for node in dev.node_stats:
                match = ARG_NODE.match(node.node_name)
                name = match.group(1) if match else node.node_name
                m = measures.setdefault(name, OpMeasure())
                m.compute_times.append(node.all_end_rel_micros * 1e-6)
                allocated = sum(mem.total_bytes for mem in node.memory)
                outputs = [0] * (max((o.slot for o in node.output), default=-1) + 1)
                for o in node.output:
                    take = min(o.tensor_description.allocation_description.allocated_bytes, allocated)
                    outputs[o.slot] = take
                    allocated -= take
                width = max(len(m.output_bytes), len(outputs))
                m.output_bytes = [max(a, b) for a, b in zip(m.output_bytes + [0] * (width - len(m.output_bytes)),
                                                            outputs + [0] * (width - len(outputs)))]
                m.temporary_bytes = max(m.temporary_bytes, allocated, node.memory_stats.temp_memory_size)
                m.persistent_bytes = max(m.persistent_bytes, node.memory_stats.persistent_memory_size)
    return measures


def apply_measures(records: list[dict[str, Any]], measures: dict[str, OpMeasure]) -> int:
    """Overlay measured costs on extracted op records (in place); returns how many matched."""
    matched = 0
    for rec in records:
        m = measures.get(rec["name"])
        if m is None:
            rec["compute_time"] = MIN_COMPUTE_TIME
            continue
        matched += 1
        rec["compute_time"] = max(float(np.mean(m.compute_times)), MIN_COMPUTE_TIME)
        rec["temporary_bytes"] = int(m.temporary_bytes)
        rec["persistent_bytes"] = max(rec["persistent_bytes"], int(m.persistent_bytes))
        if rec["op_type"] != "Placeholder":
            out = rec["output_bytes"]
            held = rec["persistent_bytes"]  # outputs stored in the persistent buffer count once
            for k in range(len(out)):
                b = m.output_bytes[k] if k < len(m.output_bytes) else 0
                out[k] = b - min(b, held)
                held -= min(b, held)
    return matched


def profile(model: TFModel, warmup: int = 5, steps: int = 5, inter_op_threads: int = 1,
            intra_op_threads: int = 0, seed: int = 0, name: str | None = None) -> Profile:
    """The OpGraph of ``model`` with measured per-op compute time and memory."""
    metadata, times = trace(model, warmup, steps, inter_op_threads, intra_op_threads, seed)
    records, edges = op_records(model)
    matched = apply_measures(records, parse_step_stats(metadata))
    graph = OpGraph.from_records(records, edges, name=name or f"{model.name}_b{model.batch_size}")
    return Profile(graph, float(np.median(times)), steps, matched)


# ------------------------------------------------------------------ Standard Evaluation
def fit_per_op(batch_sizes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares line per column: ``values[k, j] ≈ slope[j] * batch_sizes[k] + intercept[j]``."""
    x = np.asarray(batch_sizes, dtype=np.float64)
    if len(np.unique(x)) < 2:
        raise GraphError("standard evaluation needs at least two different batch sizes")
    design = np.column_stack([x, np.ones_like(x)])
    (slope, intercept), *_ = np.linalg.lstsq(design, np.asarray(values, dtype=np.float64), rcond=None)
    return slope, intercept


def relative_deviation(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted - measured| / measured for the entries with measured > 0 (Celeritas Table 5)."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    keep = measured > 0
    return np.abs(predicted[keep] - measured[keep]) / measured[keep]


@dataclass
class StandardEvaluation:
    batch_sizes: list[int]
    target_batch: int
    predicted: OpGraph  # the target batch's graph with regressed costs
    measured: OpGraph | None  # its profile, when measured
    memory_deviation: float | None  # mean per-op relative deviation of output + temporary bytes
    time_deviation: float | None  # mean per-op relative deviation of compute time
    ops_compared: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"batch_sizes": self.batch_sizes, "target_batch": self.target_batch,
                "memory_deviation": self.memory_deviation, "time_deviation": self.time_deviation,
                "ops_compared": self.ops_compared}


def standard_evaluation(build: Callable[[int], TFModel], batch_sizes: list[int], target_batch: int,
                        measure: bool = True, **profile_options: Any) -> StandardEvaluation:
    """Celeritas §4.2.1: profile ``build(b)`` for each small ``b``, fit per-op lines for compute
    time, temporary bytes and each output's bytes, and predict them at ``target_batch`` on the
    target graph's structure (built, not run). With ``measure``, profile the target batch too
    and report the mean per-op relative deviations."""
    profiles = [profile(build(b), **profile_options).graph for b in batch_sizes]
    target_model = build(target_batch)
    records, edges = op_records(target_model)
    names = [r["name"] for r in records]
    for b, g in zip(batch_sizes, profiles):
        differ = sorted(set(g.names) ^ set(names))
        if differ:
            raise GraphError(f"standard evaluation: op {differ[0]!r} is in only one of the graphs at "
                             f"batch {b} and {target_batch}: the graph's structure depends on the batch size (batch 1 "
                             f"drops broadcast reductions)")
    rows = [[g.index[n] for n in names] for g in profiles]

    def regress(per_graph: Callable[[OpGraph, list[int]], np.ndarray]) -> np.ndarray:
        values = np.stack([per_graph(g, r) for g, r in zip(profiles, rows)])
        slope, intercept = fit_per_op(batch_sizes, values)
        return np.maximum(slope * target_batch + intercept, 0.0)

    compute = regress(lambda g, r: g.compute_time[r])
    temporary = regress(lambda g, r: g.temporary_bytes[r])
    ports = [len(r["output_bytes"]) for r in records]
    flat_out = regress(lambda g, r: np.array([b for i in r for b in g.output_bytes[i]], dtype=float))
    offsets = np.cumsum([0] + ports)
    for j, rec in enumerate(records):
        rec["compute_time"] = max(float(compute[j]), MIN_COMPUTE_TIME)
        rec["temporary_bytes"] = int(round(temporary[j]))
        rec["persistent_bytes"] = int(max(g.persistent_bytes[r[j]] for g, r in zip(profiles, rows)))
        rec["output_bytes"] = [int(round(b)) for b in flat_out[offsets[j]:offsets[j + 1]]]
    predicted = OpGraph.from_records(records, edges, name=f"{target_model.name}_b{target_batch}_predicted")
    if not measure:
        return StandardEvaluation(list(batch_sizes), target_batch, predicted, None, None, None)

    measured = profile(target_model, **profile_options).graph
    order = [measured.index[n] for n in predicted.names]
    mem_p = predicted.output_total + predicted.temporary_bytes
    mem_m = (measured.output_total + measured.temporary_bytes)[order]
    mem_dev = relative_deviation(mem_p, mem_m)
    time_dev = relative_deviation(predicted.compute_time, measured.compute_time[order])
    return StandardEvaluation(list(batch_sizes), target_batch, predicted, measured,
                              float(mem_dev.mean()) if len(mem_dev) else 0.0,
                              float(time_dev.mean()) if len(time_dev) else 0.0,
                              {"memory": int(len(mem_dev)), "time": int(len(time_dev))})
