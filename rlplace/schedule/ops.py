"""The operations of the execution model (``rlplace.schedule.model.Model``), compiled.

Time: an op on device d runs ``compute / speed[d]`` (``duration``); ``start`` books it. A tensor
read on another device is sent once per destination and cached there (Baechi §4.2):
``channel_start`` says when a transfer ready at some time can begin (at once with parallel
communication; with sequential communication when the sender's send channel and the
receiver's receive channel are both free, first come first served, Baechi §3.4);
``book_transfer`` books one. A placer asks ``arrival`` when an op's inputs would all be on a
device if it went there now, and ``book_inputs`` books those transfers.

Memory (DESIGN.md): a buffer is live from its allocation up to, not including, its release; one
allocated and released at the same instant counts at that instant. The simulator changes
``mem`` as events happen (``alloc``, ``free``) and takes the peak when an instant is over
(``end_instant``). A placer decides before all releases are known: ``hold_op_memory`` books an
op's memory when it is placed and the releases as soon as they are known, ``release_until``
applies those due, and its predicted peak comes from its finished schedule
(``rlplace.schedule.trace.memory_peaks``), exactly as for the simulator.

Idle slots (insertion scheduling, HEFT and Celeritas): ``first_idle_slot`` finds the earliest
gap of a resource that fits, ``occupy`` books it, ``vacate`` undoes a booking.
"""

from __future__ import annotations

import numba
import numpy as np

from rlplace.schedule.heap import pop, push


# ------------------------------------------------------------------------------------- time
@numba.njit(cache=True, inline="always")
def duration(m, op, d):  # pragma: no cover - compiled
    return m.compute[op] / m.speeds[d]


@numba.njit(cache=True, inline="always")
def start(m, op, d, t):  # pragma: no cover - compiled
    """Run ``op`` on device ``d`` from time ``t``; returns its end."""
    end = t + duration(m, op, d)
    m.device[op] = d
    m.op_start[op] = t
    m.op_end[op] = end
    if end > m.avail[d]:
        m.avail[d] = end
    m.busy[d] += end - t
    return end


@numba.njit(cache=True, inline="always")
def channel_start(m, src, dst, ready):  # pragma: no cover - compiled
    """When a transfer from ``src`` to ``dst``, ready at ``ready``, can begin."""
    if m.sequential:
        return max(ready, m.send_free[src], m.recv_free[dst])
    return ready


@numba.njit(cache=True, inline="always")
def book_transfer(m, tensor, d, ready):  # pragma: no cover - compiled
    """Send ``tensor`` to device ``d`` as soon as the channels allow after ``ready``; returns the
    transfer's index."""
    src = m.device[m.tensor_src[tensor]]
    begin = channel_start(m, src, d, ready)
    end = begin + m.xfer_time[tensor]
    if m.sequential:
        m.send_free[src] = end
        m.recv_free[d] = end
    x = m.num_transfers[0]
    m.num_transfers[0] = x + 1
    m.x_tensor[x] = tensor
    m.x_dev[x] = d
    m.x_start[x] = begin
    m.x_end[x] = end
    m.xfer_of[tensor * len(m.avail) + d] = x
    return x


@numba.njit(cache=True)
def arrival(m, op, d, scratch):  # pragma: no cover - compiled
    """When every input of ``op`` would be on device ``d`` if ``op`` went there now (Baechi
    Eq. 1's second term): a tensor made there or already sent there counts as it is; the others
    would be sent in input order, each queued behind the transfers before it on its channels
    (sequential communication, §3.4). ``scratch``: one float per device."""
    ndev = len(m.avail)
    recv = m.recv_free[d]
    if m.sequential:
        for k in range(ndev):
            scratch[k] = m.send_free[k]
    t = 0.0
    for k in range(m.in_ptr[op], m.in_ptr[op + 1]):
        e = m.in_edges[k]
        s = m.edge_src[e]
        ds = m.device[s]
        if ds == d:
            a = m.op_end[s]
        else:
            tensor = m.edge_tensor[e]
            x = m.xfer_of[tensor * ndev + d]
            if x >= 0:
                a = m.x_end[x]
            elif m.sequential:
                a = max(m.op_end[s], scratch[ds], recv) + m.xfer_time[tensor]
                scratch[ds] = a
                recv = a
            else:
                a = m.op_end[s] + m.xfer_time[tensor]
        if a > t:
            t = a
    return t


@numba.njit(cache=True)
def book_inputs(m, op, d):  # pragma: no cover - compiled
    """Book the transfers ``arrival(m, op, d)`` assumed; returns the bytes newly received on
    ``d``."""
    ndev = len(m.avail)
    received = 0
    for k in range(m.in_ptr[op], m.in_ptr[op + 1]):
        e = m.in_edges[k]
        s = m.edge_src[e]
        tensor = m.edge_tensor[e]
        if m.device[s] != d and m.xfer_of[tensor * ndev + d] < 0:
            book_transfer(m, tensor, d, m.op_end[s])
            received += m.recv_bytes[tensor]
    return received


# ---------------------------------------------------------------------- memory, as it happens
@numba.njit(cache=True, inline="always")
def alloc(m, d, nbytes):  # pragma: no cover - compiled
    m.mem[d] += nbytes


@numba.njit(cache=True, inline="always")
def free(m, d, nbytes, allocated_at, t):  # pragma: no cover - compiled
    """Release ``nbytes`` on ``d`` at ``t``; a buffer allocated at ``t`` still counts at ``t``."""
    m.mem[d] -= nbytes
    if allocated_at == t:
        m.instant[d] += nbytes


@numba.njit(cache=True, inline="always")
def end_instant(m):  # pragma: no cover - compiled
    """The current instant is over: take each device's peak."""
    for d in range(len(m.mem)):
        live = m.mem[d] + m.instant[d]
        if live > m.peak[d]:
            m.peak[d] = live
        m.instant[d] = 0


# ------------------------------------------------------------------ memory, for a placer
@numba.njit(cache=True)
def release_at(m, d, t, nbytes):  # pragma: no cover - compiled
    """``nbytes`` on ``d`` are released at ``t`` (applied by ``release_until``)."""
    if nbytes <= 0:
        return
    r = m.num_releases[0]
    m.num_releases[0] = r + 1
    m.rel_bytes[r] = nbytes
    m.rel_size[d] = push(m.rel_t, m.rel_i, d * (len(m.rel_t) // len(m.mem)), m.rel_size[d], t, r)


@numba.njit(cache=True)
def release_until(m, t):  # pragma: no cover - compiled
    """Apply every known release due at or before ``t``."""
    cap = len(m.rel_t) // len(m.mem)
    for d in range(len(m.mem)):
        while m.rel_size[d] > 0 and m.rel_t[d * cap] <= t:
            _, r, m.rel_size[d] = pop(m.rel_t, m.rel_i, d * cap, m.rel_size[d])
            m.mem[d] -= m.rel_bytes[r]


@numba.njit(cache=True)
def next_release(m, d):  # pragma: no cover - compiled
    """When ``d`` next releases memory (inf: nothing known)."""
    if m.rel_size[d] == 0:
        return np.inf
    return m.rel_t[d * (len(m.rel_t) // len(m.mem))]


@numba.njit(cache=True)
def hold_persistent(m, d, nbytes):  # pragma: no cover - compiled
    """Bytes held on ``d`` for the whole step."""
    m.mem[d] += nbytes
    m.peak[d] += nbytes


@numba.njit(cache=True)
def hold_op_memory(m, op, received):  # pragma: no cover - compiled
    """``op`` was just started (with ``received`` bytes of inputs newly sent to its device):
    allocate its memory now and book every release this makes known: its temporaries and
    unread outputs at its end; an input tensor whose last reader this was, on its producer's
    device when its local readers and transfers are done, and on every other device when its
    readers there are done."""
    ndev = len(m.mem)
    d = m.device[op]
    end = m.op_end[op]
    m.mem[d] += m.alloc_at_start[op] + received
    if m.mem[d] > m.peak[d]:
        m.peak[d] = m.mem[d]
    release_at(m, d, end, m.free_at_end[op])
    for k in range(m.in_ptr[op], m.in_ptr[op + 1]):
        tensor = m.edge_tensor[m.in_edges[k]]
        if end > m.last_read[tensor * ndev + d]:
            m.last_read[tensor * ndev + d] = end
        m.readers_left[tensor] -= 1
        if m.readers_left[tensor] == 0:
            home = m.device[m.tensor_src[tensor]]
            held_until = m.last_read[tensor * ndev + home]
            for d2 in range(ndev):
                x = m.xfer_of[tensor * ndev + d2]
                if x >= 0:
                    held_until = max(held_until, m.x_end[x])
                    release_at(m, d2, m.last_read[tensor * ndev + d2], m.recv_bytes[tensor])
            release_at(m, home, held_until, m.held_bytes[tensor])


# ---------------------------------------------------------------------------- idle slots
@numba.njit(cache=True)
def first_idle_slot(m, r, ready, length):  # pragma: no cover - compiled
    """The earliest start >= ``ready`` of an idle gap of ``length`` on resource ``r``."""
    c = m.slot_count[r]
    k = np.searchsorted(m.slot_hi[r, :c], ready, side="right")
    s = ready
    while k < c:
        if s + length <= m.slot_lo[r, k]:
            return s
        s = max(s, m.slot_hi[r, k])
        k += 1
    return s


@numba.njit(cache=True)
def occupy(m, r, begin, length):  # pragma: no cover - compiled
    """Book [begin, begin + length) on resource ``r`` (a gap ``first_idle_slot`` found);
    returns the booking's position, for ``vacate``."""
    c = m.slot_count[r]
    k = np.searchsorted(m.slot_lo[r, :c], begin, side="right")
    m.slot_lo[r, k + 1:c + 1] = m.slot_lo[r, k:c].copy()
    m.slot_hi[r, k + 1:c + 1] = m.slot_hi[r, k:c].copy()
    m.slot_lo[r, k] = begin
    m.slot_hi[r, k] = begin + length
    m.slot_count[r] = c + 1
    return k


@numba.njit(cache=True)
def vacate(m, r, k):  # pragma: no cover - compiled
    """Undo the booking at position ``k`` of resource ``r`` (the latest one made there)."""
    c = m.slot_count[r]
    m.slot_lo[r, k:c - 1] = m.slot_lo[r, k + 1:c].copy()
    m.slot_hi[r, k:c - 1] = m.slot_hi[r, k + 1:c].copy()
    m.slot_count[r] = c - 1
