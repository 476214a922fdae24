"""A finished schedule as data (``Schedule``), and what follows from it: the step time and the
peak memory per device (docs/design.md's memory rules), computed the same way for the simulator's
schedule and for a placer's own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.graph import OpGraph
from rlplace.schedule.aliases import own_bytes, shared_input
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


def memory_peaks(graph: OpGraph, num_devices: int, schedule: Schedule,
                 memory_model: str = "default") -> np.ndarray:
    """Peak bytes per device of ``schedule`` under docs/design.md's rules: persistent bytes all step;
    an op's temporaries and unread outputs while it runs; an output from its producer's start
    until its last reader there has finished and its transfers are done; a received copy from
    its transfer's start until its last reader there has finished. A buffer is live from its
    allocation up to, not including, its release; one allocated and released at the same
    instant counts at that instant. With ``memory_model="tf_reuse"`` an output that shares an
    input's buffer (``rlplace.schedule.aliases``) has no bytes of its own and holds that buffer
    (the producer's copy, or the copy received on its device) until it is released itself."""
    ndev, dev = num_devices, schedule.op_device
    start, end = schedule.op_start, schedule.op_end
    home = dev[graph.tensor_src]
    ntensor = len(home)
    last_read = np.full(ntensor * ndev, -np.inf)  # (tensor, device) -> last reader's end
    np.maximum.at(last_read, graph.edge_tensor * ndev + dev[graph.edge_dst], end[graph.edge_dst])
    held_until = last_read[np.arange(ntensor) * ndev + home]
    np.maximum.at(held_until, schedule.transfer_tensor, schedule.transfer_end)
    xt = schedule.transfer_tensor
    until = np.concatenate([held_until, last_read[xt * ndev + schedule.transfer_dst_device]])
    shared = shared_input(graph, memory_model)
    if (shared >= 0).any():  # each sharing tensor holds its buffer: producer copies, then received ones
        received = np.full(ntensor * ndev, -1, dtype=np.int64)
        received[xt * ndev + schedule.transfer_dst_device] = np.arange(len(xt))
        buffer = np.arange(ntensor, dtype=np.int64)
        for t in np.flatnonzero(shared >= 0):
            a = shared[t]
            buffer[t] = buffer[a] if home[a] == home[t] else ntensor + received[a * ndev + home[t]]
        np.maximum.at(until, buffer, held_until)
    where = np.concatenate([dev, home, schedule.transfer_dst_device]).astype(np.int64)
    nbytes = np.concatenate([graph.temporary_bytes + graph.unread_output_bytes, own_bytes(graph, shared),
                             np.where(graph.tensor_port[xt] >= 0, graph.tensor_bytes[xt], 0)])
    begin = np.concatenate([start, start[graph.tensor_src], schedule.transfer_start])
    until = np.concatenate([end, until])
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



@dataclass(frozen=True)
class CriticalPath:
    """The chain of ops and transfers that ends last in a schedule, in time order: ``steps``
    are ("op", op index) and ("transfer", transfer index) pairs."""

    steps: tuple[tuple[str, int], ...]

    @property
    def ops(self) -> np.ndarray:
        return np.array([i for kind, i in self.steps if kind == "op"], dtype=np.int64)

    @property
    def transfers(self) -> np.ndarray:
        return np.array([i for kind, i in self.steps if kind == "transfer"], dtype=np.int64)


def critical_path(graph: OpGraph, schedule: Schedule) -> CriticalPath:
    """The critical path of a finished schedule: from the op that ends last, walk back through
    whatever it waited for last, until an op that waited for nothing. An op waits for its
    inputs (the local producer's end, or the end of the transfer that brought the tensor) and
    for the op run before it on its device; a transfer waits for its producer and, on a
    sequential channel, for the transfer before it on the sender's or the receiver's channel.
    Ties go to the data input. On a schedule with no idle gaps (the simulator's) the durations
    along the path add up to the step time."""
    if graph.num_ops == 0:
        return CriticalPath(())
    dev, start, end = schedule.op_device, schedule.op_start, schedule.op_end
    xs, xe = schedule.transfer_start, schedule.transfer_end
    ndev = int(max(dev.max(), schedule.transfer_dst_device.max(initial=0))) + 1
    transfer_to = {(int(t), int(d)): k for k, (t, d) in
                   enumerate(zip(schedule.transfer_tensor, schedule.transfer_dst_device))}
    before_op = _previous_in_queue(dev, start, end)
    before_send = _previous_in_queue(schedule.transfer_src_device, xs, xe)
    before_recv = _previous_in_queue(schedule.transfer_dst_device + ndev, xs, xe)

    step = ("op", int(np.lexsort((-np.arange(graph.num_ops), end))[-1]))  # last end; ties: lowest index
    steps, seen = [step], {step}
    while True:
        kind, i = step
        if kind == "op":
            candidates = []
            for e in graph.in_edges[graph.in_ptr[i]:graph.in_ptr[i + 1]]:
                src = int(graph.edge_src[e])
                k = transfer_to.get((int(graph.edge_tensor[e]), int(dev[i])))
                candidates.append(("op", src) if dev[src] == dev[i] or k is None else ("transfer", k))
            if before_op[i] >= 0:
                candidates.append(("op", int(before_op[i])))
            limit = start[i]
        else:
            candidates = [("op", int(schedule.transfer_src_op[i]))]
            candidates += [("transfer", int(k)) for k in (before_send[i], before_recv[i]) if k >= 0]
            limit = xs[i]
        ends = [end[j] if c == "op" else xe[j] for c, j in candidates]
        waited = [(t, -n) for n, t in enumerate(ends) if t <= limit]  # ties: the first candidate
        if not waited:
            break
        step = candidates[-max(waited)[1]]
        if step in seen:  # zero-length steps at one instant: nothing more to learn
            break
        steps.append(step)
        seen.add(step)
    return CriticalPath(tuple(reversed(steps)))


def _previous_in_queue(queue: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each item, the item run just before it in the same queue (-1: the first)."""
    order = np.lexsort((np.arange(len(queue)), end, start, queue))
    previous = np.full(len(queue), -1, dtype=np.int64)
    same = queue[order[1:]] == queue[order[:-1]]
    previous[order[1:][same]] = order[:-1][same]
    return previous
