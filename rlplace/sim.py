"""The execution simulator: runs one training step of a placed OpGraph on a Cluster.

It follows Baechi's execution simulator (Baechi §4.2), made precise in docs/design.md:

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
  With the cluster's ``memory_model = "tf_reuse"`` an output may share an input's buffer
  (``rlplace.schedule.aliases``): it takes no bytes of its own and the buffer is held until the
  readers and transfers of every tensor sharing it are done.
* The step time is the finish time of the last op or transfer.

Events at one instant are all handled (op ends, then transfer ends, then transfer starts, each by
index) before idle devices pick their next op, so simultaneous readiness is ordered by op index.
Memory is taken when an instant is over: a buffer is live from its allocation up to, not
including, its release, and one allocated and released at the same instant counts at it.

The state and the operations (start an op, book a transfer, allocate and free memory) are the
execution model's (``rlplace.schedule``), shared with the list-scheduling placers; this module
is the event loop. ``simulate_many`` runs many placements of one graph in one call.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.errors import GraphError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.schedule import Model, Schedule, new_model, schedule_of
from rlplace.schedule.heap import pop, push
from rlplace.schedule.ops import alloc, book_transfer, duration, end_instant, free, free_buffer, start

__all__ = ["BatchResult", "Schedule", "StepResult", "lower_bound", "simulate", "simulate_many"]


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


@dataclass(frozen=True)
class BatchResult:
    """``simulate_many``'s results, one row per placement."""

    step_time: np.ndarray    # (k,)
    oom: np.ndarray          # (k,) bool
    peak_memory: np.ndarray  # (k, devices)


def simulate(graph: OpGraph, cluster: Cluster, placement, trace: bool = False, partial: bool = False) -> StepResult:
    """Simulate one training step of ``graph`` placed by ``placement`` (a Placement or an array
    of device indices, one per op) on ``cluster``. With ``trace=True`` the result carries the
    Schedule. Colocation is not checked here (``Placement.validate`` does that).

    ``partial=True``: ops on device -1 are not placed yet and left out, as in the graph induced
    by the placed ops (an input from an unplaced op is there from the start; a tensor read only
    by unplaced ops is freed when its producer ends; with ``tf_reuse``, an output that would
    share an unplaced op's buffer counts no bytes); in the schedule they start and end at 0."""
    dev = np.asarray(placement.device_of if isinstance(placement, Placement) else placement)
    rows = _device_rows(graph, cluster, dev[None, ...], partial)
    with _LOCK:
        m = _model(graph, cluster)
        step_time, peak = _run(m, rows, cluster, partial=partial and bool(np.any(rows < 0)))
        nx = int(m.sent.count[0])
        busy = m.devices.busy.copy()
        transfer_bytes = int(graph.tensor_bytes[m.transfers.tensor[:nx]].sum())
        schedule = schedule_of(m, graph) if trace else None
    oom_devices = tuple(int(d) for d in np.flatnonzero(peak[0] > cluster.memory))
    return StepResult(step_time=float(step_time[0]), oom=bool(oom_devices), oom_devices=oom_devices,
                      peak_memory=peak[0], busy_time=busy, num_transfers=nx, transfer_bytes=transfer_bytes,
                      schedule=schedule)


def simulate_many(graph: OpGraph, cluster: Cluster, placements, compute_time=None) -> BatchResult:
    """Simulate every row of ``placements`` (k × ops device indices) in one compiled call;
    the same numbers as ``simulate`` row by row, without the per-call overhead. ``compute_time``
    (per op, s) stands in for the graph's own, as if the graph had those costs: what a fit of
    the costs (``rlplace.calibration``) simulates many times without building a graph each time."""
    rows = np.asarray(placements)
    if rows.ndim != 2:
        raise PlacementError(f"placements must be a 2-d array (placements × ops), got shape {rows.shape}")
    rows = _device_rows(graph, cluster, rows) if len(rows) else np.zeros((0, graph.num_ops), dtype=np.int64)
    with _LOCK:
        m = _model(graph, cluster)
        if compute_time is not None:
            m = m._replace(graph=m.graph._replace(compute=_costs(graph, compute_time)))
        step_time, peak = _run(m, rows, cluster)
    return BatchResult(step_time=step_time, oom=np.any(peak > cluster.memory[None, :], axis=1),
                       peak_memory=peak)


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _model(graph: OpGraph, cluster: Cluster) -> Model:
    """The simulator's model of ``graph`` on ``cluster``, kept for the next call (``_run`` resets
    it); callers hold ``_LOCK`` while they use it."""
    return new_model(graph, cluster)


def _costs(graph: OpGraph, compute_time) -> np.ndarray:
    """``compute_time`` as the graph's own array is (read-only float64), so the compiled loop
    is the same."""
    costs = np.array(compute_time, dtype=np.float64)
    if costs.shape != (graph.num_ops,) or not np.all(np.isfinite(costs) & (costs >= 0)):
        raise GraphError(f"compute_time must be {graph.num_ops} finite times >= 0, one per op of graph {graph.name!r}")
    costs.flags.writeable = False
    return costs


def lower_bound(graph: OpGraph, cluster: Cluster) -> float:
    """docs/design.md's lower bound on any placement's step time: max(the longest compute-only path
    on the fastest device, total compute / the devices' summed speed). Communication and memory
    are ignored."""
    speeds = cluster.speeds
    return max(graph.critical_path(float(speeds.max())), graph.total_compute / float(speeds.sum()))


def _device_rows(graph: OpGraph, cluster: Cluster, rows: np.ndarray, partial: bool = False) -> np.ndarray:
    """``rows`` (placements × ops) as device indices (int64, C order), checked; -1 (not placed)
    only when ``partial``."""
    if rows.shape[1:] != (graph.num_ops,):
        raise PlacementError(f"placement has shape {rows.shape[1:]} but graph {graph.name!r} has "
                             f"{graph.num_ops} ops")
    if rows.size and not np.issubdtype(rows.dtype, np.integer):   # as Placement: 0.5 is no device
        raise PlacementError(f"a placement holds device indices (integers), got dtype {rows.dtype}")
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    ndev = cluster.num_devices
    low = -1 if partial else 0
    if rows.size and (rows.min() < low or rows.max() >= ndev):
        r, i = (int(k) for k in np.argwhere((rows < low) | (rows >= ndev))[0])
        raise PlacementError(f"op {graph.names[i]!r}: device index {int(rows[r, i])} out of range "
                             f"(cluster has {ndev} devices)")
    return rows


# ------------------------------------------------------------------------ the event loop
_OP_END, _XFER_END, _XFER_START = 0, 1, 2
_KIND_SHIFT = 40  # event int key = kind << _KIND_SHIFT | id: an instant's events by kind, then id
_ID_MASK = (1 << _KIND_SHIFT) - 1


def _run(m: Model, rows: np.ndarray, cluster: Cluster, partial: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Run the step placed by each row of ``rows`` (placements × ops; ``partial``: some are -1)
    on model ``m`` of a graph on ``cluster``, which is left holding the last one; returns each
    row's step time and peak memory per device."""
    step_time = np.zeros(len(rows))
    peak = np.zeros((len(rows), len(m.devices.avail)), dtype=np.int64)
    _event_loop(cluster.memory_model == "tf_reuse", partial)(m, rows, step_time, peak)
    return step_time, peak


@functools.cache
def _event_loop(reuse: bool, partial: bool):
    """The event loop compiled for one set of features: ``reuse``, outputs may share an input's
    buffer (the cluster's ``tf_reuse`` memory model); ``partial``: some ops are not placed
    (device -1). Each is a compile-time constant, so the loop without them (what search and the
    learned placers run) does none of their work.

    ``run`` is one function of 156 lines, nested 9 deep, on purpose: with its per-row reset and
    its three event handlers (an op's outputs delivered, its inputs released, a transfer ended)
    as compiled helpers, ``simulate_many`` took 1.7-2.0x as long (16 placements of a 10,000-op
    layered DAG per call on baechi_2080, medians of 5, alternated three times with this loop,
    2026-11-29): numba keeps reference counting of every array of the parts passed around each
    call, once per op and transfer here."""

    @numba.njit(cache=True)
    def run(m, rows, step_time, peak):  # pragma: no cover - compiled
        g, ops, devices, channels, transfers, sent, memory = (m.graph, m.ops, m.devices, m.channels,
                                                              m.transfers, m.sent, m.memory)
        n = len(g.in_ptr) - 1
        ndev = len(devices.avail)
        ntensor = len(g.tensor_src)
        nedge = len(g.edge_src)
        # Buffers: a producer's copy of tensor t is buffer t, unless t shares an input's buffer;
        # the copy received by transfer x is buffer ntensor + x (ops.free_buffer).
        pending = np.empty(n, dtype=np.int64)  # inputs not yet present on the op's device
        buf = np.empty(ntensor if reuse else 0, dtype=np.int64)  # a tensor's buffer on its producer's device
        hold = np.empty(ntensor + nedge, dtype=np.int64)  # readers and transfers keeping a buffer
        running = np.empty(ndev, dtype=np.bool_)
        ready_base = np.empty(ndev, dtype=np.int64)  # one ready heap per device, in its own slice
        ready_size = np.empty(ndev, dtype=np.int64)
        ready_time = np.empty(max(n, 1))  # keyed (time it became ready, op)
        ready_op = np.empty(max(n, 1), dtype=np.int64)
        event_time = np.empty(n + 2 * nedge + 1)
        event_key = np.empty(n + 2 * nedge + 1, dtype=np.int64)
        for r in range(len(rows)):
            dev = rows[r]
            ops.device[:] = dev
            ops.start[:] = 0.0
            ops.end[:] = 0.0
            devices.avail[:] = 0.0
            devices.busy[:] = 0.0
            channels.send_free[:] = 0.0
            channels.recv_free[:] = 0.0
            sent.of[:] = -1
            sent.count[0] = 0
            hold[:] = 0
            memory.live[:] = 0
            memory.instant[:] = 0
            running[:] = False
            ready_size[:] = 0  # first each device's number of ops, then its ready heap's size
            placed = 0
            for i in range(n):
                if partial and dev[i] < 0:
                    continue
                placed += 1
                ready_size[dev[i]] += 1
                memory.live[dev[i]] += g.persistent[i]
                pending[i] = g.in_ptr[i + 1] - g.in_ptr[i]
                if partial:
                    for k in range(g.in_ptr[i], g.in_ptr[i + 1]):
                        pending[i] -= dev[g.edge_src[g.in_edges[k]]] < 0
            memory.peak[:] = memory.live
            ready_base[0] = 0
            for d in range(1, ndev):
                ready_base[d] = ready_base[d - 1] + ready_size[d - 1]
            ready_size[:] = 0
            events = 0
            for i in range(n):
                if (not partial or dev[i] >= 0) and pending[i] == 0:
                    ready_size[dev[i]] = push(ready_time, ready_op, ready_base[dev[i]], ready_size[dev[i]], 0.0, i)

            t = 0.0
            done = 0
            while True:
                for d in range(ndev):  # idle devices start their earliest-ready op
                    if not running[d] and ready_size[d] > 0:
                        _, i, ready_size[d] = pop(ready_time, ready_op, ready_base[d], ready_size[d])
                        running[d] = True
                        alloc(memory, d, g.alloc_at_start[i])
                        end = start(ops, devices, i, d, t, duration(g.compute, devices.speed, i, d))
                        events = push(event_time, event_key, 0, events, end, (_OP_END << _KIND_SHIFT) | i)
                if events == 0:
                    break
                if event_time[0] > t:
                    end_instant(memory)
                    t = event_time[0]
                while events > 0 and event_time[0] == t:  # every event of this instant
                    _, key, events = pop(event_time, event_key, 0, events)
                    kind = key >> _KIND_SHIFT
                    ident = key & _ID_MASK
                    if kind == _OP_END:
                        i = ident
                        d = dev[i]
                        running[d] = False
                        done += 1
                        free(memory, d, g.free_at_end[i], ops.start[i], t)
                        for tensor in range(g.op_tensor_ptr[i], g.op_tensor_ptr[i + 1]):  # deliver outputs
                            b = tensor
                            if reuse:
                                a = g.shared[tensor]
                                if a >= 0 and (not partial or dev[g.tensor_src[a]] >= 0):
                                    b = buf[a] if dev[g.tensor_src[a]] == d else ntensor + sent.of[a * ndev + d]
                                buf[tensor] = b
                            for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                                c = g.edge_dst[e]
                                dc = dev[c]
                                if partial and dc < 0:
                                    continue
                                if dc == d:
                                    hold[b] += 1
                                    pending[c] -= 1
                                    if pending[c] == 0:
                                        ready_size[dc] = push(ready_time, ready_op, ready_base[dc], ready_size[dc],
                                                              t, c)
                                else:
                                    x = sent.of[tensor * ndev + dc]
                                    if x < 0:
                                        x = book_transfer(transfers, sent, channels, tensor, d, dc, t,
                                                          g.xfer_time[tensor])
                                        hold[b] += 1
                                        if transfers.start[x] > t:
                                            events = push(event_time, event_key, 0, events, transfers.start[x],
                                                         (_XFER_START << _KIND_SHIFT) | x)
                                        else:
                                            alloc(memory, dc, g.recv_bytes[tensor])
                                            events = push(event_time, event_key, 0, events, transfers.end[x],
                                                         (_XFER_END << _KIND_SHIFT) | x)
                                    hold[ntensor + x] += 1
                            read = g.tensor_ptr[tensor + 1] > g.tensor_ptr[tensor]
                            if partial and b == tensor and hold[b] == 0 and read:
                                free_buffer(g, ops, transfers, memory, d, b, t)  # read by unplaced ops only
                        for k in range(g.in_ptr[i], g.in_ptr[i + 1]):  # release the inputs
                            e = g.in_edges[k]
                            tensor = g.edge_tensor[e]
                            ds = dev[g.edge_src[e]]
                            if partial and ds < 0:
                                continue
                            if ds != d:
                                b = ntensor + sent.of[tensor * ndev + d]
                            elif reuse:
                                b = buf[tensor]
                            else:
                                b = tensor
                            hold[b] -= 1
                            if hold[b] == 0:
                                free_buffer(g, ops, transfers, memory, d, b, t)
                    elif kind == _XFER_START:
                        x = ident
                        alloc(memory, transfers.device[x], g.recv_bytes[transfers.tensor[x]])
                        events = push(event_time, event_key, 0, events, transfers.end[x],
                                      (_XFER_END << _KIND_SHIFT) | x)
                    else:
                        x = ident
                        tensor = transfers.tensor[x]
                        dc = transfers.device[x]
                        b = buf[tensor] if reuse else tensor
                        hold[b] -= 1
                        if hold[b] == 0:
                            free_buffer(g, ops, transfers, memory, dev[g.tensor_src[tensor]], b, t)
                        for e in range(g.tensor_ptr[tensor], g.tensor_ptr[tensor + 1]):
                            c = g.edge_dst[e]
                            if dev[c] == dc:
                                pending[c] -= 1
                                if pending[c] == 0:
                                    ready_size[dc] = push(ready_time, ready_op, ready_base[dc], ready_size[dc], t, c)
            end_instant(memory)
            if done != placed:
                raise RuntimeError("simulation stalled: the graph is not a DAG")
            nx = sent.count[0]
            step_time[r] = max(ops.end.max() if n > 0 else 0.0, transfers.end[:nx].max() if nx > 0 else 0.0)
            peak[r] = memory.peak

    return run
