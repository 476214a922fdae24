"""Fit the simulator to measured step times by least squares (issue 19, item 1).

The parameters are those the simulator has (docs/design.md), as seen from
inside a real step:

* ``latency`` and ``seconds_per_byte`` of the CommModel: what one cross-device tensor costs in
  a step (the ``_Send``/``_Recv`` pair, the executor's hand-off), not in an isolated benchmark;
  ``mode`` (``parallel`` or ``sequential`` transfers) is chosen by the lower residual;
* ``speed`` of every device but the first (the reference), when asked (``fit_speeds``);
* a compute scale per op-type group: the ``op_type_groups`` op types with the most compute each
  get their own factor, all other ops share one (``other``). Profiled costs are biased where
  tracing overhead is large against the op (µs-sized ops), so the factors differ by type.

Residuals are relative, ``(simulated - measured) / measured``, so that fast and slow placements
weigh alike; the compute factors also get a weak prior towards the factor the single-device
placements give (``PRIOR``: a factor 2.7 away costs as much as a 10% miss on one placement),
which keeps the fit well posed with few placements. The step time is piecewise linear in the
parameters and has local minima; ``scipy.optimize.least_squares`` (trust region reflective,
bounds, finite differences) starts from the best few points of a grid over the latency and the
seconds per byte, for each mode. Confidence
intervals: the Gauss-Newton covariance ``s² (JᵀJ)⁻¹`` at the optimum (``s²``: the residual
variance), 95%, Student t. Each evaluation re-simulates every placement with the fitted
compute times (``simulate_many(..., compute_time=)``), no graph is built.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
from scipy import optimize, stats

from rlplace.cluster import COMM_MODES, Cluster, CommModel
from rlplace.costs import with_compute_time
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.sim import simulate_many

LATENCY_UNIT = 1e-5   # s: the latency parameter is fitted in these units
BYTE_UNIT = 1e-10     # s/B (10 GB/s)
PRIOR = 0.1
LATENCY_GRID = np.concatenate([[0.0], np.geomspace(1e-6, 1e-3, 7)])
BYTE_GRID = np.concatenate([[0.0], np.geomspace(1e-11, 1e-9, 5)])
STARTS = 4
OTHER = "other"


@dataclass(frozen=True)
class OpTypeGroups:
    """Which compute factor each op shares: the ``names`` of the groups (op types, then
    ``other``) and ``group_of`` per op."""

    names: tuple[str, ...]
    group_of: np.ndarray

    @classmethod
    def of(cls, graph: OpGraph, k: int) -> OpTypeGroups:
        """The ``k`` op types with the largest compute sum, each a group, and ``other``."""
        types = np.array([t or "" for t in graph.op_type], dtype=object)
        totals: dict[str, float] = {}
        for t, c in zip(types, graph.compute_time):
            totals[t] = totals.get(t, 0.0) + float(c)
        top = [t for t in sorted(totals, key=totals.get, reverse=True) if t][:k]
        group_of = np.full(graph.num_ops, len(top), dtype=np.int64)
        for g, t in enumerate(top):
            group_of[types == t] = g
        names = tuple(top) + ((OTHER,) if (group_of == len(top)).any() else ())
        return cls(names, group_of)


@dataclass(frozen=True)
class Params:
    """A point of the simulator's parameters."""

    latency: float
    seconds_per_byte: float
    mode: str
    speeds: tuple[float, ...]
    scales: dict[str, float]

    def compute_time(self, graph: OpGraph, groups: OpTypeGroups) -> np.ndarray:
        factor = np.array([self.scales[g] for g in groups.names])
        return graph.compute_time * factor[groups.group_of]

    def cluster(self, cluster: Cluster, name: str | None = None) -> Cluster:
        devices = tuple(replace(d, speed=float(s)) for d, s in zip(cluster.devices, self.speeds))
        return Cluster(devices, CommModel(float(self.latency), float(self.seconds_per_byte), self.mode),
                       cluster.name if name is None else name)


@dataclass
class Fit:
    """A fitted simulator: ``params`` with their 95% confidence intervals (``ci``: name ->
    (low, high)), R² of the simulated against the measured step times it was fitted on."""

    params: Params
    groups: OpTypeGroups
    ci: dict[str, tuple[float, float]]
    r2: float
    fitted_on: int
    mode_cost: dict[str, float] = field(default_factory=dict)

    def simulate(self, graph: OpGraph, cluster: Cluster, placements) -> np.ndarray:
        """Step times of ``placements`` under the fitted simulator."""
        return simulate_many(graph, self.params.cluster(cluster), placements,
                             compute_time=self.params.compute_time(graph, self.groups)).step_time

    def apply(self, graph: OpGraph, cluster: Cluster, name: str | None = None) -> tuple[OpGraph, Cluster]:
        """The cost-corrected graph and the calibrated cluster."""
        return (with_compute_time(graph, self.params.compute_time(graph, self.groups)),
                self.params.cluster(cluster, name))

    def table(self) -> list[dict[str, Any]]:
        """One row per parameter: name, value, 95% CI, unit."""
        p = self.params
        rows = [("latency", p.latency, "s per transfer"), ("seconds_per_byte", p.seconds_per_byte, "s/B")]
        rows += [(f"speed[{d}]", s, "relative") for d, s in enumerate(p.speeds) if f"speed[{d}]" in self.ci]
        rows += [(f"scale[{g}]", s, "× profiled compute") for g, s in p.scales.items()]
        return [{"parameter": name, "value": float(v), "ci": list(self.ci.get(name, (math.nan, math.nan))),
                 "unit": unit} for name, v, unit in rows]

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.params.mode, "parameters": self.table(), "r2": self.r2,
                "fitted_on": self.fitted_on, "mode_cost": self.mode_cost,
                "op_type_groups": list(self.groups.names)}


def fit(graph: OpGraph, cluster: Cluster, placements: np.ndarray, measured: np.ndarray,
        op_type_groups: int = 4, fit_speeds: bool = True, modes: Sequence[str] = COMM_MODES,
        max_evaluations: int = 200) -> Fit:
    """Least-squares fit of the simulator to ``measured`` step times (s) of ``placements``
    (k × ops); see the module docstring."""
    rows = np.asarray(placements, dtype=np.int64)
    y = np.asarray(measured, dtype=np.float64)
    if rows.ndim != 2 or len(rows) != len(y) or not len(y) or not np.all(np.isfinite(y) & (y > 0)):
        raise ConfigError(f"fit: need measured step times > 0, one per placement; got {len(y)} for {len(rows)}")
    bad = sorted(set(modes) - set(COMM_MODES))
    if bad or not modes:
        raise ConfigError(f"modes must be a non-empty subset of {list(COMM_MODES)}, got {list(modes)}")
    groups = OpTypeGroups.of(graph, op_type_groups)
    space = _Space(graph, cluster, groups, fit_speeds and cluster.num_devices > 1, rows, y)
    best, costs = None, {}
    for mode in modes:
        result = space.solve(mode, max_evaluations)
        costs[mode] = float(result.cost)
        if best is None or result.cost < best[1].cost:
            best = (mode, result)
    mode, result = best
    return Fit(space.params(result.x, mode), groups, space.intervals(result), space.r2(result.x, mode),
               len(y), costs)


@dataclass
class _Space:
    """The parameter vector: log compute factors, log device speeds (devices 1..), latency and
    seconds per byte in their units."""

    graph: OpGraph
    cluster: Cluster
    groups: OpTypeGroups
    fit_speeds: bool
    rows: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        self.ng = len(self.groups.names)
        self.nd = self.cluster.num_devices - 1 if self.fit_speeds else 0
        single = [r for r in range(len(self.rows)) if np.all(self.rows[r] == self.rows[r][0])]
        sums = [self.graph.total_compute / self.cluster.devices[self.rows[r][0]].speed for r in single]
        # the single-device placements' factor: where the compute factors start and are drawn to
        self.prior = math.log(np.median(self.y[single] / sums)) if single and self.graph.total_compute > 0 else 0.0

    def params(self, x: np.ndarray, mode: str) -> Params:
        ng, nd = self.ng, self.nd
        base = self.cluster.speeds
        speeds = (base[0], *(base[1:] * np.exp(x[ng:ng + nd]))) if nd else tuple(base)
        return Params(latency=float(x[-2]) * LATENCY_UNIT, seconds_per_byte=float(x[-1]) * BYTE_UNIT, mode=mode,
                      speeds=tuple(float(s) for s in speeds),
                      scales={g: float(math.exp(v)) for g, v in zip(self.groups.names, x[:ng])})

    def simulated(self, x: np.ndarray, mode: str) -> np.ndarray:
        p = self.params(x, mode)
        return simulate_many(self.graph, p.cluster(self.cluster), self.rows,
                             compute_time=p.compute_time(self.graph, self.groups)).step_time

    def residuals(self, x: np.ndarray, mode: str) -> np.ndarray:
        return np.concatenate([(self.simulated(x, mode) - self.y) / self.y, PRIOR * (x[:self.ng] - self.prior)])

    def solve(self, mode: str, max_evaluations: int) -> optimize.OptimizeResult:
        """Least squares from the ``STARTS`` best points of a grid over the latency and the
        seconds per byte (compute factors at the single-device factor); the best end point."""
        x0 = np.concatenate([np.full(self.ng, self.prior), np.zeros(self.nd), [0.0, 0.0]])
        grid = []
        for latency, per_byte in itertools.product(LATENCY_GRID, BYTE_GRID):
            x = x0.copy()
            x[-2:] = latency / LATENCY_UNIT, per_byte / BYTE_UNIT
            grid.append((float(np.sum(self.residuals(x, mode) ** 2)), x))
        grid.sort(key=lambda g: g[0])
        lower = np.concatenate([np.full(self.ng + self.nd, -5.0), [0.0, 0.0]])
        upper = np.concatenate([np.full(self.ng + self.nd, 5.0), [1e3, 1e5]])
        ends = [optimize.least_squares(self.residuals, x, args=(mode,), bounds=(lower, upper), diff_step=0.02,
                                       max_nfev=max_evaluations, x_scale="jac") for _, x in grid[:STARTS]]
        return min(ends, key=lambda r: r.cost)

    def intervals(self, result: optimize.OptimizeResult) -> dict[str, tuple[float, float]]:
        k, p = len(self.y), len(result.x)
        dof = k - p
        if dof < 1:
            return {}
        s2 = float(np.sum(result.fun[:k] ** 2)) / dof
        cov = s2 * np.linalg.pinv(result.jac.T @ result.jac)
        half = stats.t.ppf(0.975, dof) * np.sqrt(np.maximum(np.diag(cov), 0.0))
        x = result.x
        out = {f"scale[{g}]": (math.exp(x[i] - half[i]), math.exp(x[i] + half[i])) for i, g in enumerate(self.groups.names)}
        for d in range(self.nd):
            i, s = self.ng + d, self.cluster.speeds[d + 1]
            out[f"speed[{d + 1}]"] = (s * math.exp(x[i] - half[i]), s * math.exp(x[i] + half[i]))
        for i, name, unit in ((p - 2, "latency", LATENCY_UNIT), (p - 1, "seconds_per_byte", BYTE_UNIT)):
            out[name] = (max(x[i] - half[i], 0.0) * unit, (x[i] + half[i]) * unit)
        return out

    def r2(self, x: np.ndarray, mode: str) -> float:
        total = float(np.sum((self.y - self.y.mean()) ** 2))
        return 1.0 - float(np.sum((self.simulated(x, mode) - self.y) ** 2)) / total if total > 0 else math.nan
