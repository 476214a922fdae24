"""Real measurement in the loop (rlplace.verify): the simulator answers, the top-k is measured.

The "real" backend here is the simulator on another cluster (a slower interconnect), counting
its calls, so the tests know what the measurement of every placement is."""

import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from rlplace.backends import Backend, SimBackend
from rlplace.cluster import Cluster, CommModel
from rlplace.errors import ConfigError
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.sim import simulate
from rlplace.verify import VerifyingBackend
from rlplace.zoo.synthetic import layered

GRAPH = layered(60, seed=3)
CLUSTER = Cluster.homogeneous(3, 2**34, comm=CommModel(latency=1e-5, seconds_per_byte=1e-10), name="model")
TRUE = Cluster.homogeneous(3, 2**34, comm=CommModel(latency=4e-4, seconds_per_byte=1e-9), name="real")


@dataclass
class Measured(Backend):
    """A measuring backend: the simulator on the TRUE cluster; it records what it measured."""

    calls: list = field(default_factory=list)

    def evaluate(self, graph, cluster, placement):
        self.calls.append(np.asarray(placement).copy())
        return simulate(graph, TRUE, placement)


def random_rows(n, seed=0):
    return np.random.default_rng(seed).integers(0, 3, size=(n, GRAPH.num_ops))


@pytest.mark.parametrize("batched", [False, True])
def test_measures_exactly_the_top_k_simulated(batched):
    real, rows = Measured(), random_rows(40)
    v = VerifyingBackend(real, top_k=5)
    if batched:
        v.evaluate_many(GRAPH, CLUSTER, rows[:20])
        v.evaluate_many(GRAPH, CLUSTER, rows[20:])
    else:
        for row in rows:
            v.evaluate(GRAPH, CLUSTER, Placement(row))
    assert real.calls == []  # nothing is measured before verification
    v.verify(GRAPH, CLUSTER)
    simulated = np.array([simulate(GRAPH, CLUSTER, r).step_time for r in rows])
    expected = {rows[i].tobytes() for i in np.argsort(simulated, kind="stable")[:5]}
    assert {c.astype(np.int64).tobytes() for c in real.calls} == {r.astype(np.int64).tobytes() for r in rows[
        [i for i in range(len(rows)) if rows[i].tobytes() in expected]]}
    assert len(real.calls) == 5
    v.verify(GRAPH, CLUSTER)
    assert len(real.calls) == 5  # a placement is measured once


def test_duplicates_and_oom_are_not_kept():
    small = Cluster.homogeneous(3, 1, comm=CLUSTER.comm)  # nothing fits
    real, v = Measured(), VerifyingBackend(Measured(), top_k=3)
    row = random_rows(1)[0]
    for _ in range(4):
        v.evaluate(GRAPH, CLUSTER, Placement(row))
    v.evaluate(GRAPH, small, Placement(random_rows(1, seed=1)[0]))
    v.verify(GRAPH, CLUSTER)
    assert len(v.real.calls) == 1 and not real.calls


def test_finish_returns_the_best_measured_with_both_times():
    real, rows = Measured(), random_rows(30, seed=2)
    v = VerifyingBackend(real, top_k=6)
    v.evaluate_many(GRAPH, CLUSTER, rows)
    best = v.finish(GRAPH, CLUSTER)
    measured = [simulate(GRAPH, TRUE, c).step_time for c in real.calls]
    assert best.measured.step_time == pytest.approx(min(measured))
    assert best.simulated == pytest.approx(simulate(GRAPH, CLUSTER, best.placement).step_time)
    record = best.as_dict()
    assert record["step_time"] == best.measured.step_time and record["simulated_step_time"] == best.simulated
    assert [m["step_time"] for m in v.record()["measured"]] == pytest.approx(measured)


def test_every_verifies_during_the_run():
    real, rows = Measured(), random_rows(25, seed=4)
    v = VerifyingBackend(real, top_k=2, every=10)
    for i, row in enumerate(rows, 1):
        v.evaluate(GRAPH, CLUSTER, Placement(row))
        assert (len(real.calls) > 0) == (i >= 10)
    assert 2 <= len(real.calls) <= 6


def test_recalibration_refits_from_every_measurement_and_resimulates():
    seen = []

    def recalibrate(graph, cluster, placements, measured):
        seen.append((placements.copy(), measured.copy()))
        assert cluster is CLUSTER  # always from the caller's model, not the last fit
        return graph, TRUE  # a perfect fit

    real, rows = Measured(), random_rows(30, seed=5)
    v = VerifyingBackend(real, top_k=4, every=10, recalibrate=recalibrate, min_measurements=3)
    for row in rows:
        v.evaluate(GRAPH, CLUSTER, Placement(row))
    assert v.recalibrations == len(seen) >= 1
    assert len(seen[-1][0]) == len(v.verified)  # all the measurements so far
    # after a recalibration the simulator answers with the fitted model
    after = v.evaluate(GRAPH, CLUSTER, Placement(rows[0]))
    assert after.step_time == pytest.approx(simulate(GRAPH, TRUE, rows[0]).step_time)
    best = v.finish(GRAPH, CLUSTER)
    assert best.simulated == pytest.approx(best.measured.step_time)


def test_search_placer_returns_the_best_measured_placement():
    real = Measured()
    v = VerifyingBackend(real, top_k=4)
    placer = make_placer("local_search", start="m_etf", evaluations=80, seed=0, backend=v, progress=False)
    placement = placer.place(GRAPH, CLUSTER)
    measured = {c.astype(np.int64).tobytes(): simulate(GRAPH, TRUE, c).step_time for c in real.calls}
    assert 1 <= len(real.calls) <= 4
    assert measured[placement.device_of.tobytes()] == min(measured.values())
    record = placer.result.as_dict()["verified"]
    assert record["final"]["step_time"] == pytest.approx(min(measured.values()))
    assert len(record["measured"]) == len(real.calls)


def test_trainer_records_simulated_and_measured(tmp_path):
    from rlplace.learn.train import TrainConfig, train

    real = Measured()
    backend = VerifyingBackend(real, top_k=3)
    config = TrainConfig(agent="hierarchical", budget_placements=24, samples=4, progress=False, plots=False)
    summary = train(GRAPH, CLUSTER, backend, config, tmp_path)
    assert 1 <= len(real.calls) <= 3
    final = summary["final_evaluation"]
    measured = [simulate(GRAPH, TRUE, c).step_time for c in real.calls]
    assert final["step_time"] == pytest.approx(min(measured))
    assert final["simulated_step_time"] < final["step_time"]  # the model's interconnect is faster
    saved = Placement.load(tmp_path / "best_placement.json", GRAPH, CLUSTER)
    assert simulate(GRAPH, TRUE, saved).step_time == pytest.approx(final["step_time"])
    assert json.loads((tmp_path / "results.json").read_text())["verified"]["top_k"] == 3


@pytest.mark.parametrize("options,needle", [({"top_k": 0}, "verify_top_k"), ({"top_k": 2, "every": 0}, "verify_every")])
def test_bad_options(options, needle):
    with pytest.raises(ConfigError, match=needle):
        VerifyingBackend(Measured(), **options)


def test_verify_top_k_needs_a_measuring_backend(rlplace_cli, tmp_path):
    import subprocess

    proc = subprocess.run([*rlplace_cli("compare"), "graph=chain", "placers=[local_search]", "verify_top_k=2",
                           "plots=false", f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "verify_top_k needs a measuring backend" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_rlplace_train_backend_tf_verifies_the_top_k(rlplace_cli, tmp_path):
    """Issue 19 item 4 end to end: a small GNMT on 2 logical CPU devices, trained on the
    simulator, its 2 best simulated placements measured on real TensorFlow."""
    import subprocess

    knobs = [f"graph.model.{k}={v}" for k, v in
             dict(name="gnmt", batch_size=2, seq_length=3, hidden=8, vocab_size=20, num_layers=2).items()]
    proc = subprocess.run([*rlplace_cli("train"), "graph=tf_model", *knobs, "graph.warmup=1", "graph.steps=1",
                           "backend=tf", "backend.options.warmup=1", "backend.options.steps=2", "cluster=local_cpu",
                           "agent=hierarchical", "budget.placements=16", "verify_top_k=2", "plots=false",
                           "progress=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    measured = results["verified"]["measured"]
    assert len(measured) == 2 and all(0 < m["step_time"] < 60 and m["simulated_step_time"] > 0 for m in measured)
    final = results["final_evaluation"]
    assert final["step_time"] == min(m["step_time"] for m in measured if not m["oom"])
    assert final["simulated_step_time"] > 0 and (tmp_path / "run" / "best_placement.json").exists()
