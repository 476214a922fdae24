"""backend=torch (issue 43 item 2): a placement of a PyTorch model's training step, measured by
running the step with the placement's device_map (all devices ``cpu`` here; the GPU run is in
experiments/results when a GPU was lent)."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from rlplace.backends import make_backend
from rlplace.cluster import load_preset
from rlplace.errors import BackendError, ConfigError
from rlplace.import_.torch_model import build_model, model_graph
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.sim import simulate

SPEC = {"name": "rlplace.zoo.torch_models:mlp", "args": {"batch_size": 8, "features": 16, "hidden": 32, "layers": 3}}
CLUSTER = load_preset("local_cpu")


@pytest.fixture(scope="module")
def graph():
    return model_graph(SPEC, costs="analytical")


def backend(**options):
    return make_backend("torch", model=SPEC, warmup=1, steps=3, threads=1, **options)


def test_a_placement_is_measured_with_the_simulators_memory_and_transfers_on_cpu_devices(graph):
    measuring = backend()
    placement = make_placer("expert").place(graph, CLUSTER)
    assert len(set(placement.device_of.tolist())) == 2  # a real split of the modules
    result = measuring.evaluate(graph, CLUSTER, placement)
    simulated = simulate(graph, CLUSTER, placement)
    assert 0 < result.step_time < 10 and not result.oom and not result.timed_out
    assert result.step_time != simulated.step_time  # measured, not simulated
    np.testing.assert_array_equal(result.peak_memory, simulated.peak_memory)
    assert (result.num_transfers, result.transfer_bytes) == (simulated.num_transfers, simulated.transfer_bytes)
    assert measuring.evaluate(graph, CLUSTER, placement) is result
    assert (measuring.measurements, measuring.cache_hits) == (1, 1)


def test_the_cluster_memory_limits_what_fits(graph):
    small = dataclasses.replace(CLUSTER, devices=tuple(dataclasses.replace(d, memory_bytes=1000)
                                                       for d in CLUSTER.devices))
    result = backend().evaluate(graph, small, Placement(np.zeros(graph.num_ops, dtype=np.int64)))
    assert result.oom and result.oom_devices == (0,)


def test_a_step_over_the_limit_stops_the_measurement(graph):
    result = backend(step_time_limit=1e-9).evaluate(graph, CLUSTER, Placement(np.zeros(graph.num_ops, dtype=np.int64)))
    assert result.timed_out and result.step_time > 1e-9


def test_the_measured_model_is_the_graphs(graph):
    other = model_graph({**SPEC, "args": {**SPEC["args"], "layers": 2}}, costs="none")
    with pytest.raises(BackendError, match="is not the training step of model"):
        backend().evaluate(other, CLUSTER, Placement(np.zeros(other.num_ops, dtype=np.int64)))
    with pytest.raises(ConfigError, match="devices named"):
        backend(devices=["cpu"]).evaluate(graph, CLUSTER, Placement(np.zeros(graph.num_ops, dtype=np.int64)))


@pytest.mark.parametrize("options, message", [
    ({"warmup": -1}, "warmup"), ({"steps": 0}, "steps"), ({"threads": 0}, "threads"),
    ({"step_time_limit": 0}, "step_time_limit"), ({"model": {"name": "no_colon"}}, "package.module:function"),
    ({"model": {**SPEC, "batch": 3}}, "model.batch"),
])
def test_bad_options_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        make_backend("torch", **{"model": SPEC, **options})


def test_a_model_source_that_returns_something_else_is_refused():
    with pytest.raises(ConfigError, match="must return"):
        build_model({"name": "rlplace.zoo.torch_models:nn.Linear", "args": {"in_features": 2, "out_features": 2}})


def test_rlplace_compare_measures_placements_with_backend_torch(tmp_path):
    args = ["graph=torch_model", "graph.costs=analytical", "graph.model.args.hidden=32", "backend=torch",
            "backend.options.threads=1", "backend.options.steps=2", "cluster=local_cpu", "placers=[single,expert]",
            "plots=false", f"hydra.run.dir={tmp_path}"]
    subprocess.run([sys.executable, "-m", "rlplace.apps.compare", *args], check=True, capture_output=True)
    results = {r["placer"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert set(results) == {"single", "expert"}
    assert all(0 < r["step_time"] < 10 for r in results.values())
