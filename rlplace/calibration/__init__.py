"""A simulator calibrated against real measurement (issue 19): ``design`` chooses placements
that separate the simulator's parameters, ``protocol`` measures them on a real backend with a
noise estimate, ``fit`` fits the parameters by least squares, ``validate`` scores the fit on
placements it did not see, ``files`` writes the calibrated cluster preset and the
cost-corrected graph. ``recalibrate`` is the refit ``rlplace.verify.VerifyingBackend`` runs as
measurements come in during a search or training run."""

from __future__ import annotations

import numpy as np

from rlplace.calibration import fit as fitting
from rlplace.cluster import Cluster
from rlplace.graph import OpGraph

__all__ = ["recalibrate"]

RECALIBRATE_EVALUATIONS = 40


def recalibrate(graph: OpGraph, cluster: Cluster, placements: np.ndarray,
                measured: np.ndarray) -> tuple[OpGraph, Cluster]:
    """``rlplace.verify.Recalibrate``: the graph and cluster fitted to the measured step times
    of ``placements`` so far. A smaller fit than ``rlplace-calibrate``'s, for few placements that
    are all near the best: one compute factor for all ops, the device speeds kept (a run's
    devices are often logical devices of one processor, and the top-k rarely puts much on a
    slow one), ``RECALIBRATE_EVALUATIONS`` simulator evaluations per mode."""
    result = fitting.fit(graph, cluster, placements, measured, op_type_groups=0, fit_speeds=False,
                 max_evaluations=RECALIBRATE_EVALUATIONS)
    return result.apply(graph, cluster)
