"""Placing within memory, checked by the simulator.

A placer's memory plan is an estimate (Baechi §4.2 tracks memory in its own schedule,
Celeritas Algorithm 2 sums node memory in placement order); the simulator's first-come
first-served run of the same placement can hold tensors longer. ``fit_to_memory`` closes the
loop: it places with a memory budget per device, simulates the placement, and where a device
runs over its memory places again with a smaller budget there, for a few rounds. The new budget
is in the placer's own terms: the placer planned P bytes on the device, the simulator found S
above the device's M, so the placer's estimate is short by S / P and it may plan M * P / S.
A placement it returns as fitting fits in the simulator.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph
from rlplace.sim import simulate


def fit_to_memory(place: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], graph: OpGraph,
                  cluster: Cluster, budget: np.ndarray, rounds: int) -> np.ndarray:
    """``place(budget)`` -> (one device per op, the peak bytes the placer planned per device),
    placed with ``budget`` bytes per device. Tries at most ``rounds`` budgets (the first as
    given) and returns the first placement that fits, or the one that overflows least;
    ``rounds <= 1`` places once without checking."""
    device, planned = place(budget)
    if rounds <= 1:
        return device
    best, best_over = device, None
    for r in range(rounds):
        peak = simulate(graph, cluster, device).peak_memory
        over = np.maximum(peak - cluster.memory, 0)
        if not over.any():
            return device
        if best_over is None or over.sum() < best_over:
            best, best_over = device, over.sum()
        if r == rounds - 1:
            break
        short = over > 0
        budget = budget.copy()
        corrected = cluster.memory[short] * (np.minimum(planned[short], budget[short]) / peak[short])  # float: bytes² overflow int64
        budget[short] = np.minimum(budget[short] - 1, np.floor(corrected).astype(np.int64))
        budget = np.maximum(budget, 0)
        device, planned = place(budget)
    return best
