"""PlacementEnv: the placement problem as a Gymnasium environment.

The agent places *units* — colocation units by default, or the groups of a given grouping
(merged so that no colocation group is ever split) — on the devices of a cluster; the backend
(the simulator, or real TensorFlow) runs the placement and the reward comes from its step time.

Modes
-----
``one_shot`` (the papers' setting): one action gives a device to every unit,
``MultiDiscrete([n_devices] * n_units)``; the episode is that one step.

``sequential``: one unit per step, in ``order`` (``"topological"`` — units by their first op —,
``"cpd_topo"`` — Celeritas' critical-path DFS order — or an explicit permutation of unit
indices), ``Discrete(n_devices)``. The reward is 0 until the
last step, which gets the reward of the whole placement. Shaping pays each step instead the
change of a partial placement's reward, so the rewards of an episode still add up to the final
reward: ``shaping=True``, the reward of the simulated graph induced by the units placed so far
(its memory included); ``shaping="schedule"``, the reward of the estimate of
``rlplace.learn.env.partial``: the placed ops as the simulator runs them, each followed by its
optimistic tail (the longest compute-only path to an exit on the fastest device), which is the
step time once every unit is placed.

Rewards
-------
``-sqrt(step_time)`` by default (both papers), or ``"linear"`` (``-step_time``) or ``"log"``
(``-log(step_time)``). A placement that runs out of memory, or whose step time exceeds
``step_time_limit`` (Mars §3.4 stops such runs), gets the penalty ``oom_penalty``:
``"hierarchical_planner"`` (reward -10, HP §3), ``"mars"`` (a 100 s step time, Mars §3.4), or
a number (the reward itself).

Observation (``gymnasium.spaces.Dict``)
---------------------------------------
Every entry is a 1-D Box or a Discrete, so that Stable-Baselines3's ``MultiInputPolicy`` and
``check_env`` take it as is. With U units, D devices, E unit edges and ``F = NUM_FEATURES``:

==================== ============================ ===============================================
key                  space                        contents
==================== ============================ ===============================================
``op_type``          Box int64 (U,)               type id of each unit's first op
``features``         Box float32 (U * F,)         per unit, row by row (``reshape(U, F)``):
                                                  compute time, memory, output bytes and op
                                                  count, each over its largest value, then the
                                                  unit's first op's output and input shape, 4
                                                  dims each, over the largest dimension of the
                                                  graph (Mars §3.1)
``edge_index``       Box int64 (2 * E,)           unit edges, sources then destinations
                                                  (``reshape(2, E)``)
``edge_features``    Box float32 (E,)             bytes of each unit edge over the largest
``placement``        Box int64 (U,)               device of each unit, -1 while unplaced
``current_unit``     Discrete(U + 1)              sequential mode: the unit to place now; U when
                                                  done (one-shot mode: 0, then U)
``device_free_memory`` Box float32 (D,)           1 - persistent bytes placed / memory
``device_busy``      Box float32 (D,)             compute placed / total compute
==================== ============================ ===============================================

With ``schedule_features=True`` (sequential mode) three more, from the partial schedule
(``rlplace.learn.env.partial``); times over the graph's lower bound (``rlplace.sim.lower_bound``),
the choice for the current unit over the mean compute time of a unit:

==================== ============================ ===============================================
``unit_schedule``    Box float32 (U * 3,)         per unit (``reshape(U, 3)``): start and end in
                                                  the partial schedule (0 while unplaced), tail
``device_schedule``  Box float32 (D * 3,)         per device (``reshape(D, 3)``): when it is next
                                                  free; how much later than on the best device
                                                  the current unit could start there; how much
                                                  the estimate would grow if it went there
``partial_step_time`` Box float32 (1,)            the estimate of the partial placement
==================== ============================ ===============================================

``observation_to_data`` in ``rlplace.learn.env.pyg`` turns one into a ``torch_geometric.data.Data``;
``rlplace.learn.env.sb3.GraphExtractor`` is a GCN over it for Stable-Baselines3 policies.
``action_masks()`` (sequential mode) gives the devices that can still take the current unit,
as sb3-contrib's ``MaskablePPO`` expects; ``DeviceMask`` adds it to the observation.

The environment pickles (``pickle.dumps(env)``), so ``SubprocVecEnv`` and friends can ship it.

Accounting: ``env.accounting`` holds the placements evaluated by the backend, the cache hits
(an identical placement is never evaluated twice), the seconds spent simulating and measuring,
and the best valid placement so far with its step time. ``info`` carries the number evaluated
and the best step time; wall-clock times and cache hits stay on ``env.accounting``, because
``info`` must be the same for the same seed and actions (Gymnasium's determinism contract).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from cachetools import LRUCache
from gymnasium import spaces

from rlplace.backends import Backend, make_backend
from rlplace.cluster import Cluster, load_preset
from rlplace.coarsen import CoarseGraph
from rlplace.learn.env.partial import DEVICE_VALUES, UNIT_VALUES, PartialSchedule
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers.celeritas.orders import cpd_topo
from rlplace.sim import StepResult, simulate
from rlplace.zoo import load_graph



def _minus_sqrt(step_time: float) -> float:
    return -math.sqrt(step_time)


def _minus(step_time: float) -> float:
    return -step_time


def _minus_log(step_time: float) -> float:
    if not step_time > 0:
        raise ConfigError(f"reward='log' needs a step time > 0, got {step_time!r} s (reward='linear' or 'sqrt' "
                          "take a step of zero seconds)")
    return -math.log(step_time)


REWARDS = {"sqrt": _minus_sqrt, "linear": _minus, "log": _minus_log}
OOM_PENALTIES = {"hierarchical_planner": {"reward": -10.0}, "mars": {"step_time": 100.0}}
SHAPE_DIMS = 4
NUM_FEATURES = 4 + 2 * SHAPE_DIMS  # per unit in the ``features`` observation


@dataclass
class Accounting:
    """What the papers report about a search: how much was evaluated, at what cost, and the best."""

    evaluations: int = 0
    cache_hits: int = 0
    simulate_time: float = 0.0
    measure_time: float = 0.0
    best_step_time: float = math.inf
    best_placement: Placement | None = None

    def as_info(self) -> dict[str, Any]:
        """The part that depends only on which distinct placements were evaluated."""
        return {"evaluations": self.evaluations, "best_step_time": self.best_step_time}


class PlacementEnv(gym.Env):
    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, graph: OpGraph | str = "layered", cluster: Cluster | str = "baechi_2080",
                 backend: Backend | str = "sim", *, mode: str = "one_shot",
                 grouping: CoarseGraph | Sequence[int] | None = None,
                 order: str | Sequence[int] = "topological", reward: str = "sqrt",
                 oom_penalty: str | float = "hierarchical_planner", step_time_limit: float | None = None,
                 shaping: bool | str = False, schedule_features: bool = False, cache_size: int = 100_000,
                 graph_options: dict | None = None, backend_options: dict | None = None,
                 render_mode: str | None = None):
        self.graph = load_graph(graph, **(graph_options or {})) if isinstance(graph, str) else graph
        self.cluster = load_preset(cluster) if isinstance(cluster, str) else cluster
        self.backend = make_backend(backend, **(backend_options or {})) if isinstance(backend, str) else backend
        for name, value, kind, what in (("graph", self.graph, OpGraph, "an OpGraph, a preset name or a graph file"),
                                        ("cluster", self.cluster, Cluster, "a Cluster or a preset name"),
                                        ("backend", self.backend, Backend, "a Backend, 'sim', 'tf' or 'torch'")):
            if not isinstance(value, kind):
                raise ConfigError(f"{name} must be {what}, got {type(value).__name__} {value!r:.60}")
        if mode not in ("one_shot", "sequential"):
            raise ConfigError(f"mode must be 'one_shot' or 'sequential', got {mode!r}")
        if not isinstance(reward, str) or reward not in REWARDS:
            raise ConfigError(f"reward must be one of {sorted(REWARDS)}, got {reward!r}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if shaping not in (False, True, "schedule"):
            raise ConfigError(f"shaping must be False, True or 'schedule', got {shaping!r}")
        if step_time_limit is not None and not (isinstance(step_time_limit, (int, float, np.number)) and step_time_limit > 0):
            raise ConfigError(f"step_time_limit must be None or a number of seconds > 0, got {step_time_limit!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size < 0:
            raise ConfigError(f"cache_size must be an integer >= 0 (placements remembered), got {cache_size!r}")
        if schedule_features and mode != "sequential":
            raise ConfigError("schedule_features needs the sequential mode (one unit per step)")
        self.mode, self.shaping, self.render_mode = mode, shaping, render_mode
        self.schedule_features = schedule_features
        self.step_time_limit = step_time_limit
        self._reward_of_time = REWARDS[reward]
        self._penalty = _penalty(oom_penalty, self._reward_of_time)

        self.units = _units(self.graph, grouping)
        self.num_units, self.num_devices = self.units.num_groups, self.cluster.num_devices
        self.order = _order(order, self.units, self.cluster)
        self._static = _static_observation(self.graph, self.cluster, self.units)
        self._unit_persistent = np.bincount(self.units.group_of, weights=self.graph.persistent_bytes,
                                            minlength=self.num_units)
        self._unit_compute = np.bincount(self.units.group_of, weights=self.graph.compute_time,
                                         minlength=self.num_units)
        self._unit_need = np.zeros(self.num_units)
        np.maximum.at(self._unit_need, self.units.group_of, self.graph.temporary_bytes + self.graph.output_total)
        self._unit_need += self._unit_persistent

        U, D, E = self.num_units, self.num_devices, len(self._static["edge_features"])
        num_types = int(self._static["op_type"].max(initial=0)) + 1
        self.observation_space = spaces.Dict({
            "op_type": spaces.Box(0, max(num_types - 1, 1), (U,), np.int64),
            "features": spaces.Box(0.0, 1.0, (U * NUM_FEATURES,), np.float32),
            "edge_index": spaces.Box(0, max(U - 1, 0), (2 * E,), np.int64),
            "edge_features": spaces.Box(0.0, 1.0, (E,), np.float32),
            "placement": spaces.Box(-1, D - 1, (U,), np.int64),
            "current_unit": spaces.Discrete(U + 1),
            "device_free_memory": spaces.Box(
                np.float32(1.0 - self.graph.persistent_bytes.sum() / self.cluster.memory.min()), 1.0, (D,), np.float32),
            "device_busy": spaces.Box(0.0, 1.0, (D,), np.float32),
        })
        if schedule_features:
            self.observation_space = spaces.Dict({
                **self.observation_space.spaces,
                "unit_schedule": spaces.Box(0.0, np.inf, (U * UNIT_VALUES,), np.float32),
                "device_schedule": spaces.Box(0.0, np.inf, (D * DEVICE_VALUES,), np.float32),
                "partial_step_time": spaces.Box(0.0, np.inf, (1,), np.float32)})
        self.action_space = spaces.MultiDiscrete([D] * U) if mode == "one_shot" else spaces.Discrete(D)
        self._partial = (PartialSchedule(self.units, self.cluster)
                         if mode == "sequential" and (schedule_features or shaping == "schedule") else None)

        self.accounting = Accounting()
        self._cache: LRUCache[Placement, StepResult] = LRUCache(maxsize=cache_size)
        self._placement = np.full(U, -1, dtype=np.int64)
        self._position = 0
        self._done = True
        self._partial_reward = 0.0
        self._last: tuple[Placement, StepResult] | None = None

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._placement[:] = -1
        self._position = 0
        self._done = False
        self._partial_reward = 0.0
        if self._partial is not None:
            self._partial.reset()
        return self._observation(), self.accounting.as_info()

    def step(self, action):
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended: call reset() before step()")
        if self.mode == "one_shot":
            self._placement[:] = self._check_action(action, (self.num_units,))
            self._position = self.num_units
        else:
            unit = self.order[self._position]
            self._placement[unit] = self._check_action(action, ())
            self._position += 1
            if self._partial is not None:
                self._partial.place(unit, self._placement[unit])
        self._done = self._position == self.num_units
        info = self.accounting.as_info()
        if self._done:
            placement = self.units.expand(self._placement)
            result = self.evaluate(placement)
            final = self.reward_of(result)
            reward = final - self._partial_reward if self.shaping else final
            info = {**self._result_info(placement, result), **self.accounting.as_info()}
        elif self.shaping:
            partial = self._partial_placement_reward()
            reward, self._partial_reward = partial - self._partial_reward, partial
        else:
            reward = 0.0
        return self._observation(), float(reward), self._done, False, info

    def action_masks(self) -> np.ndarray:
        """Sequential mode: 1 for every device that can still take the current unit, as
        sb3-contrib's ``MaskablePPO`` asks for. A device is masked when its persistent bytes, plus
        the unit's, plus the largest temporary and output bytes of one of the unit's ops, exceed
        its memory: such a placement surely runs out of memory. If every device is full, none is
        masked (best effort)."""
        if self.mode != "sequential":
            raise ConfigError("action_masks needs the sequential mode (one unit per step)")
        unit = self.order[min(self._position, self.num_units - 1)]
        placed = self._placement >= 0
        persistent = np.bincount(self._placement[placed], weights=self._unit_persistent[placed],
                                 minlength=self.num_devices)
        mask = persistent + self._unit_need[unit] <= self.cluster.memory
        return mask if mask.any() else np.ones_like(mask)

    def render(self):
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "rgb_array":
            from rlplace.report import figure_to_rgb, schedule_figure

            schedule, title = None, "no placement evaluated yet"
            if self._last is not None:
                placement, result = self._last
                schedule = simulate(self.graph, self.cluster, placement, trace=True).schedule
                title = f"{self.graph.name}: step time {result.step_time * 1e3:.3f} ms"
            return figure_to_rgb(schedule_figure(self.graph, self.cluster, schedule, title))
        return None

    # ------------------------------------------------------------------------------ evaluation
    def evaluate(self, placement: Placement) -> StepResult:
        """The backend's result for an op placement; identical placements come from the cache."""
        return self.evaluate_batch([placement])[0]

    def evaluate_batch(self, placements: Sequence[Placement]) -> list[StepResult]:
        """The backend's results for several placements, in order. The ones not in the cache
        (each distinct placement once) go to the backend together: a backend with
        ``evaluate_batch`` (``rlplace.distributed.RayBackend``) evaluates them concurrently."""
        results: list[StepResult | None] = []
        fresh: dict[Placement, list[int]] = {}
        for i, placement in enumerate(placements):
            if placement in self._cache:
                self.accounting.cache_hits += 1
                results.append(self._cache[placement])
            else:
                self.accounting.cache_hits += placement in fresh
                fresh.setdefault(placement, []).append(i)
                results.append(None)
        if fresh:
            start = time.perf_counter()
            evaluated = self.backend.evaluate_batch(self.graph, self.cluster, list(fresh))
            elapsed = time.perf_counter() - start
            if self.backend.simulated:
                self.accounting.simulate_time += elapsed
            else:
                self.accounting.measure_time += elapsed
            for (placement, where), result in zip(fresh.items(), evaluated):
                self._remember(placement, result)
                for i in where:
                    results[i] = result
        if results:
            self._last = (placements[-1], results[-1])
        return results

    def step_batch(self, actions) -> list[tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]]:
        """One-shot mode: k episodes at once, one per action (a device per unit); their
        placements are evaluated together (``evaluate_batch``). Returns what ``step`` returns,
        for each; the environment is left done, as after a one-shot ``step``."""
        if self.mode != "one_shot":
            raise ConfigError("step_batch needs mode='one_shot'")
        actions = [self._check_action(action, (self.num_units,)) for action in actions]
        placements = [self.units.expand(action) for action in actions]
        results = self.evaluate_batch(placements)
        self._position, self._done = self.num_units, True
        steps = []
        for action, placement, result in zip(actions, placements, results):
            self._placement[:] = action
            info = {**self._result_info(placement, result), **self.accounting.as_info()}
            steps.append((self._observation(), float(self.reward_of(result)), True, False, info))
        return steps

    def _remember(self, placement: Placement, result: StepResult) -> None:
        self.accounting.evaluations += 1
        if self._cache.maxsize:
            self._cache[placement] = result
        if self.is_valid(result) and result.step_time < self.accounting.best_step_time:
            self.accounting.best_step_time = result.step_time
            self.accounting.best_placement = placement

    def reward_of(self, result: StepResult) -> float:
        """The reward for a backend result: the penalty if invalid, else f(step time)."""
        return self.reward_of_step_time(result.step_time) if self.is_valid(result) else self._penalty

    def reward_of_step_time(self, step_time: float) -> float:
        return self._reward_of_time(step_time)

    def is_valid(self, result: StepResult) -> bool:
        """Neither out of memory nor slow: the placement earns its step time's reward."""
        return not (result.oom or self._slow(result))

    def _slow(self, result: StepResult) -> bool:
        """Over the environment's own limit, or stopped at the backend's (Mars §3.4)."""
        return result.timed_out or (self.step_time_limit is not None and result.step_time > self.step_time_limit)

    def _result_info(self, placement: Placement, result: StepResult) -> dict[str, Any]:
        return {"step_time": result.step_time, "oom": result.oom,
                "slow": self._slow(result),
                "peak_memory": result.peak_memory.copy(), "placement": placement.device_of.copy()}

    def _partial_placement_reward(self) -> float:
        if self.shaping == "schedule":
            estimate = self._partial.estimate
            return self.reward_of_step_time(estimate) if estimate > 0 else 0.0
        result = simulate(self.graph, self.cluster, self._placement[self.units.group_of], partial=True)
        return self.reward_of(result) if result.step_time > 0 else 0.0

    # ------------------------------------------------------------------------------ helpers
    def _check_action(self, action, shape: tuple) -> np.ndarray:
        try:
            action = np.asarray(action)
        except (ValueError, TypeError) as exc:  # ragged lists, objects numpy cannot hold
            raise PlacementError(f"action is not an array of device indices ({str(exc).splitlines()[0]})") from None
        if action.shape != shape:
            what = f"one device per unit ({self.num_units})" if shape else "a single device index"
            raise PlacementError(f"action has shape {action.shape}; the {self.mode} mode takes {what}")
        if action.size and not np.issubdtype(action.dtype, np.integer):
            raise PlacementError(f"actions are device indices (integers), got dtype {action.dtype}")
        if np.any((action < 0) | (action >= self.num_devices)):
            raise PlacementError(f"action has a device index out of range 0..{self.num_devices - 1}: "
                                 f"{action[(action < 0) | (action >= self.num_devices)].ravel()[0]}")
        return action.astype(np.int64)

    def _observation(self) -> dict[str, np.ndarray]:
        placed = self._placement >= 0
        persistent = np.bincount(self._placement[placed], weights=self._unit_persistent[placed],
                                 minlength=self.num_devices)
        busy = np.bincount(self._placement[placed], weights=self._unit_compute[placed],
                           minlength=self.num_devices)
        total = max(self.graph.total_compute, 1e-30)
        current = self.order[self._position] if self._position < self.num_units else self.num_units
        schedule = self._partial.features(current) if self.schedule_features else {}
        return {**{key: value.copy() for key, value in self._static.items()}, "placement": self._placement.copy(),
                "current_unit": np.int64(current),
                "device_free_memory": (1.0 - persistent / self.cluster.memory).astype(np.float32),
                "device_busy": (busy / total).astype(np.float32), **schedule}

    def _render_text(self) -> str:
        placed = self._placement >= 0
        ops = self._placement[self.units.group_of]
        lines = [f"{self.graph.name} on {self.cluster.name or 'cluster'}: "
                 f"{int(placed.sum())}/{self.num_units} units placed"]
        lines.append(f"{'device':<20} {'units':>6} {'ops':>7} {'compute (ms)':>13} {'persistent (GiB)':>17}")
        for d, dev in enumerate(self.cluster.devices):
            on = ops == d
            lines.append(f"{dev.name:<20} {int(np.sum(self._placement == d)):>6} {int(on.sum()):>7} "
                         f"{self.graph.compute_time[on].sum() * 1e3:>13.3f} "
                         f"{self.graph.persistent_bytes[on].sum() / 2**30:>17.3f}")
        if self._last is not None:
            result = self._last[1]
            lines.append(f"last step time {result.step_time * 1e3:.3f} ms" + (" (OOM)" if result.oom else ""))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- set-up
def _units(graph: OpGraph, grouping) -> CoarseGraph:
    if grouping is None:
        return CoarseGraph.colocation(graph)
    units = grouping if isinstance(grouping, CoarseGraph) else CoarseGraph.from_labels(graph, grouping)
    if units.graph is not graph:
        raise ConfigError("the grouping was made for another graph")
    return units.merged_with_colocation()


def _order(order, units: CoarseGraph, cluster: Cluster) -> np.ndarray:
    """Units in ``topological`` order (by first op), in ``cpd_topo`` order (Celeritas §5.1.3:
    each unit at the CPD-TOPO position of its first op there), or a given permutation."""
    num_units = units.num_groups
    if isinstance(order, str):
        if order == "topological":
            return np.arange(num_units)
        if order == "cpd_topo":
            position = np.empty(units.graph.num_ops, dtype=np.int64)
            position[cpd_topo(units.graph, cluster)] = np.arange(units.graph.num_ops)
            first = np.full(num_units, units.graph.num_ops, dtype=np.int64)
            np.minimum.at(first, units.group_of, position)
            return np.argsort(first, kind="stable")
        raise ConfigError(f"order must be 'topological', 'cpd_topo' or a permutation of the units, got {order!r}")
    try:
        perm = np.asarray(order, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"order must be 'topological', 'cpd_topo' or a permutation of the units, "
                          f"got {order!r:.60}") from None
    if perm.shape != (num_units,) or not np.array_equal(np.sort(perm), np.arange(num_units)):
        raise ConfigError(f"order must be a permutation of the {num_units} units")
    return perm


def _penalty(oom_penalty, reward_of_time) -> float:
    if isinstance(oom_penalty, (int, float)) and not isinstance(oom_penalty, bool) and math.isfinite(oom_penalty):
        return float(oom_penalty)
    if not isinstance(oom_penalty, str) or oom_penalty not in OOM_PENALTIES:
        raise ConfigError(f"oom_penalty must be a finite number or one of {sorted(OOM_PENALTIES)}, "
                          f"got {oom_penalty!r:.60}")
    spec = OOM_PENALTIES[oom_penalty]
    return spec["reward"] if "reward" in spec else reward_of_time(spec["step_time"])


def _over_max(values: np.ndarray) -> np.ndarray:
    top = values.max(initial=0.0)
    return (values / top if top > 0 else np.zeros_like(values, dtype=float)).astype(np.float32)


def _static_observation(graph: OpGraph, cluster: Cluster, units: CoarseGraph) -> dict[str, np.ndarray]:
    """The parts of the observation that do not change: unit features and unit edges."""
    U = units.num_groups
    first = units.first_ops()
    types = sorted({t or "" for t in graph.op_type})
    type_id = {t: k for k, t in enumerate(types)}
    op_type = np.array([type_id[graph.op_type[i] or ""] for i in first], dtype=np.int64)

    def per_unit(values) -> np.ndarray:
        return np.bincount(units.group_of, weights=values, minlength=U)

    memory = graph.op_memory
    largest_dim = max((d for shapes_i in graph.output_shapes for shape in (shapes_i or []) for d in (shape or [])),
                      default=0)
    shapes = np.zeros((graph.num_ops, 2 * SHAPE_DIMS))
    for i in first:
        out = (graph.output_shapes[i] or [None])[0] or []
        shapes[i, :min(len(out), SHAPE_DIMS)] = out[:SHAPE_DIMS]
        k = graph.in_ptr[i]
        if k < graph.in_ptr[i + 1]:
            e = graph.in_edges[k]
            src, port = graph.edge_src[e], graph.edge_src_output[e]
            src_shapes = graph.output_shapes[src]
            inp = (src_shapes[port] if src_shapes and port >= 0 else None) or []
            shapes[i, SHAPE_DIMS:SHAPE_DIMS + min(len(inp), SHAPE_DIMS)] = inp[:SHAPE_DIMS]
    features = np.column_stack([
        _over_max(per_unit(graph.compute_time)),
        np.minimum(per_unit(memory) / cluster.memory.max(), 1.0).astype(np.float32),
        _over_max(per_unit(graph.output_total)),
        _over_max(np.bincount(units.group_of, minlength=U).astype(float)),
        shapes[first] / max(largest_dim, 1),
    ]).astype(np.float32)

    src, dst = units.group_of[graph.edge_src], units.group_of[graph.edge_dst]
    crossing = src != dst
    pairs, inverse = np.unique(np.stack([src[crossing], dst[crossing]]), axis=1, return_inverse=True)
    edge_bytes = np.zeros(pairs.shape[1])
    np.add.at(edge_bytes, inverse.reshape(-1), graph.edge_bytes[crossing])
    static = {"op_type": op_type, "features": features.reshape(-1), "edge_index": pairs.astype(np.int64).reshape(-1),
              "edge_features": _over_max(edge_bytes)}
    for value in static.values():
        value.flags.writeable = False
    return static
