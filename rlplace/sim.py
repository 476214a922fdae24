"""The execution simulator: runs one training step of a placed OpGraph on a Cluster.

It follows Baechi's execution simulator (Baechi §4.2), made precise in DESIGN.md:

* Each device has one compute queue and runs one op at a time, ``compute_time / speed`` long.
  An op is ready on its device once every input is present there; among its ready ops a device
  runs the one that became ready first, ties to the lower op index; it never idles while it has
  a ready op.
* A tensor read on another device is sent once per destination device when its producer
  finishes, and cached there. ``parallel`` transfers start at once and overlap freely;
  ``sequential`` transfers hold the sender's send channel and the receiver's receive channel,
  first come first served. Transfers overlap compute.
* Memory per device: persistent bytes for the whole step; temporary bytes from an op's start to
  its end; an output from its producer's start until its last reader on that device has
  finished and, on the producer's device, until its outgoing transfers are done; a received copy
  from its transfer's start until its last reader there has finished. Outputs nothing reads are
  freed when their producer ends. Peak memory above a device's size is an OOM for that device.
* The step time is the finish time of the last op or transfer.

Events at one instant are all handled (op ends, then transfer ends, then transfer starts, each by
index) before idle devices pick their next op, so simultaneous readiness is ordered by op index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.errors import PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement


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


@dataclass(frozen=True)
class StepResult:
    """What a Backend reports for one placement. ``timed_out``: a measuring backend stopped
    the placement because a step exceeded its step-time limit (Mars §3.4); ``step_time`` is
    then the time seen so far, at least the limit."""

    step_time: float
    oom: bool
    oom_devices: tuple[int, ...]
    peak_memory: np.ndarray
    busy_time: np.ndarray | None = None
    num_transfers: int = 0
    transfer_bytes: int = 0
    schedule: Schedule | None = field(default=None, repr=False)
    timed_out: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no schedule)."""
        return {
            "step_time": float(self.step_time),
            "oom": bool(self.oom),
            "oom_devices": [int(d) for d in self.oom_devices],
            "peak_memory": [int(b) for b in self.peak_memory],
            "busy_time": None if self.busy_time is None else [float(b) for b in self.busy_time],
            "num_transfers": int(self.num_transfers),
            "transfer_bytes": int(self.transfer_bytes),
            "timed_out": bool(self.timed_out),
        }


def simulate(graph: OpGraph, cluster: Cluster, placement, trace: bool = False) -> StepResult:
    """Simulate one training step of ``graph`` placed by ``placement`` (a Placement or an array
    of device indices, one per op) on ``cluster``. With ``trace=True`` the result carries the
    Schedule. Colocation is not checked here (``Placement.validate`` does that)."""
    dev = np.asarray(placement.device_of if isinstance(placement, Placement) else placement)
    if dev.shape != (graph.num_ops,):
        raise PlacementError(f"placement has shape {dev.shape} but graph {graph.name!r} has "
                             f"{graph.num_ops} ops")
    dev = dev.astype(np.int64, copy=False)
    ndev = cluster.num_devices
    if graph.num_ops and (dev.min() < 0 or dev.max() >= ndev):
        i = int(np.flatnonzero((dev < 0) | (dev >= ndev))[0])
        raise PlacementError(f"op {graph.names[i]!r}: device index {int(dev[i])} out of range "
                             f"(cluster has {ndev} devices)")

    comm = cluster.comm
    duration = graph.compute_time / cluster.speeds[dev]
    alloc_at_start = graph.temporary_bytes + graph.output_total
    free_at_end = graph.temporary_bytes + graph.unread_output_bytes
    persistent = np.zeros(ndev, dtype=np.int64)
    np.add.at(persistent, dev, graph.persistent_bytes)
    recv_bytes = np.where(graph.tensor_port >= 0, graph.tensor_bytes, 0)

    (op_start, op_end, peak, busy, nx, x_tensor, x_dev, x_start, x_end) = _simulate(
        dev, ndev, duration, graph.in_ptr, graph.in_edges, graph.edge_src, graph.edge_dst,
        graph.edge_tensor, graph.op_tensor_ptr, graph.tensor_ptr, graph.tensor_src,
        graph.tensor_output_bytes, graph.tensor_bytes, recv_bytes, alloc_at_start, free_at_end,
        persistent, comm.latency, comm.seconds_per_byte, comm.mode == "sequential")

    step_time = max(op_end.max(initial=0.0), x_end[:nx].max(initial=0.0))
    oom_devices = tuple(int(d) for d in np.flatnonzero(peak > cluster.memory))
    schedule = None
    if trace:
        tensors = x_tensor[:nx]
        schedule = Schedule(
            op_device=dev.copy(), op_start=op_start, op_end=op_end,
            transfer_src_op=graph.tensor_src[tensors], transfer_src_output=graph.tensor_port[tensors],
            transfer_src_device=dev[graph.tensor_src[tensors]], transfer_dst_device=x_dev[:nx],
            transfer_start=x_start[:nx], transfer_end=x_end[:nx],
            transfer_bytes=graph.tensor_bytes[tensors])
    return StepResult(step_time=float(step_time), oom=bool(oom_devices), oom_devices=oom_devices,
                      peak_memory=peak, busy_time=busy, num_transfers=int(nx),
                      transfer_bytes=int(graph.tensor_bytes[x_tensor[:nx]].sum()), schedule=schedule)


# ------------------------------------------------------------------------------ the kernel
# Binary min-heaps on (float key, int key) pairs, stored in kf/ki[base : base + size].

@numba.njit(cache=True, inline="always")
def _less(af, ai, bf, bi):  # pragma: no cover - compiled
    return af < bf or (af == bf and ai < bi)


@numba.njit(cache=True)
def _push(kf, ki, base, size, f, i):  # pragma: no cover - compiled
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not _less(f, i, kf[base + parent], ki[base + parent]):
            break
        kf[base + pos] = kf[base + parent]
        ki[base + pos] = ki[base + parent]
        pos = parent
    kf[base + pos] = f
    ki[base + pos] = i
    return size + 1


@numba.njit(cache=True)
def _pop(kf, ki, base, size):  # pragma: no cover - compiled
    """Remove the smallest entry; returns (its float key, its int key, new size)."""
    top_f = kf[base]
    top_i = ki[base]
    size -= 1
    if size > 0:
        lf = kf[base + size]
        li = ki[base + size]
        pos = 0
        while True:
            c = 2 * pos + 1
            if c >= size:
                break
            if c + 1 < size and _less(kf[base + c + 1], ki[base + c + 1], kf[base + c], ki[base + c]):
                c += 1
            if not _less(kf[base + c], ki[base + c], lf, li):
                break
            kf[base + pos] = kf[base + c]
            ki[base + pos] = ki[base + c]
            pos = c
        kf[base + pos] = lf
        ki[base + pos] = li
    return top_f, top_i, size


_OP_END, _XFER_END, _XFER_START = 0, 1, 2


@numba.njit(cache=True)
def _simulate(dev, ndev, duration, in_ptr, in_edges, edge_src, edge_dst, edge_tensor,
              op_tensor_ptr, tensor_ptr, tensor_src, tensor_output_bytes, tensor_bytes,
              recv_bytes, alloc_at_start, free_at_end, persistent, latency, seconds_per_byte,
              sequential):  # pragma: no cover - compiled
    n = len(dev)
    m = len(edge_src)
    ntensor = len(tensor_src)
    kind_base = max(n, m) + 1  # event int key = kind * kind_base + id

    pending = np.zeros(n, dtype=np.int64)  # inputs not yet present on the op's device
    for i in range(n):
        pending[i] = in_ptr[i + 1] - in_ptr[i]
    hold = np.zeros(ntensor, dtype=np.int64)  # readers + transfers keeping a producer's output
    xfer_of = np.full(ntensor * ndev, -1, dtype=np.int64)  # (tensor, device) -> transfer
    x_tensor = np.empty(m, dtype=np.int64)
    x_dev = np.empty(m, dtype=np.int64)
    x_ref = np.zeros(m, dtype=np.int64)  # readers still needing the received copy
    x_start = np.empty(m)
    x_end = np.empty(m)
    nx = 0
    send_free = np.zeros(ndev)
    recv_free = np.zeros(ndev)

    mem = persistent.copy()
    peak = persistent.copy()
    busy = np.zeros(ndev)
    running = np.zeros(ndev, dtype=np.bool_)
    op_start = np.zeros(n)
    op_end = np.zeros(n)

    # One ready heap per device, each in its own slice of rf/ri; one global event heap.
    count = np.zeros(ndev, dtype=np.int64)
    for i in range(n):
        count[dev[i]] += 1
    rbase = np.zeros(ndev, dtype=np.int64)
    for d in range(1, ndev):
        rbase[d] = rbase[d - 1] + count[d - 1]
    rsize = np.zeros(ndev, dtype=np.int64)
    rf = np.empty(max(n, 1))
    ri = np.empty(max(n, 1), dtype=np.int64)
    ef = np.empty(n + 2 * m + 1)
    ei = np.empty(n + 2 * m + 1, dtype=np.int64)
    esize = 0

    for i in range(n):
        if pending[i] == 0:
            d = dev[i]
            rsize[d] = _push(rf, ri, rbase[d], rsize[d], 0.0, i)

    t = 0.0
    done = 0
    while True:
        # Idle devices start their earliest-ready op.
        for d in range(ndev):
            if not running[d] and rsize[d] > 0:
                _, i, rsize[d] = _pop(rf, ri, rbase[d], rsize[d])
                running[d] = True
                op_start[i] = t
                op_end[i] = t + duration[i]
                busy[d] += duration[i]
                mem[d] += alloc_at_start[i]
                if mem[d] > peak[d]:
                    peak[d] = mem[d]
                esize = _push(ef, ei, 0, esize, op_end[i], _OP_END * kind_base + i)
        if esize == 0:
            break
        # Handle every event of the next instant.
        t = ef[0]
        while esize > 0 and ef[0] == t:
            _, key, esize = _pop(ef, ei, 0, esize)
            kind = key // kind_base
            ident = key - kind * kind_base
            if kind == _OP_END:
                i = ident
                d = dev[i]
                running[d] = False
                done += 1
                mem[d] -= free_at_end[i]
                for k in range(in_ptr[i], in_ptr[i + 1]):  # release inputs
                    e = in_edges[k]
                    tt = edge_tensor[e]
                    if dev[edge_src[e]] == d:
                        hold[tt] -= 1
                        if hold[tt] == 0:
                            mem[d] -= tensor_output_bytes[tt]
                    else:
                        x = xfer_of[tt * ndev + d]
                        x_ref[x] -= 1
                        if x_ref[x] == 0:
                            mem[d] -= recv_bytes[tt]
                for tt in range(op_tensor_ptr[i], op_tensor_ptr[i + 1]):  # deliver outputs
                    first = nx
                    local = 0
                    for e in range(tensor_ptr[tt], tensor_ptr[tt + 1]):
                        c = edge_dst[e]
                        dc = dev[c]
                        if dc == d:
                            local += 1
                            pending[c] -= 1
                            if pending[c] == 0:
                                rsize[dc] = _push(rf, ri, rbase[dc], rsize[dc], t, c)
                        else:
                            x = xfer_of[tt * ndev + dc]
                            if x < 0:
                                x = nx
                                nx += 1
                                xfer_of[tt * ndev + dc] = x
                                x_tensor[x] = tt
                                x_dev[x] = dc
                            x_ref[x] += 1
                    hold[tt] = local + nx - first
                    for x in range(first, nx):
                        dc = x_dev[x]
                        length = latency + tensor_bytes[tt] * seconds_per_byte
                        start = t
                        if sequential:
                            start = max(t, send_free[d], recv_free[dc])
                            send_free[d] = start + length
                            recv_free[dc] = start + length
                        x_start[x] = start
                        x_end[x] = start + length
                        if start > t:
                            esize = _push(ef, ei, 0, esize, start, _XFER_START * kind_base + x)
                        else:
                            mem[dc] += recv_bytes[tt]
                            if mem[dc] > peak[dc]:
                                peak[dc] = mem[dc]
                            esize = _push(ef, ei, 0, esize, x_end[x], _XFER_END * kind_base + x)
            elif kind == _XFER_START:
                x = ident
                dc = x_dev[x]
                mem[dc] += recv_bytes[x_tensor[x]]
                if mem[dc] > peak[dc]:
                    peak[dc] = mem[dc]
                esize = _push(ef, ei, 0, esize, x_end[x], _XFER_END * kind_base + x)
            else:
                x = ident
                tt = x_tensor[x]
                dc = x_dev[x]
                hold[tt] -= 1
                if hold[tt] == 0:
                    mem[dev[tensor_src[tt]]] -= tensor_output_bytes[tt]
                for e in range(tensor_ptr[tt], tensor_ptr[tt + 1]):
                    c = edge_dst[e]
                    if dev[c] == dc:
                        pending[c] -= 1
                        if pending[c] == 0:
                            rsize[dc] = _push(rf, ri, rbase[dc], rsize[dc], t, c)
    if done != n:
        raise RuntimeError("simulation stalled: the graph is not a DAG")
    return op_start, op_end, peak, busy, nx, x_tensor, x_dev, x_start, x_end
