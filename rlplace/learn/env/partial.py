"""The schedule of a partial placement: what sequential mode knows while units are being placed.

The ops placed so far run as the simulator would run them (``simulate(partial=True)``: the
graph induced by the placed ops, on the shared execution model of ``rlplace.schedule``). The
unplaced ops are costed optimistically: every placed op must still be followed by its *tail*,
the longest compute-only path from it to an exit with every op on the fastest device (the
``blevel`` of list scheduling without communication, less the op itself). The *estimate* is

    max over placed ops of (end in the partial schedule + tail),

the step time if nothing still to be placed waited for a device or a transfer. With every op
placed it is the simulator's step time: in a complete schedule every op is followed by a chain
of its successors down to an exit, which takes at least its tail. ``PlacementEnv(shaping=
"schedule")`` pays each step the change of the reward of the estimate, so the rewards of an
episode still add up to the reward of the final placement.

``features`` are the observation entries of ``PlacementEnv(schedule_features=True)``. Times
of the schedule are over ``scale`` (the lower bound of ``rlplace.sim.lower_bound``): per unit
its start, end and tail, per device when it is next free. The choice for the unit to place
now is in units of ``choice_scale`` (the mean compute time of a unit on the fastest device),
so that one unit's worth of difference between two devices is about 1: per device how much
later than on the best device the unit could start there (its inputs from placed units
present, each at its producer's end plus one transfer from another device; the device free)
and how much the estimate would grow if it went there, the unit taken as one block (the
earliest-finish-time rule of ETF/m-ETF, Baechi §3.2, with the tail added, as in critical-path
list scheduling).
"""

from __future__ import annotations

import numpy as np

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.sim import lower_bound, simulate

UNIT_VALUES = 3    # per unit in ``unit_schedule``: start, end, tail
DEVICE_VALUES = 3  # per device in ``device_schedule``: free at, later start of the current unit, growth of the estimate


class PartialSchedule:
    """The partial schedule of one environment's units; ``place`` adds units, ``reset`` clears."""

    def __init__(self, units: CoarseGraph, cluster: Cluster):
        graph = units.graph
        self.units, self.cluster = units, cluster
        self.num_units, self.num_devices = units.num_groups, cluster.num_devices
        fastest = float(cluster.speeds.max())
        self.tail = graph.bottom_levels(fastest) - graph.compute_time / fastest
        self.scale = lower_bound(graph, cluster) or 1.0
        self.speeds = np.asarray(cluster.speeds, dtype=np.float64)
        self.unit_compute = np.bincount(units.group_of, weights=graph.compute_time, minlength=self.num_units)
        self.choice_scale = float(self.unit_compute.sum()) / max(self.num_units, 1) / fastest or 1.0
        self.unit_tail = np.zeros(self.num_units)
        np.maximum.at(self.unit_tail, units.group_of, self.tail)
        # the inputs of each unit from other units, grouped by unit (CSR)
        src_unit, dst_unit = units.group_of[graph.edge_src], units.group_of[graph.edge_dst]
        crossing = np.flatnonzero(src_unit != dst_unit)
        crossing = crossing[np.argsort(dst_unit[crossing], kind="stable")]
        self._in_ptr = np.searchsorted(dst_unit[crossing], np.arange(self.num_units + 1))
        self._in_src = graph.edge_src[crossing]
        self._in_time = np.asarray(cluster.comm.transfer_time(graph.edge_bytes[crossing]), dtype=np.float64)
        self.reset()

    def reset(self) -> None:
        n = self.units.graph.num_ops
        self.device_of = np.full(n, -1, dtype=np.int64)
        self.start, self.end = np.zeros(n), np.zeros(n)
        self.estimate = 0.0

    def place(self, units, devices) -> float:
        """Put ``units`` on ``devices`` (a unit index and a device, or arrays of both) and
        schedule again; returns the new estimate (seconds)."""
        unit_device = np.full(self.num_units, -1, dtype=np.int64)
        unit_device[units] = devices
        ops = unit_device[self.units.group_of]
        self.device_of = np.where(ops >= 0, ops, self.device_of)
        schedule = simulate(self.units.graph, self.cluster, self.device_of, trace=True, partial=True).schedule
        self.start, self.end = schedule.op_start, schedule.op_end
        placed = self.device_of >= 0
        self.estimate = float((self.end[placed] + self.tail[placed]).max(initial=0.0))
        return self.estimate

    def features(self, current: int) -> dict[str, np.ndarray]:
        """The ``unit_schedule``, ``device_schedule`` and ``partial_step_time`` observation entries
        with unit ``current`` to place next (``num_units``: none)."""
        U, D, group = self.num_units, self.num_devices, self.units.group_of
        placed = self.device_of >= 0
        unit_start = np.full(U, np.inf)
        np.minimum.at(unit_start, group[placed], self.start[placed])
        unit_end = np.zeros(U)
        np.maximum.at(unit_end, group[placed], self.end[placed])
        unit = np.column_stack([np.where(np.isfinite(unit_start), unit_start, 0.0), unit_end, self.unit_tail])
        free_at = np.zeros(D)
        np.maximum.at(free_at, self.device_of[placed], self.end[placed])
        later, growth = np.zeros(D), np.zeros(D)
        if current < U:
            src = self._in_src[self._in_ptr[current]:self._in_ptr[current + 1]]
            time = self._in_time[self._in_ptr[current]:self._in_ptr[current + 1]]
            known = self.device_of[src] >= 0
            src, time = src[known], time[known]
            arrival = self.end[src, None] + time[:, None] * (self.device_of[src, None] != np.arange(D))
            start = np.maximum(arrival.max(axis=0, initial=0.0), free_at)
            finish = start + self.unit_compute[current] / self.speeds + self.unit_tail[current]
            later = (start - start.min()) / self.choice_scale
            growth = np.maximum(finish - self.estimate, 0.0) / self.choice_scale
        device = np.column_stack([free_at / self.scale, later, growth])
        return {"unit_schedule": (unit / self.scale).astype(np.float32).reshape(-1),
                "device_schedule": device.astype(np.float32).reshape(-1),
                "partial_step_time": np.array([self.estimate / self.scale], dtype=np.float32)}
