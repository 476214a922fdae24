"""Measurement you can trust on a noisy machine (issue 19, item 2).

``measure`` runs the design on a measuring backend (``backend=tf``) in interleaved rounds: each
round measures every placement once, in a new random order, so that a drift in the machine's
load hits all placements alike; warm-up measurements first (the worker's start, TensorFlow's
one-time set-up) are thrown away. Each measurement is itself the median of the backend's timed
steps after its warm-up steps (Hierarchical Planner §4). ``Measurements`` keeps every round:

* ``median``: per placement, the median over the rounds (what the fit uses);
* ``spread``: per placement, (max - min) / median over the rounds; its median over the
  placements is the *noise floor*;
* ``split_half``: the split-half reliability of the measurements themselves: the rounds split in
  two halves, the Spearman correlation between the halves' medians (averaged over the splits),
  stepped up to the full number of rounds (Spearman-Brown). Its square root is the *noise
  ceiling*: the best Spearman correlation any simulator can reach against these measurements,
  since the measurements do not agree that well with themselves (Spearman 1910). A simulator
  scoring near the ceiling is as right as the noise lets anyone tell.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from rlplace.backends import Backend
from rlplace.calibration.design import Design
from rlplace.cluster import Cluster
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.progress import progress_bar


@dataclass(frozen=True)
class SplitHalf:
    """Split-half reliability of a set of measured placements."""

    half_spearman: float   # the halves' medians against each other, mean over the splits
    reliability: float     # stepped up to all rounds: 2 r / (1 + r)
    ceiling: float         # sqrt(reliability): the best Spearman the noise allows
    placements: int

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Measurements:
    """Measured step times of named placements, one row per round (s; inf for an OOM)."""

    labels: list[str]
    families: list[str]
    placements: np.ndarray   # (k, ops) device indices
    rounds: np.ndarray       # (R, k) step times
    oom: np.ndarray          # (k,) bool: out of memory in some round
    num_transfers: np.ndarray  # (k,)

    def __post_init__(self) -> None:
        self.placements = np.asarray(self.placements, dtype=np.int64)
        self.rounds = np.atleast_2d(np.asarray(self.rounds, dtype=np.float64))
        self.oom = np.asarray(self.oom, dtype=bool)
        self.num_transfers = np.asarray(self.num_transfers, dtype=np.int64)
        k = len(self.labels)
        if not (len(self.families) == k and self.placements.shape[0] == k and self.rounds.shape[1] == k
                and self.oom.shape == (k,) and self.num_transfers.shape == (k,)):
            raise ConfigError(f"measurements: {k} labels but placements {self.placements.shape}, "
                              f"rounds {self.rounds.shape}, oom {self.oom.shape}")

    @property
    def median(self) -> np.ndarray:
        return np.median(self.rounds, axis=0)

    @property
    def spread(self) -> np.ndarray:
        """(max - min) / median over the rounds, per placement."""
        return (self.rounds.max(axis=0) - self.rounds.min(axis=0)) / self.median

    @property
    def fits(self) -> np.ndarray:
        """The placements that ran in memory every round (bool mask)."""
        return ~self.oom & np.all(np.isfinite(self.rounds), axis=0)

    def noise_floor(self, subset: np.ndarray | None = None) -> float:
        """The median over the placements of their spread over the rounds."""
        keep = self.fits if subset is None else self.fits & subset
        return float(np.median(self.spread[keep])) if keep.any() else math.nan

    def split_half(self, subset: np.ndarray | None = None) -> SplitHalf | None:
        """Split-half reliability of the placements that fit (and are in ``subset``); None
        with fewer than two rounds or three placements."""
        keep = self.fits if subset is None else self.fits & subset
        num_rounds = self.rounds.shape[0]
        if num_rounds < 2 or keep.sum() < 3:
            return None
        times = self.rounds[:, keep]
        rs = []
        for half in itertools.combinations(range(num_rounds), num_rounds // 2):
            other = [r for r in range(num_rounds) if r not in half]
            rho = spearmanr(np.median(times[list(half)], axis=0), np.median(times[other], axis=0)).statistic
            rs.append(0.0 if math.isnan(rho) else rho)
        r = float(np.mean(rs))
        reliability = 2 * r / (1 + r) if r > -1 else -1.0
        return SplitHalf(r, reliability, math.sqrt(max(reliability, 0.0)), int(keep.sum()))

    def take(self, mask: np.ndarray) -> Measurements:
        idx = np.flatnonzero(mask)
        return Measurements([self.labels[i] for i in idx], [self.families[i] for i in idx], self.placements[idx],
                            self.rounds[:, idx], self.oom[idx], self.num_transfers[idx])

    def as_dict(self) -> dict[str, Any]:
        """measurements.json: per placement its label, family, rounds and device per op."""
        return {"rounds": int(self.rounds.shape[0]), "placements": [
            {"label": label, "family": fam, "step_times": [float(t) for t in self.rounds[:, i]],
             "oom": bool(self.oom[i]), "num_transfers": int(self.num_transfers[i]),
             "device_of": self.placements[i].tolist()}
            for i, (label, fam) in enumerate(zip(self.labels, self.families))]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], num_ops: int, where: str = "measurements") -> Measurements:
        try:
            rows = data["placements"]
            out = cls([r["label"] for r in rows], [r["family"] for r in rows],
                      np.array([r["device_of"] for r in rows], dtype=np.int64).reshape(len(rows), -1),
                      np.array([r["step_times"] for r in rows], dtype=np.float64).T,
                      [r["oom"] for r in rows], [r["num_transfers"] for r in rows])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: not a measurements file ({type(exc).__name__}: {exc})") from None
        if out.placements.shape[1] != num_ops:
            raise ConfigError(f"{where}: placements of {out.placements.shape[1]} ops, but the graph has {num_ops}")
        return out


def measure(backend: Backend, graph: OpGraph, cluster: Cluster, plan: Design, rounds: int = 3,
            warmup: int = 1, seed: int = 0, progress: bool = True) -> Measurements:
    """Measure every placement of ``plan`` in ``rounds`` interleaved rounds, each in its own
    random order, after ``warmup`` measurements that are thrown away."""
    if rounds < 1 or warmup < 0:
        raise ConfigError(f"rounds must be >= 1 and warmup >= 0, got {rounds} and {warmup}")
    rng = np.random.default_rng(seed)
    k = len(plan)
    times = np.full((rounds, k), np.inf)
    oom = np.zeros(k, dtype=bool)
    transfers = np.zeros(k, dtype=np.int64)
    clear = backend.clear_cache  # a cached answer is no new measurement
    with progress_bar(total=warmup + rounds * k, desc="measuring", unit="step", leave=False, show=progress) as bar:
        for w in range(warmup):
            backend.evaluate(graph, cluster, Placement(plan.rows[w % k]))
            clear()
            bar.update()
        for r in range(rounds):
            for i in rng.permutation(k):
                result = backend.evaluate(graph, cluster, Placement(plan.rows[i]))
                times[r, i] = result.step_time
                oom[i] |= result.oom
                transfers[i] = result.num_transfers
                bar.update()
            clear()
    return Measurements(list(plan.labels), list(plan.families), plan.placements, times, oom, transfers)
