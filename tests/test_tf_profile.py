"""The profiler, Celeritas' Standard Evaluation regression and rlplace-profile end to end."""

import json
import subprocess

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlplace.errors import GraphError  # noqa: E402
from rlplace.graph import OpGraph  # noqa: E402
from rlplace.tf.profile import (fit_per_op, profile, relative_deviation,  # noqa: E402
                                standard_evaluation)
from rlplace.zoo import build_tf_model  # noqa: E402
from tests.test_tf_zoo import TINY  # noqa: E402


@pytest.fixture(scope="module")
def linreg_profile():
    return profile(build_tf_model("linear_regression", batch_size=64, features=256), warmup=2, steps=3)


def test_profile_measures_every_op(linreg_profile):
    g = linreg_profile.graph
    assert linreg_profile.measured_ops == g.num_ops
    assert np.all(g.compute_time > 0)
    assert linreg_profile.step_time > 0
    mm = g.index["MatMul"]
    assert g.output_bytes[mm][0] >= 64 * 4  # allocated, possibly rounded up
    assert g.persistent_bytes[g.index["Weight"]] == 256 * 4
    assert g.output_total.sum() + g.temporary_bytes.sum() > 0
    assert g.name == "linear_regression_b64"


def test_profile_keeps_the_extracted_structure(linreg_profile):
    from rlplace.tf.extract import extract

    shape_based = extract(build_tf_model("linear_regression", batch_size=64, features=256))
    g = linreg_profile.graph
    assert g.names == shape_based.names and g.edge_records() == shape_based.edge_records()
    assert g.colocation_group == shape_based.colocation_group
    np.testing.assert_array_equal(g.forward_op, shape_based.forward_op)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gnmt", "transformer", "bert", "tensor_holography", "inception_v3"])
def test_profile_every_zoo_model(name):
    result = profile(build_tf_model(name, **TINY[name]), warmup=1, steps=1)
    g = result.graph
    assert result.measured_ops == g.num_ops and np.all(g.compute_time > 0)
    assert g.output_total.sum() > 0


def test_fit_per_op_recovers_a_known_line():
    rng = np.random.default_rng(0)
    batches = np.array([1, 2, 4, 8])
    slope, intercept = rng.uniform(0, 100, 50), rng.uniform(0, 10, 50)
    values = np.outer(batches, slope) + intercept
    s, c = fit_per_op(batches, values + rng.normal(0, 1e-6, values.shape))
    np.testing.assert_allclose(s, slope, atol=1e-5)
    np.testing.assert_allclose(c, intercept, atol=1e-5)
    with pytest.raises(GraphError, match="two different batch sizes"):
        fit_per_op([4, 4], values[:2])


def test_relative_deviation_skips_zero_measurements():
    np.testing.assert_allclose(relative_deviation([1.1, 5.0, 0.0], [1.0, 0.0, 2.0]), [0.1, 1.0])


def test_standard_evaluation_predicts_batch_linear_memory():
    def build(batch):
        return build_tf_model("linear_regression", batch_size=batch, features=128)

    se = standard_evaluation(build, [8, 16, 32], 64, warmup=1, steps=2)
    p, m = se.predicted, se.measured
    assert p.name == "linear_regression_b64_predicted" and p.names == m.names
    for op in ("MatMul", "sub", "Square"):  # outputs of batch x 1 floats: exactly linear
        i = p.index[op]
        assert p.output_bytes[i] == m.output_bytes[i], op
    assert p.output_shapes[p.index["X"]] == [[64, 128]]
    assert se.memory_deviation is not None and 0 <= se.memory_deviation < 0.5
    assert se.time_deviation is not None and se.time_deviation >= 0
    assert se.ops_compared["time"] == p.num_ops


def run(cli, *args, cwd):
    return subprocess.run([*cli("profile"), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_rlplace_profile_end_to_end(rlplace_cli, tmp_path):
    proc = run(rlplace_cli, "model=gnmt", "model.batch_size=4", "model.seq_length=3", "model.hidden=8",
               "model.vocab_size=20", "warmup=1", "steps=2", "standard_eval.batch_sizes=[1,2]",
               f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    g = OpGraph.load(tmp_path / "run" / "gnmt_b4.json.gz")
    assert g.num_ops > 100 and np.all(g.compute_time > 0)
    assert {t for t in g.layer if t is not None} == {0, 1, 2, 3}
    predicted = OpGraph.load(tmp_path / "run" / "gnmt_b4_predicted.json.gz")
    assert predicted.names == g.names
    summary = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert summary["ops"] == g.num_ops and summary["standard_eval"]["target_batch"] == 4
    assert "gnmt_b4" in proc.stdout and "standard evaluation" in proc.stdout


@pytest.mark.parametrize("args,needle,one_line", [
    (["model.name=resnet"], "unknown model 'resnet'", True),
    (["+model.depth=3"], "model.depth", False),  # checked once TensorFlow has loaded (and logged)
    (["model=resnet"], "model=resnet: no such model config (options: bert, gnmt", True),
])
def test_bad_model_exits_2(rlplace_cli, tmp_path, args, needle, one_line):
    proc = run(rlplace_cli, *args, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("rlplace-profile: error:")
    if one_line:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
