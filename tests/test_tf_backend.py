"""TFBackend on 2 logical CPU devices, the interconnect fit, and rlplace-compare backend=tf."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from rlplace.backends import make_backend
from rlplace.cluster import Cluster
from rlplace.costs import op_costs
from rlplace.errors import BackendError, ConfigError, PlacementError
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.tf.comm import CommFit, cluster_yaml, fit_comm, preset_name

MODEL = dict(name="gnmt", batch_size=2, seq_length=3, hidden=8, vocab_size=20, num_layers=2)
CLUSTER = Cluster.homogeneous(2, 2**30, prefix="/device:CPU:", name="test_cpu")


# ------------------------------------------------------------------------ interconnect fit
def test_fit_comm_recovers_a_known_line():
    rng = np.random.default_rng(0)
    sizes = np.geomspace(4, 32 * 2**20, 14).astype(int)
    latency, per_byte = 25e-6, 1 / 12e9
    seconds = latency + per_byte * sizes
    fit = fit_comm(sizes, seconds * (1 + rng.normal(0, 1e-3, len(sizes))))
    assert fit.latency == pytest.approx(latency, rel=0.05)
    assert fit.seconds_per_byte == pytest.approx(per_byte, rel=0.01)
    assert 0.999 < fit.r2 <= 1.0
    exact = fit_comm(sizes, seconds)
    assert exact.r2 == pytest.approx(1.0) and exact.latency == pytest.approx(latency)


def test_fit_comm_reports_a_poor_fit_and_clips_the_model():
    fit = fit_comm([1, 2, 3, 4], [3e-6, 1e-6, 3e-6, 1e-6])  # no trend with size
    assert fit.r2 < 0.3 and fit.seconds_per_byte < 0
    assert fit.comm_model().seconds_per_byte == 0 and fit.comm_model().latency == pytest.approx(fit.latency)
    with pytest.raises(ConfigError, match="two or more different sizes"):
        fit_comm([8, 8], [1e-6, 2e-6])


def test_cluster_yaml_is_a_cluster_config():
    fit = CommFit(2e-6, 1e-10, 0.9, (4, 400), (2e-6, 2.04e-6))
    cluster = instantiate(OmegaConf.create(cluster_yaml(fit, 2, 2**30, "/device:CPU:", "fitted")))
    assert cluster.device_names == ["/device:CPU:0", "/device:CPU:1"] and cluster.name == "fitted"
    assert cluster.comm.latency == pytest.approx(2e-6) and cluster.comm.seconds_per_byte == pytest.approx(1e-10)
    assert int(cluster.memory[0]) == 2**30


def test_committed_fit_loads():
    from rlplace.cluster import load_preset

    cluster = load_preset("local_cpu_fitted")
    assert cluster.num_devices == 2 and cluster.comm.latency > 0


# ------------------------------------------------------------------------ the backend
def test_backend_tf_is_registered_without_importing_tensorflow():
    code = ("import sys; from rlplace.backends import make_backend; from rlplace.learn.env import PlacementEnv; "
            f"b = make_backend('tf', model={MODEL!r}); assert not b.simulated; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("options,needle", [
    (dict(model={"name": "resnet"}), "model.name"), (dict(model=MODEL, steps=0), "steps >= 1"),
    (dict(model=MODEL, step_time_limit=0), "step_time_limit"), (dict(modell=MODEL), "bad options"),
])
def test_bad_options_are_config_errors(options, needle):
    with pytest.raises(ConfigError, match=needle):
        make_backend("tf", **options)


tf = pytest.importorskip("tensorflow")

from rlplace.tf.extract import extract  # noqa: E402
from rlplace.zoo import build_tf_model  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return extract(build_tf_model(**MODEL))


@pytest.fixture(scope="module")
def backend():
    b = make_backend("tf", model=MODEL, warmup=1, steps=2)
    yield b
    b.close()


def place(name, graph, **options):
    return make_placer(name, **options).place(graph, CLUSTER)


def test_measures_three_placements(backend, graph):
    results = {name: backend.evaluate(graph, CLUSTER, place(name, graph))
               for name in ("single", "expert", "round_robin")}
    assert backend.measurements == 3
    for name, r in results.items():
        assert 0 < r.step_time < 60 and not r.oom and not r.timed_out, name
        assert r.peak_memory.shape == (2,) and r.busy_time.shape == (2,)
    single, expert, rr = results["single"], results["expert"], results["round_robin"]
    assert single.num_transfers == 0 and single.peak_memory[1] == 0 and single.busy_time[1] == 0
    assert single.peak_memory[0] > graph.persistent_bytes.sum()  # plus what the step allocates
    assert 0 < expert.num_transfers < rr.num_transfers
    assert np.all(rr.peak_memory > 0) and np.all(rr.busy_time > 0)


def test_repeated_placements_come_from_the_cache(backend, graph):
    p = place("random", graph, seed=1)
    first = backend.evaluate(graph, CLUSTER, p)
    measured, hits = backend.measurements, backend.cache_hits
    again = backend.evaluate(graph, CLUSTER, Placement(p.device_of.copy()))
    assert again is first and backend.measurements == measured and backend.cache_hits == hits + 1


def test_declared_memory_limit_gives_an_oom(backend, graph):
    small = CLUSTER.with_memory(int(graph.persistent_bytes.sum()) + 1)  # no room for activations
    r = backend.evaluate(graph, small, place("single", graph))
    assert r.oom and r.oom_devices == (0,) and r.peak_memory[0] > small.memory[0]
    assert 0 < r.step_time < 60  # the step ran; only the declared limit is exceeded


def test_split_colocation_group_is_rejected_before_tensorflow(graph):
    b = make_backend("tf", model=MODEL)
    group = next(iter(graph.colocation_groups.values()))
    device_of = np.zeros(graph.num_ops, dtype=np.int64)
    device_of[group[0]] = 1
    with pytest.raises(PlacementError, match="is split"):
        b.evaluate(graph, CLUSTER, Placement(device_of))
    assert b.worker_pid is None and b.measurements == 0  # no worker was even started


def test_a_graph_of_another_model_is_refused(backend):
    other = extract(build_tf_model(**{**MODEL, "num_layers": 3}))
    with pytest.raises(BackendError, match="not the training step"):
        backend.evaluate(other, CLUSTER, place("single", other))


@pytest.mark.slow
def test_survives_a_worker_crash(backend, graph):
    before = backend.evaluate(graph, CLUSTER, place("random", graph, seed=2))
    pid = backend.worker_pid
    os.kill(pid, signal.SIGKILL)
    after = backend.evaluate(graph, CLUSTER, place("random", graph, seed=3))
    assert 0 < after.step_time < 60 and backend.restarts == 1
    assert backend.worker_pid not in (None, pid)
    assert backend.evaluate(graph, CLUSTER, place("random", graph, seed=2)) is before  # kept


@pytest.mark.slow
def test_a_step_over_the_limit_is_stopped(graph):
    with make_backend("tf", model=MODEL, warmup=1, steps=2, step_time_limit=1e-6) as b:
        r = b.evaluate(graph, CLUSTER, place("round_robin", graph))
    assert r.timed_out and r.step_time >= 1e-6 and not r.oom
    assert r.as_dict()["timed_out"] is True


@pytest.mark.slow
def test_time_transfers_in_the_worker(backend):
    times = backend.time_transfers(CLUSTER, sizes=[4, 4096, 2**20], hops=4, repeats=3)
    assert times.sizes == (4, 4096, 2**20) and len(times.seconds) == 3
    assert all(np.isfinite(times.seconds)) and np.isfinite(times.step_overhead)


@pytest.mark.slow
def test_rlplace_compare_backend_tf(rlplace_cli, tmp_path):
    knobs = [f"graph.model.{k}={v}" for k, v in MODEL.items()]
    proc = subprocess.run([*rlplace_cli("compare"), "graph=tf_model", *knobs, "graph.warmup=1",
                           "graph.steps=1", "backend=tf", "backend.options.warmup=1",
                           "backend.options.steps=2", "cluster=local_cpu", "placers=[single,expert]",
                           "plots=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    records = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [r["placer"] for r in records] == ["single", "expert"]
    assert all(0 < r["step_time"] < 60 and not r["timed_out"] for r in records)
    assert records[0]["num_transfers"] == 0 < records[1]["num_transfers"]


def test_compare_backend_tf_needs_a_model(rlplace_cli, tmp_path):
    proc = subprocess.run([*rlplace_cli("compare"), "graph=chain", "backend=tf", "cluster=local_cpu",
                           "placers=[single]", "plots=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "options.model is missing" in proc.stderr, proc.stderr


# ------------------------------------------------------------------------ model sources
TINY_KERAS = '''
import keras


def build(width=4):
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))
'''


@pytest.fixture
def tiny_source(tmp_path, monkeypatch):
    (tmp_path / "tiny_keras_model.py").write_text(TINY_KERAS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"name": "tiny_keras_model:build", "batch_size": 2, "loss": "auto", "learning_rate": 0.01,
            "args": {"width": 4}}


def test_backend_tf_measures_a_keras_model_from_a_module_path(tiny_source):
    from rlplace.import_.keras import from_keras

    imported = from_keras(tiny_source["name"], batch_size=2, args={"width": 4})
    assert imported.source == tiny_source
    g = imported.graph
    assert "DepthwiseConv2dNative" in g.op_type and op_costs(g).unknown_types == {}
    with make_backend("tf", model=imported.source, warmup=1, steps=1) as b:
        for name in ("single", "m_etf"):
            result = b.evaluate(g, CLUSTER, place(name, g))
            assert result.step_time > 0 and not result.oom


@pytest.mark.parametrize("model,needle", [
    ({"name": "missing.keras"}, "no such Keras file"), ({"name": "mod:build", "hidden": 3}, "model.hidden"),
    ({"name": ":build"}, "is not 'package.module:function'"), ({"name": "resnet"}, "a zoo model"),
])
def test_bad_model_sources_are_config_errors_before_tensorflow_runs(model, needle):
    with pytest.raises(ConfigError, match=needle):
        make_backend("tf", model=model)


def test_a_module_path_that_does_not_import_is_a_config_error():
    from rlplace.tf.sources import build_model

    with pytest.raises(ConfigError, match="cannot import 'no_such_module_xyz'"):
        build_model({"name": "no_such_module_xyz:build"})


def test_a_fitted_preset_is_named_after_its_file():
    from pathlib import Path

    assert preset_name(None, Path("conf/cluster/my_box.yaml")) == "my_box"
    assert preset_name("lab", Path("conf/cluster/my_box.yaml")) == "lab"
    assert preset_name(None, None) == "local_cpu_fitted"


@pytest.mark.parametrize("args, needle", [(["--devices", "1"], "--devices must be >= 2"),
                                          (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
                                          (["--output", "/proc/no/such.yaml"], "--output /proc/no/such.yaml: cannot "
                                                                              "make its folder (No such file or directory)"),
                                          (["--output", "/"], "--output /: not a file this user can write")])
def test_the_comm_benchmark_takes_bad_arguments_as_one_line(args, needle):
    """``python -m rlplace.tf.comm`` (before: argparse's usage line and the error, two lines)."""
    done = subprocess.run([sys.executable, "-m", "rlplace.tf.comm", *args], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"python -m rlplace.tf.comm: error: {needle} (--help lists the arguments)"]
