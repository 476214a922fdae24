"""A finished schedule as data (``Schedule``), and what follows from it: the step time and the
peak memory per device (DESIGN.md's memory rules), computed the same way for the simulator's
schedule and for a placer's own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.graph import OpGraph
from rlplace.schedule.model import Model


@dataclass(frozen=True)
class Schedule:
    """When and where every op and transfer ran (seconds; device indices)."""

    op_device: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    transfer_src_op: np.ndarray
    transfer_src_output: np.ndarray
    transfer_src_device: np.ndarray
    transfer_dst_device: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    transfer_bytes: np.ndarray
    transfer_tensor: np.ndarray

    @property
    def step_time(self) -> float:
        """The finish time of the last op or transfer."""
        return max(float(self.op_end.max(initial=0.0)), float(self.transfer_end.max(initial=0.0)))


def schedule_of(m: Model, graph: OpGraph) -> Schedule:
    """The schedule held by model ``m`` of ``graph`` (copies)."""
    x = m.transfers
    nx = int(m.sent.count[0])
    tensors = x.tensor[:nx].copy()
    return Schedule(
        op_device=m.ops.device.copy(), op_start=m.ops.start.copy(), op_end=m.ops.end.copy(),
        transfer_src_op=graph.tensor_src[tensors], transfer_src_output=graph.tensor_port[tensors],
        transfer_src_device=m.ops.device[graph.tensor_src[tensors]], transfer_dst_device=x.device[:nx].copy(),
        transfer_start=x.start[:nx].copy(), transfer_end=x.end[:nx].copy(),
        transfer_bytes=graph.tensor_bytes[tensors], transfer_tensor=tensors)


def memory_peaks(graph: OpGraph, num_devices: int, schedule: Schedule) -> np.ndarray:
    """Peak bytes per device of ``schedule`` under DESIGN.md's rules: persistent bytes all step;
    an op's temporaries and unread outputs while it runs; an output from its producer's start
    until its last reader there has finished and its transfers are done; a received copy from
    its transfer's start until its last reader there has finished. A buffer is live from its
    allocation up to, not including, its release; one allocated and released at the same
    instant counts at that instant."""
    ndev, dev = num_devices, schedule.op_device
    start, end = schedule.op_start, schedule.op_end
    home = dev[graph.tensor_src]
    last_read = np.full(len(graph.tensor_src) * ndev, -np.inf)  # (tensor, device) -> last reader's end
    np.maximum.at(last_read, graph.edge_tensor * ndev + dev[graph.edge_dst], end[graph.edge_dst])
    held_until = last_read[np.arange(len(home)) * ndev + home]
    np.maximum.at(held_until, schedule.transfer_tensor, schedule.transfer_end)
    xt = schedule.transfer_tensor
    where = np.concatenate([dev, home, schedule.transfer_dst_device]).astype(np.int64)
    nbytes = np.concatenate([graph.temporary_bytes + graph.unread_output_bytes, graph.tensor_output_bytes,
                             np.where(graph.tensor_port[xt] >= 0, graph.tensor_bytes[xt], 0)])
    begin = np.concatenate([start, start[graph.tensor_src], schedule.transfer_start])
    until = np.concatenate([end, held_until, last_read[xt * ndev + schedule.transfer_dst_device]])
    keep = nbytes > 0
    where, nbytes, begin, until = where[keep], nbytes[keep], begin[keep], until[keep]
    # at one instant: releases of older buffers, then allocations, then releases of buffers
    # allocated at that instant
    times = np.concatenate([begin, until])
    rank = np.concatenate([np.ones(len(begin)), np.where(until > begin, 0, 2)])
    delta = np.concatenate([nbytes, -nbytes])
    devs = np.concatenate([where, where])
    order = np.lexsort((rank, times, devs))
    live = np.cumsum(delta[order])  # every buffer is released on its device: sums restart at 0
    peaks = np.zeros(ndev, dtype=np.int64)
    np.maximum.at(peaks, devs[order], live)
    persistent = np.zeros(ndev, dtype=np.int64)
    np.add.at(persistent, dev, graph.persistent_bytes)
    return peaks + persistent

