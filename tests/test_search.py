"""Search placers (local_search, annealing): invariants on small random graphs, budget,
determinism, and that they do improve a bad start."""

import json
import subprocess
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlplace.backends import Backend, SimBackend
from rlplace.cluster import Cluster, CommModel
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers import make_placer
from rlplace.placers.search import HEURISTICS, Annealing, LocalSearch, evaluate_rows
from rlplace.sim import simulate
from rlplace.zoo import fork_join

from conftest import op

SEARCH = ("local_search", "annealing")
COMM = CommModel(latency=1e-5, seconds_per_byte=1e-9, mode="sequential")


@st.composite
def colocated_dags(draw, max_ops=12):
    """Small random DAGs whose ops may share one of three colocation groups."""
    n = draw(st.integers(1, max_ops))
    ops = []
    for i in range(n):
        group = draw(st.sampled_from([None, None, "a", "b", "c"]))
        ops.append(op(f"n{i}", compute_time=draw(st.sampled_from([0.0, 1e-3, 2e-3, 5e-3])),
                      out=[draw(st.integers(0, 5000))], persistent=draw(st.integers(0, 100)),
                      temporary=draw(st.integers(0, 100)),
                      **({"colocation_group": group} if group else {})))
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    edges = [(f"n{i}", f"n{j}", ops[i]["output_bytes"][0]) for i, j in sorted(pairs) if i < j]
    return OpGraph.from_records(ops, edges, name="random")


def score(graph, cluster, placement):
    r = simulate(graph, cluster, placement)
    return float(np.maximum(r.peak_memory - cluster.memory, 0).sum()), r.step_time


@dataclass
class CountingBackend(Backend):
    """The simulator one placement at a time, counting the placements it evaluates."""

    count: int = 0

    def evaluate(self, graph, cluster, placement):
        self.count += 1
        return SimBackend().evaluate(graph, cluster, placement)


@dataclass
class BatchedCountingBackend(SimBackend):
    """The simulator, batched (``evaluate_many``), counting the placements it evaluates."""

    count: int = 0

    def evaluate(self, graph, cluster, placement):
        self.count += 1
        return super().evaluate(graph, cluster, placement)

    def evaluate_many(self, graph, cluster, placements):
        self.count += len(placements)
        return super().evaluate_many(graph, cluster, placements)


@pytest.mark.parametrize("name", SEARCH)
@settings(max_examples=25)
@given(graph=colocated_dags(), start=st.sampled_from(["single", "random", "round_robin"]),
       seed=st.integers(0, 3), tight=st.booleans())
def test_never_worse_than_start_keeps_colocation_and_memory(name, graph, start, seed, tight):
    cluster = Cluster.homogeneous(3, 2**40, COMM)
    start_placement = make_placer(start, seed=seed).place(graph, cluster)
    if tight:  # memory just enough for the start: any move that needs more is an OOM
        peak = simulate(graph, cluster, start_placement).peak_memory
        cluster = Cluster.homogeneous(3, max(int(peak.max()), 1), COMM)
    placer = make_placer(name, start=start, evaluations=30, seed=seed, batch=2)
    placement = placer.place(graph, cluster)
    placement.validate(graph, cluster)  # colocation kept
    assert score(graph, cluster, placement) <= score(graph, cluster, start_placement)
    assert not simulate(graph, cluster, placement).oom  # the start fits, so the result does
    assert placer.result.evaluations == len(placer.curve) <= 30
    assert placer.curve == sorted(placer.curve, reverse=True) or placer.result.start_overflow_bytes > 0


@pytest.mark.parametrize("name", SEARCH)
def test_from_an_oom_start_the_overflow_shrinks(name):
    graph = OpGraph.from_records([op(f"n{i}", persistent=10**6, out=[10]) for i in range(10)],
                                 [(f"n{i}", f"n{i + 1}", 10) for i in range(9)])
    cluster = Cluster.homogeneous(4, 6 * 10**6, COMM)  # the weights need two devices
    assert simulate(graph, cluster, make_placer("single").place(graph, cluster)).oom
    placer = make_placer(name, start="single", evaluations=200, seed=0)
    placement = placer.place(graph, cluster)
    assert placer.result.start_overflow_bytes > 0
    assert not simulate(graph, cluster, placement).oom


def test_hot_annealing_returns_the_best_placement_seen():
    """At a temperature that keeps almost every move, the walk wanders; the placer still returns
    the best placement it evaluated."""
    graph, cluster = fork_join(6, 5, compute_time=5e-3, output_bytes=10**6), Cluster.homogeneous(4, 2**40, COMM)
    placer = Annealing(start="metis", evaluations=300, batch=1, t_start=10.0, t_end=10.0)
    placement = placer.place(graph, cluster)
    assert placer.result.accepted > 250
    assert simulate(graph, cluster, placement).step_time == placer.result.step_time == min(placer.curve)


@pytest.mark.parametrize("name", SEARCH)
@pytest.mark.parametrize("batch", [1, 4])
def test_deterministic_under_a_seed(name, batch):
    graph, cluster = fork_join(6, 5), Cluster.homogeneous(4, 2**40, COMM)
    runs = [make_placer(name, start="round_robin", evaluations=120, seed=s, batch=batch) for s in (7, 7, 8)]
    placements = [p.place(graph, cluster) for p in runs]
    assert placements[0] == placements[1] and runs[0].curve == runs[1].curve
    assert runs[0].curve != runs[2].curve  # the seed matters


@pytest.mark.parametrize("name", SEARCH)
def test_improves_a_bad_start(name):
    """Six independent chains of 5 ms ops on one device: spreading them over four devices pays
    (the best is about 2/6 of the single-device step plus transfers)."""
    graph, cluster = fork_join(6, 5, compute_time=5e-3, output_bytes=1000), Cluster.homogeneous(4, 2**40, COMM)
    single = simulate(graph, cluster, make_placer("single").place(graph, cluster)).step_time
    placer = make_placer(name, start="single", evaluations=400, seed=0)
    placer.place(graph, cluster)
    assert placer.result.step_time < 0.6 * single
    assert placer.result.accepted > 0 and placer.result.last_improvement_at > 1


@pytest.mark.parametrize("name", SEARCH)
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("start,starts", [("single", 1), (["single", "round_robin", "metis"], 3)])
def test_budget_counts_every_evaluation(name, batched, start, starts):
    graph, cluster = fork_join(4, 3), Cluster.homogeneous(4, 2**40, COMM)
    backend = BatchedCountingBackend() if batched else CountingBackend()
    placer = make_placer(name, start=start, evaluations=37, seed=1, batch=4, backend=backend)
    placer.place(graph, cluster)
    assert backend.count == placer.result.evaluations == len(placer.curve) == 37
    assert placer.curve[:starts] == [placer.result.start_step_time] * starts


def test_seconds_budget_alone_stops():
    graph, cluster = fork_join(4, 3), Cluster.homogeneous(4, 2**40, COMM)
    placer = LocalSearch(start="single", evaluations=None, seconds=0.05)
    placer.place(graph, cluster)
    assert placer.result.evaluations >= 1


def test_start_best_is_the_best_heuristic():
    graph, cluster = fork_join(4, 3, compute_time=5e-3), Cluster.homogeneous(4, 2**40, COMM)
    placer = make_placer("local_search", start="best", evaluations=len(HEURISTICS))  # no search left
    placement = placer.place(graph, cluster)
    steps = {h: simulate(graph, cluster, make_placer(h, seed=0).place(graph, cluster)).step_time
             for h in HEURISTICS}
    assert steps[placer.result.start] == min(steps.values())
    assert simulate(graph, cluster, placement).step_time == min(steps.values())


def test_annealing_schedule_and_acceptance():
    a = Annealing(t_start=0.01, t_end=1e-4)
    assert a.temperature(0.0) == pytest.approx(0.01) and a.temperature(1.0) == pytest.approx(1e-4)
    assert a.temperature(0.5) == pytest.approx(1e-3)
    rng = np.random.default_rng(0)
    worse = [a.accept((0.0, 1.01), (0.0, 1.0), 1.0, 0.0, rng) for _ in range(2000)]
    assert 0.25 < np.mean(worse) < 0.45  # exp(-1) at T = 1% for a 1% slowdown
    assert not any(a.accept((0.0, 1.01), (0.0, 1.0), 1.0, 1.0, rng) for _ in range(200))
    assert not a.accept((1.0, 0.5), (0.0, 1.0), 1.0, 0.0, rng)  # an OOM candidate from a fit: never
    assert LocalSearch().accept((0.0, 1.0), (0.0, 1.0), 1.0, 0.0, rng)


@pytest.mark.parametrize("options", [{"evaluations": None}, {"evaluations": 0}, {"seconds": 0}, {"batch": 0},
                                     {"t_start": 1e-3, "t_end": 1e-2}, {"start": "magic"},
                                     {"start": ["metis", "magic"]}, {"backend": "tf"}])
def test_bad_options_are_config_errors(options):
    with pytest.raises(ConfigError):
        make_placer("annealing", **options)


def test_sim_backend_evaluate_many_checks_colocation():
    graph = OpGraph.from_records([op("a", colocation_group="g"), op("b", colocation_group="g"), op("c")],
                                 [("a", "b", 10), ("b", "c", 10)])
    cluster = Cluster.homogeneous(2, 2**40, COMM)
    rows = np.array([[0, 0, 1], [1, 1, 0]])
    overflow, step = evaluate_rows(graph, cluster, rows, SimBackend())
    assert step.tolist() == [simulate(graph, cluster, Placement(r)).step_time for r in rows]
    with pytest.raises(PlacementError, match="colocation group 'g' is split"):
        SimBackend().evaluate_many(graph, cluster, np.array([[0, 0, 1], [0, 1, 1]]))


def test_compare_runs_search_placers(rlplace_cli, tmp_path):
    proc = subprocess.run(
        [*rlplace_cli("compare"), "graph=layered", "graph.num_ops=120", "placers=[single,local_search]",
         "+placer_options.local_search.start=single", "+placer_options.local_search.evaluations=60",
         f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    single, search = json.loads((tmp_path / "run" / "results.json").read_text())
    assert search["placer"] == "local_search" and len(search["curve"]) == 60
    assert search["search"]["start"] == "single" and search["search"]["evaluations"] == 60
    assert search["curve"][0] == pytest.approx(single["step_time"])
    assert search["step_time"] == pytest.approx(search["curve"][-1])
    assert search["step_time"] < single["step_time"]
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0
