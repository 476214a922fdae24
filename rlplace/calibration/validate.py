"""How well a fitted simulator ranks placements it was not fitted on (issue 19, item 1).

``held_out_split`` keeps the single-device placements (they fix the compute scale and the
speeds) and a stratified share of each other family for the fit, and holds out the rest;
``cross_validate`` fits ``folds`` times, each time without one fold of the non-single
placements, and scores the pooled out-of-fold predictions. ``scores``: Spearman's ρ and
Kendall's τ between simulated and measured step times (the ranking, what a placer needs) and the
median relative error (the scale).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from scipy.stats import kendalltau, spearmanr

from rlplace.errors import ConfigError


def scores(simulated: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    sim, real = np.asarray(simulated, dtype=float), np.asarray(measured, dtype=float)
    if len(sim) < 3:
        return {"spearman": math.nan, "kendall_tau": math.nan, "median_relative_error": math.nan,
                "placements": int(len(sim))}
    return {"spearman": float(spearmanr(sim, real).statistic), "kendall_tau": float(kendalltau(sim, real).statistic),
            "median_relative_error": float(np.median(np.abs(sim - real) / real)), "placements": int(len(sim))}


def held_out_split(families: list[str], fraction: float, seed: int = 0) -> np.ndarray:
    """A mask of the placements held out: ``fraction`` of each family but ``single``
    (rounded, at least one of every family of two or more), chosen at random."""
    if not 0 < fraction < 1:
        raise ConfigError(f"held_out must lie in (0, 1), got {fraction!r}")
    rng = np.random.default_rng(seed)
    fam = np.array(families, dtype=object)
    out = np.zeros(len(fam), dtype=bool)
    for f in sorted(set(families) - {"single"}):
        members = rng.permutation(np.flatnonzero(fam == f))
        if len(members) >= 2:
            out[members[:max(1, round(fraction * len(members)))]] = True
    return out


def cross_validate(families: list[str], folds: int, predict: Callable[[np.ndarray, np.ndarray], np.ndarray],
                   seed: int = 0) -> np.ndarray:
    """Out-of-fold predictions for every placement but the single-device ones (nan there):
    ``predict(train_mask, test_mask)`` fits on the one and returns the other's step times."""
    if folds < 2:
        raise ConfigError(f"cv_folds must be >= 2 (or 0: no cross-validation), got {folds!r}")
    others = np.random.default_rng(seed).permutation(np.flatnonzero(np.array(families, dtype=object) != "single"))
    out = np.full(len(families), np.nan)
    for fold in np.array_split(others, min(folds, len(others))):
        test = np.zeros(len(families), dtype=bool)
        test[fold] = True
        out[test] = predict(~test, test)
    return out
