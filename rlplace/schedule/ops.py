"""The operations of the execution model (``rlplace.schedule.model``), compiled. Each takes
the parts of the model it touches.

Time: an op on device d runs ``compute / speed[d]`` (``duration``); ``start`` books it. A tensor
read on another device is sent once per destination and cached there (Baechi §4.2):
``channel_start`` says when a transfer ready at some time can begin (at once with parallel
communication; with sequential communication when the sender's send channel and the
receiver's receive channel are both free, first come first served, Baechi §3.4);
``book_transfer`` books one. A placer asks ``arrival`` when an op's inputs would all be on a
device if it went there now, and ``book_inputs`` books those transfers.

Memory (docs/design.md): a buffer is live from its allocation up to, not including, its release; one
allocated and released at the same instant counts at that instant. The simulator changes the
live bytes as events happen (``alloc``, ``free``, ``free_buffer``) and takes the peak when an
instant is over (``end_instant``). A placer decides before all releases are known:
``hold_op_memory`` books an op's memory when it is placed and each release as soon as it is
known, ``release_until`` applies those due; ``fits`` is the admission check, ``defer`` puts an
op back until the device's next release (``input_time`` then waits for it); its predicted peak comes from its finished schedule
(``rlplace.schedule.trace.memory_peaks``), by the same rules as the simulator's.

Idle slots (insertion scheduling, HEFT and Celeritas): ``first_idle_slot`` finds the earliest
gap of a resource that fits, ``occupy`` books it, ``vacate`` undoes a booking.

The operations are plain ``numba.njit`` functions, which LLVM inlines into their callers after
numba has pruned its reference counting; numba's own ``inline="always"`` would leave an atomic
increment and decrement of every array of a part passed in around each inlined call.
"""

from __future__ import annotations

import numba
import numpy as np

from rlplace.schedule.heap import pop, push


# ------------------------------------------------------------------------------------- time
@numba.njit(cache=True, error_model="numpy")  # speeds are > 0 (Device): no zero-division branch
def duration(compute, speed, op, d):  # pragma: no cover - compiled
    """How long ``op`` runs on device ``d`` (``compute``: the graph's, ``speed``: the devices')."""
    return compute[op] / speed[d]


@numba.njit(cache=True)
def start(ops, devices, op, d, t, length):  # pragma: no cover - compiled
    """Run ``op`` on device ``d`` from ``t`` for ``length`` seconds; returns its end."""
    end = t + length
    ops.device[op] = d
    ops.start[op] = t
    ops.end[op] = end
    if end > devices.avail[d]:
        devices.avail[d] = end
    devices.busy[d] += length
    return end


@numba.njit(cache=True)
def channel_start(channels, src, dst, ready):  # pragma: no cover - compiled
    """When a transfer from ``src`` to ``dst``, ready at ``ready``, can begin."""
    if channels.sequential:
        return max(ready, channels.send_free[src], channels.recv_free[dst])
    return ready


@numba.njit(cache=True)
def book_transfer(transfers, sent, channels, tensor, src, dst, ready, length):  # pragma: no cover - compiled
    """Send ``tensor`` from device ``src`` to ``dst`` as soon as the channels allow after
    ``ready``; returns the transfer's index."""
    begin = channel_start(channels, src, dst, ready)
    if channels.sequential:
        channels.send_free[src] = begin + length
        channels.recv_free[dst] = begin + length
    return record_transfer(transfers, sent, tensor, dst, begin, begin + length, len(channels.send_free))


@numba.njit(cache=True)
def record_transfer(transfers, sent, tensor, dst, begin, end, ndev):  # pragma: no cover - compiled
    """``tensor`` is sent to device ``dst`` over [begin, end); returns the transfer's index."""
    x = sent.count[0]
    sent.count[0] = x + 1
    transfers.tensor[x] = tensor
    transfers.device[x] = dst
    transfers.start[x] = begin
    transfers.end[x] = end
    sent.of[tensor * ndev + dst] = x
    return x


@numba.njit(cache=True)
def arrival(graph, ops, transfers, sent, channels, op, d, scratch):  # pragma: no cover - compiled
    """When every input of ``op`` would be on device ``d`` if ``op`` went there now (Baechi
    Eq. 1's second term): a tensor made there or already sent there counts as it is; the others
    would be sent in input order, each queued behind the transfers before it on its channels
    (sequential communication, §3.4). ``scratch``: one float per device."""
    ndev = len(scratch)
    recv = channels.recv_free[d]
    if channels.sequential:
        for k in range(ndev):
            scratch[k] = channels.send_free[k]
    t = 0.0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        s = graph.edge_src[e]
        ds = ops.device[s]
        if ds == d:
            a = ops.end[s]
        else:
            tensor = graph.edge_tensor[e]
            x = sent.of[tensor * ndev + d]
            if x >= 0:
                a = transfers.end[x]
            elif channels.sequential:
                a = max(ops.end[s], scratch[ds], recv) + graph.xfer_time[tensor]
                scratch[ds] = a
                recv = a
            else:
                a = ops.end[s] + graph.xfer_time[tensor]
        if a > t:
            t = a
    return t


@numba.njit(cache=True)
def book_inputs(graph, ops, transfers, sent, channels, op, d):  # pragma: no cover - compiled
    """Book the transfers ``arrival`` assumed for ``op`` on ``d``; returns the bytes newly
    received on ``d``."""
    ndev = len(channels.send_free)
    received = 0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        s = graph.edge_src[e]
        tensor = graph.edge_tensor[e]
        if ops.device[s] != d and sent.of[tensor * ndev + d] < 0:
            book_transfer(transfers, sent, channels, tensor, ops.device[s], d, ops.end[s], graph.xfer_time[tensor])
            received += graph.recv_bytes[tensor]
    return received


@numba.njit(cache=True)
def received_bytes(graph, ops, sent, op, d):  # pragma: no cover - compiled
    """Bytes of ``op``'s inputs that would be newly sent to device ``d`` (what ``book_inputs``
    returns once it has booked them)."""
    ndev = len(sent.of) // max(1, len(graph.recv_bytes))
    total = 0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        tensor = graph.edge_tensor[e]
        if ops.device[graph.edge_src[e]] != d and sent.of[tensor * ndev + d] < 0:
            total += graph.recv_bytes[tensor]
    return total


@numba.njit(cache=True)
def newly_ready(graph, missing, op, fresh, nfresh):  # pragma: no cover - compiled
    """``op`` is placed: each successor for which it was the last unplaced input (``missing``:
    per op, inputs not yet placed) joins ``fresh[:nfresh]``; returns the new count."""
    for e in range(graph.out_ptr[op], graph.out_ptr[op + 1]):
        child = graph.edge_dst[e]
        missing[child] -= 1
        if missing[child] == 0:
            fresh[nfresh] = child
            nfresh += 1
    return nfresh


# ---------------------------------------------------------------------- memory, as it happens
@numba.njit(cache=True)
def alloc(memory, d, nbytes):  # pragma: no cover - compiled
    memory.live[d] += nbytes


@numba.njit(cache=True)
def free(memory, d, nbytes, allocated_at, t):  # pragma: no cover - compiled
    """Release ``nbytes`` on ``d`` at ``t``; a buffer allocated at ``t`` still counts at ``t``."""
    memory.live[d] -= nbytes
    if allocated_at == t:
        memory.instant[d] += nbytes


@numba.njit(cache=True)
def free_buffer(graph, ops, transfers, memory, d, b, t):  # pragma: no cover - compiled
    """Release buffer ``b`` on ``d`` at ``t``: for ``b`` below the number of tensors, tensor
    ``b``'s copy on its producer's device (allocated when its producer started), else the copy
    received by transfer ``b - tensors`` (allocated when the transfer started)."""
    ntensor = len(graph.tensor_src)
    if b < ntensor:
        free(memory, d, graph.held_bytes[b], ops.start[graph.tensor_src[b]], t)
    else:
        x = b - ntensor
        free(memory, d, graph.recv_bytes[transfers.tensor[x]], transfers.start[x], t)


@numba.njit(cache=True)
def end_instant(memory):  # pragma: no cover - compiled
    """The current instant is over: take each device's peak."""
    for d in range(len(memory.live)):
        live = memory.live[d] + memory.instant[d]
        if live > memory.peak[d]:
            memory.peak[d] = live
        memory.instant[d] = 0


# ------------------------------------------------------------------ memory, for a placer
@numba.njit(cache=True)
def release_at(releases, d, t, nbytes):  # pragma: no cover - compiled
    """``nbytes`` on ``d`` are released at ``t`` (applied by ``release_until``)."""
    if nbytes <= 0:
        return
    r = releases.count[0]
    releases.count[0] = r + 1
    releases.nbytes[r] = nbytes
    base = d * (len(releases.time) // len(releases.size))
    releases.size[d] = push(releases.time, releases.ident, base, releases.size[d], t, r)


@numba.njit(cache=True)
def release_until(releases, memory, t):  # pragma: no cover - compiled
    """Apply every known release due at or before ``t``."""
    for d in range(len(releases.size)):
        release_on_until(releases, memory, d, t)


@numba.njit(cache=True)
def release_on_until(releases, memory, d, t):  # pragma: no cover - compiled
    """Apply every known release on device ``d`` due at or before ``t`` (for a placer whose
    time runs forward per device, not across devices)."""
    cap = len(releases.time) // len(releases.size)
    while releases.size[d] > 0 and releases.time[d * cap] <= t:
        _, r, releases.size[d] = pop(releases.time, releases.ident, d * cap, releases.size[d])
        memory.live[d] -= releases.nbytes[r]


@numba.njit(cache=True)
def next_release(releases, d):  # pragma: no cover - compiled
    """When ``d`` next releases memory (inf: nothing known)."""
    if releases.size[d] == 0:
        return np.inf
    return releases.time[d * (len(releases.time) // len(releases.size))]


@numba.njit(cache=True)
def fits(memory, reserved, cap, d, need, persistent):  # pragma: no cover - compiled
    """Whether device ``d`` can take ``need`` bytes now (``persistent`` of them held all step,
    so they also add to every earlier instant: to its peak so far) within ``cap`` beside the
    ``reserved`` bytes (a list scheduler's memory admission, Baechi §2.3 and §4.2)."""
    return memory.live[d] + reserved[d] + need <= cap[d] and memory.peak[d] + persistent <= cap[d]


@numba.njit(cache=True)
def overfill(memory, reserved, cap, d, need, persistent):  # pragma: no cover - compiled
    """Bytes by which taking ``need`` (``persistent`` of them) would overfill device ``d``."""
    return float(max(memory.live[d] + reserved[d] + need, memory.peak[d] + persistent) - cap[d])


@numba.njit(cache=True)
def least_overfilled(memory, reserved, cap, need, persistent):  # pragma: no cover - compiled
    """The device that taking ``need`` bytes (``persistent`` of them) overfills least."""
    best, over = 0, np.inf
    for d in range(len(cap)):
        extra = overfill(memory, reserved, cap, d, need, persistent)
        if extra < over:
            best, over = d, extra
    return best


@numba.njit(cache=True)
def defer(releases, not_before, dropped, drop_count, op, d):  # pragma: no cover - compiled
    """``op`` lacks the memory on device ``d``: it waits for ``d``'s next release, or, with
    none known, gives ``d`` up (Baechi §2.3). Returns True when ``op`` has given up every
    device (``not_before``, ``dropped``: per (op, device); ``drop_count``: per op)."""
    ndev = len(releases.size)
    t = next_release(releases, d)
    if t < np.inf:
        not_before[op * ndev + d] = t
        return False
    dropped[op * ndev + d] = True
    drop_count[op] += 1
    return drop_count[op] == ndev


@numba.njit(cache=True, inline="always")
def input_time(graph, ops, transfers, sent, channels, not_before, op, d, scratch):  # pragma: no cover - compiled
    """When ``op``'s inputs can be on device ``d`` (``arrival``), and not before ``d``'s next
    release of memory where ``op`` lacked the memory there (``defer``'s ``not_before``).
    Inlined by numba: one expression, so no reference counting is left around it, and as a
    plain call (the model's parts passed twice over) it made m-ETF 1.15x slower."""
    return max(not_before[op * len(scratch) + d], arrival(graph, ops, transfers, sent, channels, op, d, scratch))


@numba.njit(cache=True)
def hold_persistent(memory, d, nbytes):  # pragma: no cover - compiled
    """Bytes held on ``d`` for the whole step."""
    memory.live[d] += nbytes
    memory.peak[d] += nbytes


@numba.njit(cache=True)
def hold_op_memory(graph, ops, transfers, sent, memory, releases, op, received):  # pragma: no cover - compiled
    """``op`` was just started (with ``received`` bytes of inputs newly sent to its device):
    allocate its memory and book every release this makes known: its temporaries and unread
    outputs at its end; for an input buffer whose last reader this was (of every tensor sharing
    it, ``rlplace.schedule.aliases``), its releases (``release_buffer``)."""
    ndev = len(memory.live)
    d = ops.device[op]
    end = ops.end[op]
    memory.live[d] += graph.alloc_at_start[op] + received
    if memory.live[d] > memory.peak[d]:
        memory.peak[d] = memory.live[d]
    release_at(releases, d, end, graph.free_at_end[op])
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        tensor = graph.edge_tensor[graph.in_edges[k]]
        if end > releases.last_read[tensor * ndev + d]:
            releases.last_read[tensor * ndev + d] = end
        root = graph.root[tensor]
        releases.readers_left[root] -= 1
        if releases.readers_left[root] == 0:
            release_buffer(graph, ops, transfers, sent, releases, root, ndev)


@numba.njit(cache=True)
def release_buffer(graph, ops, transfers, sent, releases, root, ndev):  # pragma: no cover - compiled
    """Every reader of the tensors sharing ``root``'s buffer is placed: book the release of the
    producer's copy when the readers and transfers on each device of the chain are done, and of
    every received copy when the readers there are done."""
    until = np.zeros(ndev)  # per device: the chain's members made there, read and sent
    for j in range(graph.member_ptr[root], graph.member_ptr[root + 1]):
        m = graph.members[j]
        h = ops.device[graph.tensor_src[m]]
        until[h] = max(until[h], releases.last_read[m * ndev + h])
        for d2 in range(ndev):
            x = sent.of[m * ndev + d2]
            if x >= 0:
                until[h] = max(until[h], transfers.end[x])
    for j in range(graph.member_ptr[root], graph.member_ptr[root + 1]):
        m = graph.members[j]
        for d2 in range(ndev):
            if sent.of[m * ndev + d2] >= 0:
                release_at(releases, d2, max(releases.last_read[m * ndev + d2], until[d2]), graph.recv_bytes[m])
    home = ops.device[graph.tensor_src[root]]
    release_at(releases, home, until[home], graph.held_bytes[root])


# ---------------------------------------------------------------------------- idle slots
@numba.njit(cache=True)
def first_idle_slot(slots, r, ready, length):  # pragma: no cover - compiled
    """The earliest start >= ``ready`` of an idle gap of ``length`` on resource ``r``."""
    c = slots.count[r]
    k = np.searchsorted(slots.hi[r, :c], ready, side="right")
    s = ready
    while k < c:
        if s + length <= slots.lo[r, k]:
            return s
        s = max(s, slots.hi[r, k])
        k += 1
    return s


@numba.njit(cache=True)
def occupy(slots, r, begin, length):  # pragma: no cover - compiled
    """Book [begin, begin + length) on resource ``r`` (a gap ``first_idle_slot`` found);
    returns the booking's position, for ``vacate``."""
    c = slots.count[r]
    k = np.searchsorted(slots.lo[r, :c], begin, side="right")
    slots.lo[r, k + 1:c + 1] = slots.lo[r, k:c].copy()
    slots.hi[r, k + 1:c + 1] = slots.hi[r, k:c].copy()
    slots.lo[r, k] = begin
    slots.hi[r, k] = begin + length
    slots.count[r] = c + 1
    return k


@numba.njit(cache=True)
def vacate(slots, r, k):  # pragma: no cover - compiled
    """Undo the booking at position ``k`` of resource ``r`` (the latest one made there)."""
    c = slots.count[r]
    slots.lo[r, k:c - 1] = slots.lo[r, k + 1:c].copy()
    slots.hi[r, k:c - 1] = slots.hi[r, k + 1:c].copy()
    slots.count[r] = c - 1
