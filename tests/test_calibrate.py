"""rlplace.calibration and rlplace-calibrate (issue 19): the fit recovers parameters the
simulator itself made the measurements with, the noise ceiling estimates what the noise allows,
the files load where the other commands read them, bad input is one line, and the verifying
backend recalibrates from its measurements."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from scipy.stats import spearmanr

from rlplace.apps.calibrate import objective
from rlplace.backends import Backend
from rlplace.calibration import recalibrate
from rlplace.calibration.design import design
from rlplace.calibration.files import write_graph, write_preset
from rlplace.calibration.fit import OTHER, OpTypeGroups, Params, fit
from rlplace.calibration.protocol import Measurements, measure
from rlplace.calibration.validate import cross_validate, held_out_split
from rlplace.cluster import Cluster, CommModel, Device
from rlplace.costs import with_compute_time
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.cluster import load_cluster_file
from rlplace.presets import instantiate_node
from rlplace.sim import simulate, simulate_many
from rlplace.verify import VerifyingBackend
from rlplace.zoo.synthetic import layered
from tests.test_app_inputs import assert_one_line_exit_2, run  # noqa: F401 - run is a fixture

GRAPH = layered(240, compute_mean=1e-4, output_bytes_mean=1e5, bytes_cv=3.0, seed=2)
CLUSTER = Cluster.homogeneous(2, 2**34, CommModel(2e-6, 0.0, "parallel"), prefix="/device:CPU:", name="cpu2")
PLAN = design(GRAPH, CLUSTER, mixing_seeds=3)


def measured_by(params: Params, groups: OpTypeGroups, noise: float, seed: int = 0) -> np.ndarray:
    times = simulate_many(GRAPH, params.cluster(CLUSTER), PLAN.placements,
                          compute_time=params.compute_time(GRAPH, groups)).step_time
    return times * np.exp(np.random.default_rng(seed).normal(0.0, noise, len(times)))


def test_simulate_many_with_compute_time_is_the_graph_with_those_costs():
    costs = GRAPH.compute_time * np.random.default_rng(0).uniform(0.2, 3.0, GRAPH.num_ops)
    rows = PLAN.placements[:6]
    direct = simulate_many(GRAPH, CLUSTER, rows, compute_time=costs).step_time
    rebuilt = [simulate(with_compute_time(GRAPH, costs), CLUSTER, r).step_time for r in rows]
    np.testing.assert_allclose(direct, rebuilt, rtol=1e-12)
    assert not np.allclose(direct, simulate_many(GRAPH, CLUSTER, rows).step_time)


def test_the_design_separates_single_cuts_mixes_and_heuristics():
    assert PLAN.families[:2] == ["single", "single"]
    assert {"cut", "mix", "heuristic"} <= set(PLAN.families)
    rows = PLAN.placements
    assert len({r.tobytes() for r in rows}) == len(rows)  # no placement twice
    transfers = {label: simulate(GRAPH, CLUSTER, row).num_transfers for label, row in zip(PLAN.labels, rows)}
    assert transfers["single_0"] == transfers["single_1"] == 0
    assert transfers["mix_0.02_s0"] < transfers["mix_0.2_s0"] < transfers["mix_0.5_s0"]


def test_the_fit_recovers_the_parameters_that_made_the_measurements():
    groups = OpTypeGroups.of(GRAPH, 0)
    truth = Params(5e-5, 2e-10, "sequential", (1.0, 0.8), {OTHER: 0.6})
    result = fit(GRAPH, CLUSTER, PLAN.placements, measured_by(truth, groups, noise=0.01), op_type_groups=0)
    p = result.params
    assert p.mode == "sequential"
    assert p.speeds[1] == pytest.approx(0.8, rel=0.03)
    assert p.scales[OTHER] == pytest.approx(0.6, rel=0.03)
    for name, value in (("latency", 5e-5), ("seconds_per_byte", 2e-10), ("speed[1]", 0.8), ("scale[other]", 0.6)):
        low, high = result.ci[name]
        assert low <= value <= high, (name, value, result.ci[name])
    assert result.r2 > 0.99
    # the calibrated files simulate what the fit predicts
    graph, cluster = result.apply(GRAPH, CLUSTER)
    np.testing.assert_allclose(simulate_many(graph, cluster, PLAN.placements).step_time,
                               result.simulate(GRAPH, CLUSTER, PLAN.placements), rtol=1e-12)


def test_op_type_groups_are_the_types_with_the_most_compute():
    ops = [{**GRAPH.op_record(i), "op_type": "Big" if i % 4 == 0 else "Small" if i % 4 == 1 else f"T{i}",
            "compute_time": 1e-3 if i % 4 == 0 else 1e-4} for i in range(GRAPH.num_ops)]
    graph = OpGraph.from_records(ops, GRAPH.edge_records(), name="typed")
    groups = OpTypeGroups.of(graph, 2)
    assert groups.names == ("Big", "Small", OTHER)
    assert groups.group_of[0] == 0 and groups.group_of[1] == 1 and groups.group_of[2] == 2


def test_held_out_split_and_cross_validation_never_hold_out_the_single_placements():
    families = ["single", "single"] + ["cut"] * 5 + ["mix"] * 9 + ["heuristic"]
    held = held_out_split(families, 0.33, seed=1)
    assert not held[:2].any() and held[2:7].sum() == 2 and held[7:16].sum() == 3 and not held[16]
    seen = []

    def predict(train, test):
        assert train[:2].all() and not (train & test).any()
        seen.append(np.flatnonzero(test))
        return np.flatnonzero(test) * 1.0

    out = cross_validate(families, 3, predict)
    assert len(seen) == 3 and sorted(np.concatenate(seen)) == list(range(2, len(families)))
    assert np.isnan(out[:2]).all() and np.array_equal(out[2:], np.arange(2, len(families)))


def synthetic_measurements(noise: float, rounds: int, seed: int, k: int = 40):
    rng = np.random.default_rng(seed)
    truth = rng.uniform(0.02, 0.04, k)
    times = truth[None, :] * np.exp(rng.normal(0.0, noise, (rounds, k)))
    return truth, Measurements([f"p{i}" for i in range(k)], ["mix"] * k, np.zeros((k, 3)), times,
                               np.zeros(k, dtype=bool), np.zeros(k, dtype=np.int64))


def test_split_half_noise_ceiling_predicts_the_best_spearman_the_noise_allows():
    ceilings, achieved = [], []
    for seed in range(30):
        truth, m = synthetic_measurements(noise=0.3, rounds=4, seed=seed)
        ceilings.append(m.split_half().ceiling)
        achieved.append(spearmanr(truth, m.median).statistic)  # a perfect simulator's score
    assert 0.5 < np.mean(achieved) < 0.85  # the noise matters at this level
    assert np.mean(ceilings) == pytest.approx(np.mean(achieved), abs=0.05)
    _, quiet = synthetic_measurements(noise=0.0, rounds=3, seed=0)
    assert quiet.split_half().ceiling == pytest.approx(1.0) and quiet.noise_floor() == 0.0
    _, loud = synthetic_measurements(noise=3.0, rounds=3, seed=0)
    assert loud.split_half().ceiling < 0.5
    assert synthetic_measurements(noise=0.1, rounds=1, seed=0)[1].split_half() is None


@pytest.mark.parametrize("rounds", [1, 3])
def test_measure_interleaves_rounds_and_throws_the_warmup_away(rounds):
    calls = []

    class Real(Backend):
        def evaluate(self, graph, cluster, placement):
            calls.append(np.asarray(placement.device_of).tobytes())
            return simulate(graph, cluster, placement)

    m = measure(Real(), GRAPH, CLUSTER, PLAN, rounds=rounds, warmup=2, progress=False)
    assert len(calls) == 2 + rounds * len(PLAN)
    for r in range(rounds):
        one_round = calls[2 + r * len(PLAN):2 + (r + 1) * len(PLAN)]
        assert sorted(one_round) == sorted(row.tobytes() for row in PLAN.rows)
    np.testing.assert_allclose(m.median, simulate_many(GRAPH, CLUSTER, PLAN.placements).step_time)
    if rounds == 3:
        assert calls[2:2 + len(PLAN)] != calls[2 + len(PLAN):2 + 2 * len(PLAN)]  # a new order each round


def test_files_round_trip(tmp_path):
    cluster = Cluster((Device("/device:CPU:0", 2**30, 1.0), Device("/device:CPU:1", 2**31, 0.7)),
                      CommModel(3.5e-5, 1.25e-10, "sequential"), "cpu2_calibrated")
    path = write_preset(tmp_path / "cluster.yaml", cluster, ["a comment"])
    assert path.read_text().startswith("# a comment\n")
    assert load_cluster_file(str(path)) == cluster
    with initialize_config_module("rlplace.conf", version_base="1.3"):
        cfg = compose("compare", overrides=["cluster=file", f"cluster.path={path}"])
    assert instantiate_node(cfg, "cluster") == cluster
    with pytest.raises(ConfigError, match="cluster.path: .*nosuch.yaml: no such cluster preset file"):
        load_cluster_file(str(tmp_path / "nosuch.yaml"))
    (tmp_path / "graph.yaml").write_text("_target_: rlplace.zoo.synthetic.chain\n")
    with pytest.raises(ConfigError, match="rlplace.zoo.synthetic.chain' is not a cluster constructor"):
        load_cluster_file(str(tmp_path / "graph.yaml"))
    graph = with_compute_time(GRAPH, GRAPH.compute_time * 0.5)
    write_graph(tmp_path / "graph.json.gz", graph)
    np.testing.assert_array_equal(OpGraph.load(tmp_path / "graph.json.gz").compute_time, graph.compute_time)
    _, m = synthetic_measurements(noise=0.1, rounds=3, seed=1)
    again = Measurements.from_dict(json.loads(json.dumps(m.as_dict())), num_ops=3)
    np.testing.assert_array_equal(again.rounds, m.rounds)
    assert again.labels == m.labels


def fake_run(tmp_path, noise=0.02):
    """A run directory as rlplace-calibrate leaves it, measured by the simulator itself."""
    run_dir = tmp_path / "earlier"
    run_dir.mkdir()
    truth = Params(3e-4, 0.0, "sequential", (1.0, 1.0), {OTHER: 0.7})
    rounds = np.stack([measured_by(truth, OpTypeGroups.of(GRAPH, 0), noise, seed=s) for s in range(3)])
    m = Measurements(PLAN.labels, PLAN.families, PLAN.placements, rounds, np.zeros(len(PLAN), dtype=bool),
                     np.zeros(len(PLAN), dtype=np.int64))
    (run_dir / "measurements.json").write_text(json.dumps(m.as_dict()))
    write_graph(run_dir / "graph.json.gz", GRAPH)
    write_preset(run_dir / "measured_cluster.yaml", CLUSTER)
    return run_dir


def test_from_run_refits_an_earlier_run_without_measuring(tmp_path, run):
    earlier = fake_run(tmp_path)
    out = tmp_path / "refit"
    proc = run("calibrate", f"from_run={earlier}", "cv_folds=0", "op_type_groups=0", "max_evaluations=50",
               f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "calibration.json").read_text())
    assert objective(summary) == summary["held_out_after"]["spearman"]  # what a sweeper maximizes
    assert summary["held_out_after"]["spearman"] > summary["held_out_before"]["spearman"]
    assert summary["held_out_after"]["spearman"] > 0.8
    assert summary["noise_ceiling"]["held_out"]["ceiling"] > 0.8
    cluster = load_cluster_file(str(out / "cluster.yaml"))
    assert cluster.comm.latency > 1e-4  # the transfers cost more than the 2 µs it was measured with
    assert OpGraph.load(out / "calibrated_graph.json.gz").total_compute == pytest.approx(0.7 * GRAPH.total_compute,
                                                                                         rel=0.05)
    assert "| latency |" in (out / "report.md").read_text() and (out / "scatter.png").stat().st_size > 0
    again = run("calibrate", f"from_run={earlier}", f"hydra.run.dir={out}")  # never overwrites a run
    assert_one_line_exit_2(again, "rlplace-calibrate", ["exists"])


@pytest.mark.parametrize("args, needles", [
    (["rounds=0"], ["rounds must be an integer >= 1"]),
    (["held_out=1.5"], ["held_out must be a finite number in (0, 1]"]),
    (["from_run=/nonexistent/run"], ["from_run", "/nonexistent/run has no measurements.json, graph.json.gz, "
                                                  "measured_cluster.yaml"]),
    (["backend=sim"], ["backend=sim", "backend=tf"]),
    (["heuristics=[m_etf,nosuch]"], ["heuristics", "'nosuch'"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, run, args, needles):
    proc = run("calibrate", *args, f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_exit_2(proc, "rlplace-calibrate", needles)
    assert not (tmp_path / "out" / "report.md").exists()


def test_a_bad_measurements_file_is_one_line(tmp_path, run):
    earlier = fake_run(tmp_path)
    (earlier / "measurements.json").write_text('{"placements": [{"label": 1}]}')
    proc = run("calibrate", f"from_run={earlier}", f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_exit_2(proc, "rlplace-calibrate", ["measurements.json", "not a measurements file"])


class CostlyTransfers(Backend):
    """A real backend whose transfers cost far more than the simulator's (as logical CPU
    devices do): the simulator on a cluster with a 0.3 ms latency, sequential."""

    def __init__(self):
        self.truth = Cluster.homogeneous(2, 2**34, CommModel(3e-4, 0.0, "sequential"), prefix="/device:CPU:")
        self.calls = 0

    def evaluate(self, graph, cluster, placement):
        self.calls += 1
        return simulate(graph, self.truth, placement)


def test_verifying_backend_recalibrates_from_what_it_measures():
    real = CostlyTransfers()
    v = VerifyingBackend(real, top_k=4, every=30, recalibrate=recalibrate)
    rng = np.random.default_rng(0)
    units = PLAN.placements
    rows = np.concatenate([units, rng.integers(0, 2, (40, GRAPH.num_ops))])
    v.evaluate_many(GRAPH, CLUSTER, rows)
    assert v.recalibrations >= 1 and real.calls >= 3
    graph, cluster = v._simulator(GRAPH, CLUSTER)
    assert cluster.comm.latency > 10 * CLUSTER.comm.latency
    measured = np.array([x.measured.step_time for x in v.verified])
    placements = np.stack([x.placement for x in v.verified])
    before = simulate_many(GRAPH, CLUSTER, placements).step_time
    after = simulate_many(graph, cluster, placements).step_time
    assert np.median(np.abs(after - measured) / measured) < np.median(np.abs(before - measured) / measured)
    # now the simulator ranks by the real cost: few transfers win
    best = v.finish(GRAPH, CLUSTER)
    assert simulate(GRAPH, real.truth, Placement(best.placement)).num_transfers <= np.median(
        [simulate(GRAPH, real.truth, Placement(r)).num_transfers for r in rows])


def test_recalibrate_is_what_verify_calls_from_the_config():
    with initialize_config_module("rlplace.conf", version_base="1.3"):
        cfg = compose("compare", overrides=["verify_top_k=2"])
    assert cfg.verify_recalibrate is True
    from rlplace.apps.common import verifying

    assert verifying(CostlyTransfers(), cfg).recalibrate is recalibrate


@pytest.mark.slow
def test_the_readme_calibrates_a_tiny_model_on_tensorflow_refits_and_places_with_it(tmp_path):
    """docs/real_frameworks.md's "Calibrating the simulator": its first three commands, as written,
    with the run directories under tmp_path (a real TensorFlow measurement on 2 logical CPU devices)."""
    from tests.test_docs_snippets import REPO, commands

    page = REPO / "docs" / "real_frameworks.md"
    lines = page.read_text().splitlines()
    start = lines.index("## Calibrating the simulator") + 1
    end = next(k for k in range(start, len(lines)) if lines[k].startswith("## ")) + 1
    section = [argv for where, argv in commands(page) if start < int(where.rsplit(":", 1)[1]) < end]
    tiny, refit, place = section[:3]
    bin_dir = Path(sys.executable).parent
    for argv in (tiny, refit, place):
        args = [a.replace("outputs/", f"{tmp_path}/") for a in argv[1:]]
        if argv is place:
            args.append(f"hydra.run.dir={tmp_path}/placed")
        proc = subprocess.run([str(bin_dir / Path(argv[0]).name), *args], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])
    m = json.loads((tmp_path / "calibrate-tiny" / "measurements.json").read_text())
    assert m["rounds"] == 2 and all(len(p["step_times"]) == 2 and min(p["step_times"]) > 0 for p in m["placements"])
    assert {p["family"] for p in m["placements"]} == {"single", "cut", "mix", "heuristic"}
    refitted = json.loads((tmp_path / "calibrate-refit" / "calibration.json").read_text())
    assert refitted["fit"]["op_type_groups"] == ["other"]  # the refit's own options
    assert {r["placement"] for r in refitted["rows"]} == {p["label"] for p in m["placements"]}
    placed = json.loads((tmp_path / "placed" / "results.json").read_text())
    assert {r["placer"] for r in placed} == {"m_etf", "local_search"} and all("error" not in r for r in placed)
