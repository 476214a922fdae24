"""Parallel evaluation on Ray workers (rlplace.distributed): order, equality with sequential
evaluation, faults (a killed worker, a hanging evaluation), and that Ray stays optional."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

import rlplace.learn.env  # noqa: F401  (registers rlplace/Placement-v0)
from rlplace.backends import Backend, SimBackend
from rlplace.cluster import load_preset
from rlplace.distributed import RayBackend, make_parallel_backend
from rlplace.errors import BackendError, ConfigError, PlacementError
from rlplace.placement import Placement
from rlplace.zoo import layered, linear_regression


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test backends below, for the actors
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def problem():
    graph, cluster = layered(200, seed=2), load_preset("baechi_2080")
    rng = np.random.default_rng(0)
    placements = [Placement(rng.integers(0, cluster.num_devices, graph.num_ops)) for _ in range(6)]
    return graph, cluster, placements


def sequential(graph, cluster, placements):
    return [SimBackend().evaluate(graph, cluster, p).step_time for p in placements]


@dataclass
class SlowBackend(Backend):
    """The simulator, after sleeping ``delay`` seconds (a stand-in for a real measurement)."""

    delay: float = 0.5

    def evaluate(self, graph, cluster, placement):
        time.sleep(self.delay)
        return SimBackend().evaluate(graph, cluster, placement)


@dataclass
class HangsOnce(Backend):
    """Hangs on the first evaluation of all workers (a marker file tells the others), then simulates."""

    marker: str

    def evaluate(self, graph, cluster, placement):
        try:
            with open(self.marker, "x"):
                pass
        except FileExistsError:
            return SimBackend().evaluate(graph, cluster, placement)
        time.sleep(3600)


class AlwaysDies(Backend):
    def evaluate(self, graph, cluster, placement):
        os._exit(1)


def test_batch_results_in_submission_order_and_equal_to_sequential(ray, problem):
    graph, cluster, placements = problem
    with make_parallel_backend("sim", workers=2, timeout=60) as backend:
        results = backend.evaluate_batch(graph, cluster, placements)
        assert [r.step_time for r in results] == sequential(graph, cluster, placements)
        assert backend.simulated and backend.retries == 0
        # a backend error is the caller's, not a fault: it arrives unchanged and is not retried
        graph = linear_regression()
        split = np.zeros(graph.num_ops, dtype=np.int64)
        split[graph.colocation_groups["Weight"][-1]] = 1
        with pytest.raises(PlacementError, match="Weight"):
            backend.evaluate(graph, cluster, Placement(split))
        assert backend.retries == 0


@pytest.mark.slow
def test_killing_a_worker_mid_batch_still_yields_every_result_once(ray, problem):
    graph, cluster, placements = problem
    with make_parallel_backend(lambda: SlowBackend(0.5), workers=2, timeout=60) as backend:
        victim = backend.actors[0]
        killer = threading.Timer(0.7, lambda: ray.kill(victim, no_restart=True))
        killer.start()
        results = backend.evaluate_batch(graph, cluster, placements)
        killer.join()
        assert len(results) == len(placements)
        assert [r.step_time for r in results] == sequential(graph, cluster, placements)
        assert backend.retries == 1 and backend.replaced == 1


@pytest.mark.slow
def test_a_hanging_evaluation_is_timed_out_and_retried(ray, problem, tmp_path):
    graph, cluster, placements = problem
    marker = str(tmp_path / "hung")
    # the timeout is far above an ordinary evaluation even on a loaded machine: only the hang trips
    # it. It also bounds each worker's start, which took over 20 s with both cores busy.
    with make_parallel_backend(lambda: HangsOnce(marker), workers=2, timeout=45) as backend:
        results = backend.evaluate_batch(graph, cluster, placements[:4])
        assert [r.step_time for r in results] == sequential(graph, cluster, placements[:4])
        assert backend.retries == 1 and backend.replaced == 1


@pytest.mark.slow
def test_a_placement_that_kills_every_worker_fails_after_max_retries(ray, problem):
    graph, cluster, placements = problem
    with RayBackend(AlwaysDies, workers=1, timeout=60, max_retries=1) as backend:
        with pytest.raises(BackendError, match="failed on 2 Ray workers"):
            backend.evaluate(graph, cluster, placements[0])
        assert backend.retries == 1


def test_the_vector_env_evaluates_the_k_samples_as_one_batch(problem):
    graph, cluster, _ = problem
    calls = []

    class Recording(SimBackend):
        def evaluate_batch(self, graph, cluster, placements):
            calls.append(len(placements))
            return [self.evaluate(graph, cluster, p) for p in placements]

    envs = gym.make_vec("rlplace/Placement-v0", num_envs=4, graph=graph, cluster=cluster, backend=Recording())
    single = gym.make("rlplace/Placement-v0", graph=graph, cluster=cluster)
    obs, _ = envs.reset(seed=0)
    assert obs in envs.observation_space
    actions = envs.action_space.sample()
    actions[3] = actions[0]                      # a repeated sample is evaluated once
    obs, rewards, terminated, truncated, info = envs.step(actions)
    assert calls == [3] and terminated.all() and not truncated.any() and obs in envs.observation_space
    expected = []
    for action in actions:
        single.reset()
        expected.append(single.step(action)[1])
    assert rewards.tolist() == expected
    assert (info["final_info"]["placement"][1] == envs.unwrapped.env.units.expand(actions[1]).device_of).all()
    accounting = envs.unwrapped.env.accounting
    assert (accounting.evaluations, accounting.cache_hits) == (3, 1)


def test_one_worker_is_the_plain_backend_and_needs_no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert isinstance(make_parallel_backend("sim"), SimBackend)
    with pytest.raises(ConfigError, match=r"rlplace\[ray\]"):
        make_parallel_backend("sim", workers=2)
    with pytest.raises(ConfigError, match="workers"):
        make_parallel_backend("sim", workers=0)


TINY_CLI = ["graph=layered", "graph.num_ops=30", "agent.policy.num_groups=8", "agent.policy.placer_hidden=16",
            "budget.placements=16", "progress=false", "plots=false"]


@pytest.mark.slow
def test_rlplace_train_with_two_workers_matches_one_worker_which_never_imports_ray(tmp_path):
    pytest.importorskip("ray")

    def train(workers: int, *python_options: str) -> tuple[subprocess.CompletedProcess, dict]:
        out = tmp_path / f"workers{workers}"
        run = subprocess.run([sys.executable, *python_options, "-m", "rlplace.apps.train", *TINY_CLI,
                              f"backend.workers={workers}", f"hydra.run.dir={out}"],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        return run, json.loads((out / "results.json").read_text())

    one, one_results = train(1, "-X", "importtime")
    imported = re.findall(r"^import time:.*\|\s*(\S+)$", one.stderr, flags=re.MULTILINE)
    assert "rlplace.learn.train" in imported
    assert not [name for name in imported if name == "ray" or name.startswith("ray.")]
    _, two_results = train(2)
    assert two_results["evaluation_retries"] == 0
    assert two_results["best_step_time"] == one_results["best_step_time"]
    assert two_results["evaluated"] == one_results["evaluated"] == 16
