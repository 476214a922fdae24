"""Placing within memory, checked by the simulator.

A placer's memory plan is an estimate (Baechi §4.2 tracks memory in its own schedule,
Celeritas Algorithm 2 sums node memory in placement order); the simulator's first-come
first-served run of the same placement can hold tensors longer. ``fit_to_memory`` closes the
loop: it places with a memory budget per device, simulates the placement, and where a device
runs over its memory places again with a smaller budget there, for a few rounds. The new budget
is in the placer's own terms: the placer planned P bytes on the device, the simulator found S
above the device's M, so the placer's estimate is short by S / P and it may plan M * P / S.
A placement it returns as fitting fits in the simulator.

``fastest_fit`` also weighs placements the caller hands it ready-made: the list schedulers hand
it the whole graph on one device (``whole_graph_on_one_device``) where that runs within memory,
so they are never slower than ``single`` where ``single`` fits (their ``single_fallback``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph
from rlplace.sim import Schedule, StepResult, simulate


def fit_to_memory(place: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], graph: OpGraph,
                  cluster: Cluster, budget: np.ndarray, rounds: int) -> tuple[np.ndarray, StepResult]:
    """``place(budget)`` -> (one device per op, the peak bytes the placer planned per device),
    placed with ``budget`` bytes per device. Tries at most ``rounds`` budgets (the first as
    given) and returns the first placement that fits, or the one that overflows least, with the
    simulator's result of it; ``rounds <= 1`` places once and returns that placement."""
    device, result, _ = fitting_budget(place, graph, cluster, budget, rounds)
    return device, result


def fitting_budget(place: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], graph: OpGraph,
                   cluster: Cluster, budget: np.ndarray, rounds: int) -> tuple[np.ndarray, StepResult, np.ndarray]:
    """``fit_to_memory``, and the budget its placement was placed with."""
    best, best_over = None, None
    for _ in range(max(rounds, 1)):
        device, planned = place(budget)
        result = simulate(graph, cluster, device)
        peak = result.peak_memory
        over = np.maximum(peak - cluster.memory, 0)
        if not over.any() or rounds <= 1:
            return device, result, budget
        if best_over is None or over.sum() < best_over:
            best, best_over = (device, result, budget), over.sum()
        short = over > 0
        budget = budget.copy()
        corrected = cluster.memory[short] * (np.minimum(planned[short], budget[short]) / peak[short])  # float: bytes² overflow int64
        budget[short] = np.minimum(budget[short] - 1, np.floor(corrected).astype(np.int64))
        budget = np.maximum(budget, 0)
    return best


def fastest_fit(places: Sequence[Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]], graph: OpGraph,
                cluster: Cluster, budget: np.ndarray, rounds: int,
                placed: Sequence[tuple[np.ndarray, StepResult]] = ()) -> tuple[np.ndarray, StepResult]:
    """``fit_to_memory`` with each way to place in turn, then the ``placed`` placements with
    their results; the placement the simulator runs fastest among those that fit (among all
    when none fits; the first on ties) and its result."""
    best = None
    for device, result in [fit_to_memory(place, graph, cluster, budget, rounds) for place in places] + list(placed):
        if best is None or (result.oom, result.step_time) < (best[1].oom, best[1].step_time):
            best = device, result
    return best


def whole_graph_on_one_device(graph: OpGraph, cluster: Cluster) -> list[tuple[np.ndarray, StepResult]]:
    """Every op on one device, for each kind of device (memory, speed) where the simulator runs
    it within memory, with the simulator's result (its schedule traced: the placer's own
    schedule of that placement)."""
    out, seen = [], set()
    for d, dev in enumerate(cluster.devices):
        if (dev.memory_bytes, dev.speed) in seen:
            continue
        seen.add((dev.memory_bytes, dev.speed))
        device = np.full(graph.num_ops, d, dtype=np.int64)
        result = simulate(graph, cluster, device, trace=True)
        if not result.oom:
            out.append((device, result))
    return out


def known_of_one_device(graph: OpGraph, result: StepResult) -> tuple[int, np.ndarray, Schedule, np.ndarray]:
    """What a list scheduler knows of a ``whole_graph_on_one_device`` placement it returns:
    nodes placed, planned peak, own schedule (the simulator's) and its peak memory."""
    return graph.num_ops, result.peak_memory, result.schedule, result.peak_memory
