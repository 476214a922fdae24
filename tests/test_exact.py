"""The ``exact`` placer (rlplace.placers.exact): its step time is the simulator's, its bound is
below every placement's simulated step time, and where it says optimal, no placement is faster."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import op, random_dags, training_graph
from rlplace.bounds import communication_bound
from rlplace.cluster import Cluster, CommModel
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placers import make_placer
from rlplace.coarsen import CoarseGraph
from rlplace.placers.exact import QUEUE_PAIRS, ExactPlacer, _Model, _unrelated_pairs
from rlplace.sim import simulate, simulate_many
from rlplace.zoo.synthetic import layered

LINKS = [CommModel(0.5, 0.01, "sequential"), CommModel(0.2, 0.05, "parallel")]


def every_placement(graph: OpGraph, devices: int) -> np.ndarray:
    return np.array(list(itertools.product(range(devices), repeat=graph.num_ops)), dtype=np.int64)


@settings(max_examples=25, deadline=None)
@given(graph=random_dags(max_ops=7), devices=st.integers(1, 3), link=st.integers(0, 1))
def test_the_bound_is_below_the_best_placement_and_optimal_means_it(graph, devices, link):
    """Against every placement of small random graphs: bound <= the fastest simulated step <= the
    exact placer's, which equals the simulator's for its placement; optimal means the fastest."""
    cluster = Cluster.homogeneous(devices, 2**40, LINKS[link])
    result = ExactPlacer(seconds=5, workers=1).solve(graph, cluster)
    fastest = float(simulate_many(graph, cluster, every_placement(graph, devices)).step_time.min())
    assert result.step_time == simulate(graph, cluster, result.placement).step_time
    assert result.bound <= fastest * (1 + 1e-9)
    assert result.step_time >= fastest
    if result.optimal:
        assert result.step_time <= fastest * (1 + 1e-4)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(2, 4), link=st.integers(0, 1), layered_graph=st.booleans())
def test_every_simulated_schedule_is_a_solution_of_the_model(seed, devices, link, layered_graph):
    """The model relaxes the simulator: fixed to the simulator's schedule of a random placement
    (times rounded down to ticks), the solver finds it feasible, queues and channels included."""
    from ortools.sat.python import cp_model

    graph = layered(30, width=5, seed=seed) if layered_graph else training_graph(seed, continuous=True)
    cluster = Cluster.homogeneous(devices, 2**40, [CommModel(134e-6, 1.754e-10, "sequential"),
                                                   CommModel(2e-5, 1e-9, "parallel")][link])
    units = CoarseGraph.colocation(graph)
    placement = units.expand(np.random.default_rng(seed).integers(0, devices, units.num_groups))
    result = simulate(graph, cluster, placement, trace=True)
    model = _Model(graph, cluster, result)
    assert len(_unrelated_pairs(graph)) <= QUEUE_PAIRS  # the queues are in the model
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.Solve(model.model) == cp_model.OPTIMAL
    assert solver.ObjectiveValue() * model.tick <= result.step_time


@pytest.mark.parametrize("seed", range(3))
def test_no_placer_is_faster_than_the_exact_bound(seed):
    graph = training_graph(seed, continuous=True) if seed % 2 else layered(40, width=5, seed=seed)
    cluster = Cluster.homogeneous(2 + seed, 2**40, [CommModel(134e-6, 1.754e-10, "sequential"),
                                                    CommModel(2e-5, 1e-9, "parallel")][seed % 2])
    result = ExactPlacer(seconds=3, workers=1).solve(graph, cluster)
    assert result.bound >= communication_bound(graph, cluster)
    for name in ["single", "m_etf", "m_sct", "heft", "celeritas", "critical_path", "learned", "random"]:
        step = simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time
        assert step >= result.bound * (1 - 1e-12), name
    for name in ["single", "m_etf", "critical_path"]:  # its starting points
        assert result.step_time <= simulate(graph, cluster, make_placer(name).place(graph, cluster)).step_time


def test_a_join_whose_inputs_are_dear_to_move_is_placed_on_one_device_and_proved_optimal():
    graph = OpGraph.from_records([op("p"), op("q"), op("j")], [("p", "j", 10), ("q", "j", 10)], name="join")
    cluster = Cluster.homogeneous(2, 2**40, CommModel(10.0, 0.0, "sequential"))
    result = ExactPlacer(seconds=5, workers=1).solve(graph, cluster)
    assert result.optimal and result.step_time == 3.0 and result.gap <= 1e-4


def test_two_independent_chains_go_to_two_devices_and_are_proved_optimal():
    ops = [op(f"{c}{k}") for c in "ab" for k in range(3)]
    edges = [(f"{c}{k}", f"{c}{k + 1}", 10) for c in "ab" for k in range(2)]
    graph = OpGraph.from_records(ops, edges, name="chains")
    result = ExactPlacer(seconds=5, workers=1).solve(graph, Cluster.homogeneous(2, 2**40, CommModel(1.0, 0.0, "parallel")))
    assert result.optimal and result.step_time == 3.0 and result.status == "OPTIMAL"


def test_colocation_groups_stay_together_and_memory_is_respected():
    records = [op("a", persistent=60), op("b", persistent=60, colocation_group="g"),
               op("c", colocation_group="g"), op("d")]
    graph = OpGraph.from_records(records, [("a", "c", 10), ("b", "c", 10), ("c", "d", 10)], name="groups")
    cluster = Cluster.homogeneous(2, 100, CommModel(0.0, 0.0, "parallel"))
    result = ExactPlacer(seconds=5, workers=1).solve(graph, cluster)
    result.placement.validate(graph, cluster)
    assert not result.oom and result.placement[0] != result.placement[1]


def test_coarsened_it_places_the_ops_and_bounds_with_the_graphs_own_bound():
    graph = training_graph(3, continuous=True)
    cluster = Cluster.homogeneous(2, 2**40, CommModel(134e-6, 1.754e-10, "sequential"))
    result = ExactPlacer(seconds=3, workers=1, coarsen=True).solve(graph, cluster)
    assert len(result.placement) == graph.num_ops
    assert result.bound == communication_bound(graph, cluster)
    assert result.step_time == simulate(graph, cluster, result.placement).step_time


@pytest.mark.parametrize("options", [{"seconds": 0}, {"seconds": float("nan")}, {"workers": -1}])
def test_bad_options_are_one_config_error(options):
    with pytest.raises(ConfigError, match="exact"):
        make_placer("exact", **options)
