"""TensorFlow's allocator statistics as rlplace.tf.measure reads them (the memory comparison of
experiments/tf_memory.py), in a fresh process: the CPU allocator keeps statistics only when
TF_CPU_ALLOCATOR_USE_BFC is set before TensorFlow starts."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rlplace.graph import OpGraph
from rlplace.schedule import Schedule, memory_peaks

SCRIPT = """
import json, sys
from rlplace.tf.devices import configure_devices
devices = configure_devices(2)
from rlplace.tf.extract import extract
from rlplace.tf.measure import measure
from rlplace.zoo import build_tf_model
model = build_tf_model(name="linear_regression", batch_size=8, features=64)
graph = extract(model)
raw = measure(model, {name: 0 for name in graph.names}, devices, warmup=1, steps=3, inter_op_threads=1,
              trace_ops=True)
graph.save(sys.argv[1])
print(json.dumps(raw))
"""


def run(tmp_path, bfc: bool) -> tuple[dict, OpGraph]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if bfc:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    path = tmp_path / "graph.json.gz"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1]), OpGraph.load(path)


@pytest.mark.slow
def test_allocator_peaks_are_the_steps_allocations_on_top_of_the_variables(tmp_path):
    raw, graph = run(tmp_path, bfc=True)
    assert len(raw["allocator_peaks"]) == len(raw["allocator_base"]) == 3
    # the variables (weights 64 x 1 floats, the step counter) are in use before every step
    assert all(base >= graph.persistent_bytes.sum() for base in raw["allocator_base"])
    # what the step adds is what its traced allocation records add (the BFC allocator rounds
    # each buffer up to 256 bytes)
    added = np.array(raw["allocator_peaks"]) - np.array(raw["allocator_base"])
    assert np.all(added >= raw["transient_peak"][0])
    assert np.all(added <= raw["transient_peak"][0] + 256 * graph.num_ops)
    # TensorFlow's own schedule of the traced step: every op, on device 0, ends after it starts
    trace = raw["op_trace"]
    assert set(graph.names) <= set(trace)  # and the runtime's own nodes (_SOURCE, _retval_...)
    spans = np.array([trace[name] for name in graph.names])
    assert np.all(spans[:, 0] == 0) and np.all(spans[:, 2] >= spans[:, 1])
    none = np.zeros(0, dtype=np.int64)
    schedule = Schedule(np.zeros(graph.num_ops, dtype=np.int64), spans[:, 1], spans[:, 2], none, none, none,
                        none, np.zeros(0), np.zeros(0), none, none)
    assert memory_peaks(graph, 1, schedule)[0] >= graph.persistent_bytes.sum()


@pytest.mark.slow
def test_without_allocator_statistics_there_are_none(tmp_path):
    raw, _ = run(tmp_path, bfc=False)
    assert raw["allocator_peaks"] is None and raw["allocator_base"] is None
    assert raw["transient_peak"][0] > 0
