"""The list-scheduling skeleton: one loop over the execution model on which m-ETF and m-SCT
(Baechi §2.3-2.4) and Celeritas' Adjusting Placement in time order (Celeritas Algorithm 2,
Eq. 7-9) are policies (``ETF``, ``SCT``, ``ADJUST``).

Each round the loop

1. queues the ops that became ready: per device a heap keyed by when the op's inputs can be
   there (``input_time``; raised lazily, as inputs only arrive later while the schedule fills),
   ties by the policy's order (m-ETF: the op index; Adjusting Placement: CPD-TOPO);
2. takes the (op, device) pair that can start first (Baechi Eq. 1, Celeritas Eq. 7's EST; ties:
   the lower device, or for Adjusting Placement the op whose inputs are there first, then the
   first in its order); m-SCT lets a device keep itself for the favorite child of its last op or
   an urgent op instead (§2.4); Adjusting Placement then sends the op to
   its predecessor's device unless another lets it start earlier by more than its back cost
   (Eq. 8-9, ``_adjusted_device``);
3. admits it where the device has the memory (§2.3; the simulator's memory rules, applied as the
   placer's schedule makes releases known, ``rlplace.schedule.ops``): else the op waits for the
   device's next release, or gives the device up when none is due; an op every device gave up
   goes where it overfills least (best effort: placement never fails, the simulator reports the
   OOM);
4. starts it, books its inputs' transfers and its memory. The first op of a colocation group
   pins the group to its device, holds the group's persistent bytes there and reserves its
   largest temporary plus largest output until its last member is placed (§3.1, §4.2).

A group's source that must wait for a member to decide the group's device (``held``, Baechi's
rule, ``rlplace.placers.baechi.optimizer.deferred_sets``) queues when the group is pinned; should
only such sources be ready, they queue as usual.

The loop is one compiled function of 104 lines, nested 7 deep, on purpose: numba keeps reference
counting around each call to a helper that takes the model's parts. Measured on a 36,000-op
layered DAG (medians of runs alternated with the two loops this one replaced): step 1 as a
helper made m-ETF's loop 1.17x slower and m-SCT's 1.12x; m-SCT's favourite-child rule as a
helper 1.12-1.17x. Inline, both are within 4% of the loops they replaced. Only rarely run steps
(best effort, held sources, a group's members queued when it is pinned) and Adjusting Placement's
once-per-round Eq. 9 are helpers (experiments/studies.md, "One list-scheduling skeleton").
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph
from rlplace.schedule.heap import pop, push
from rlplace.schedule.model import Model, new_model
from rlplace.schedule.ops import (arrival, book_inputs, defer, duration, fits, hold_op_memory, hold_persistent,
                                  input_time, newly_ready, overfill, received_bytes, release_on_until, start)

ETF, SCT, ADJUST = 0, 1, 2


class Groups(NamedTuple):
    """Colocation groups, placed together (Baechi §3.1, §4.2)."""

    of: np.ndarray          # per op: its group, -1: none
    device: np.ndarray      # per group: the device of its first member placed, -1: none yet
    left: np.ndarray        # per group: members not yet placed
    reserved: np.ndarray    # per device: the extra bytes of its groups still being placed


class GroupBytes(NamedTuple):
    persistent: np.ndarray  # per group: its members' persistent bytes
    extra: np.ndarray       # per group: its largest temporary plus its largest output (§4.2)
    ptr: np.ndarray         # group g's members: members[ptr[g]:ptr[g + 1]]
    members: np.ndarray


class Ready(NamedTuple):
    """Ready ops: per device a heap of (when the inputs can be there, position in the order)."""

    key: np.ndarray
    tie: np.ndarray
    size: np.ndarray        # per device
    missing: np.ndarray     # per op: inputs not yet placed


class Waits(NamedTuple):
    """Ops put back for memory (``rlplace.schedule.ops.defer``), per (op, device)."""

    not_before: np.ndarray  # the device's next release
    dropped: np.ndarray     # no memory and no release to come
    count: np.ndarray       # per op: devices dropped


class Policy(NamedTuple):
    kind: int               # ETF, SCT or ADJUST
    order: np.ndarray       # position -> op, for ties
    rank: np.ndarray        # op -> position
    favorite: np.ndarray    # SCT: per op its favorite child (-1: none)
    previous: np.ndarray    # ADJUST: per op its predecessor in CPD-TOPO order (Algorithm 2's v_{i-1}; -1: none)
    back_cost: np.ndarray   # ADJUST: per op the largest cost of its out-edges (Eq. 8)
    held: np.ndarray        # per op: a group's source that waits for the group's device


def list_schedule(graph: OpGraph, cluster: Cluster, cap: np.ndarray, groups: list[np.ndarray], kind: int, *,
                  order: np.ndarray | None = None, favorite: np.ndarray | None = None,
                  previous: np.ndarray | None = None, back_cost: np.ndarray | None = None,
                  held: np.ndarray | None = None) -> Model:
    """Place every op of ``graph`` by policy ``kind`` within ``cap`` bytes per device, with the
    colocation ``groups`` (arrays of ops) placed together; returns the model holding the
    placer's own schedule (an op left unplaced has device -1: only on a graph with a cycle)."""
    n, ndev = graph.num_ops, cluster.num_devices
    none = np.zeros(0, dtype=np.int64)
    order = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    policy = Policy(kind, order, rank, none if favorite is None else favorite, none if previous is None else previous,
                    np.zeros(0) if back_cost is None else back_cost,
                    np.zeros(n, dtype=np.bool_) if held is None else held.copy())
    slot = 2 * n + 1  # per device heap: each op once when ready, once more when its group is pinned
    ready = Ready(np.empty(ndev * slot), np.empty(ndev * slot, dtype=np.int64), np.zeros(ndev, dtype=np.int64),
                  np.diff(graph.in_ptr).astype(np.int64))
    waits = Waits(np.zeros(n * ndev), np.zeros(n * ndev, dtype=np.bool_), np.zeros(n, dtype=np.int64))
    m = new_model(graph, cluster, placer=True)
    _list_schedule(m, *group_parts(graph, groups, ndev), ready, waits, policy, np.asarray(cap, dtype=np.int64))
    return m


def group_parts(graph: OpGraph, groups: list[np.ndarray], ndev: int) -> tuple[Groups, GroupBytes]:
    """The compiled loop's view of colocation ``groups`` (arrays of ops) on ``ndev`` devices."""
    sizes = [len(ops) for ops in groups]
    ptr = np.zeros(len(groups) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(sizes)
    members = np.concatenate(groups).astype(np.int64) if groups else np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(groups)), sizes)
    of = np.full(graph.num_ops, -1, dtype=np.int64)
    of[members] = owner
    persistent = np.zeros(len(groups), dtype=np.int64)
    np.add.at(persistent, owner, graph.persistent_bytes[members])
    largest_temporary = np.zeros(len(groups), dtype=np.int64)
    np.maximum.at(largest_temporary, owner, graph.temporary_bytes[members])
    largest_output = np.zeros(len(groups), dtype=np.int64)
    np.maximum.at(largest_output, owner, graph.output_total[members])
    return (Groups(of, np.full(len(groups), -1, dtype=np.int64), np.diff(ptr), np.zeros(ndev, dtype=np.int64)),
            GroupBytes(persistent, largest_temporary + largest_output, ptr, members))


@numba.njit(cache=True)
def _list_schedule(m, groups, group_bytes, ready, waits, policy, cap):  # pragma: no cover - compiled
    """The loop of the module docstring, steps 1-4."""
    graph, ops, devices = m.graph, m.ops, m.devices
    n, ndev = len(graph.compute), len(devices.avail)
    slot = len(ready.key) // ndev
    scratch = np.zeros(ndev)
    urgent_key, urgent_op = np.empty(n + 1), np.empty(n + 1, dtype=np.int64)  # SCT: by inputs on every device
    urgent_size = 0
    awaiting = np.full(ndev, -1, dtype=np.int64)  # SCT: per device, the favorite child of its last op
    fresh = np.empty(2 * n + 1, dtype=np.int64)   # ready ops not yet queued
    nfresh = newly_ready_sources(ready.missing, fresh)
    placed = 0
    while placed < n:
        for k in range(nfresh):  # 1. queue on the devices the op may go to
            c = fresh[k]
            g = groups.of[c]
            pin = groups.device[g] if g >= 0 else -1
            if policy.held[c] and pin < 0:
                continue  # queues when a member pins its group
            for d in range(ndev):
                if pin < 0 or d == pin:
                    ready.size[d] = push(ready.key, ready.tie, d * slot, ready.size[d], input_time(
                        graph, ops, m.transfers, m.sent, m.channels, waits.not_before, c, d, scratch), policy.rank[c])
            if policy.kind == SCT and pin < 0:
                urgent_size = push(urgent_key, urgent_op, 0, urgent_size, _inputs_anywhere(graph, ops, c), c)
        nfresh = 0
        op, d, s, key = -1, -1, np.inf, np.inf  # 2. the pair that can start first
        for dev in range(ndev):
            c, s_c, k = -1, np.inf, np.inf
            f = awaiting[dev]  # m-SCT (§2.4): the favorite child of the device's last op...
            if f >= 0 and ops.device[f] < 0 and ready.missing[f] == 0 and _may_go(groups, waits, f, dev, ndev):
                s_c = max(devices.avail[dev], input_time(graph, ops, m.transfers, m.sent, m.channels,
                                                         waits.not_before, f, dev, scratch))
                c = f  # ...if it can start here no later than anywhere else
                g = groups.of[f]
                for d2 in range(ndev):
                    if (g < 0 or groups.device[g] < 0) and d2 != dev and not waits.dropped[f * ndev + d2] and max(
                            devices.avail[d2], input_time(graph, ops, m.transfers, m.sent, m.channels,
                                                          waits.not_before, f, d2, scratch)) < s_c:
                        c = -1
                        break
                if c >= 0:  # ...unless an urgent op (one that can begin right away on any device) can start here first
                    while urgent_size > 0 and not _may_queue_urgent(ops, groups, urgent_op[0]):
                        _, _, urgent_size = pop(urgent_key, urgent_op, 0, urgent_size)
                    u = urgent_op[0]
                    if urgent_size > 0 and u != f and not waits.dropped[u * ndev + dev]:
                        s_u = max(devices.avail[dev], urgent_key[0])
                        urgent = s_u <= s_c
                        for d2 in range(ndev):
                            if urgent and max(devices.avail[d2], input_time(graph, ops, m.transfers, m.sent, m.channels,
                                                                            waits.not_before, u, d2, scratch)) > s_u:
                                urgent = False
                        if urgent:
                            c, s_c = u, s_u
            base = dev * slot
            while c < 0 and ready.size[dev] > 0:  # the ready op whose inputs are there first
                top = policy.order[ready.tie[base]]
                if ops.device[top] >= 0 or not _may_go(groups, waits, top, dev, ndev):
                    _, _, ready.size[dev] = pop(ready.key, ready.tie, base, ready.size[dev])
                    continue
                k = input_time(graph, ops, m.transfers, m.sent, m.channels, waits.not_before, top, dev, scratch)
                if k > ready.key[base]:  # its inputs arrive later than queued: queue it again
                    _, _, ready.size[dev] = pop(ready.key, ready.tie, base, ready.size[dev])
                    ready.size[dev] = push(ready.key, ready.tie, base, ready.size[dev], k, policy.rank[top])
                    continue
                c, s_c = top, max(devices.avail[dev], k)
            if c >= 0 and (s_c < s or (policy.kind == ADJUST and s_c == s and (
                    k < key or (k == key and policy.rank[c] < policy.rank[op])))):
                op, d, s, key = c, dev, s_c, k
        if op < 0:
            nfresh = _release_held(ops, groups, policy.held, fresh)
            if nfresh > 0:
                continue
            break  # cannot happen on a DAG
        if policy.kind == ADJUST:
            d, s = _adjusted_device(m, groups, waits, policy, op, scratch)
        g = groups.of[op]  # 3. memory admission
        pinned = g >= 0 and groups.device[g] >= 0
        release_on_until(m.releases, m.memory, d, s)
        persistent = 0 if pinned else (group_bytes.persistent[g] if g >= 0 else graph.persistent[op])
        if not pinned:
            own = persistent + graph.alloc_at_start[op] + (group_bytes.extra[g] if g >= 0 else 0)
            if not fits(m.memory, groups.reserved, cap, d, own + received_bytes(graph, ops, m.sent, op, d), persistent):
                if awaiting[d] == op:
                    awaiting[d] = -1
                if not defer(m.releases, waits.not_before, waits.dropped, waits.count, op, d):
                    continue
                d, s = _best_effort(m, groups.reserved, cap, op, own, persistent, scratch)
        received = book_inputs(graph, ops, m.transfers, m.sent, m.channels, op, d)  # 4. start it
        start(ops, devices, op, d, s, duration(graph.compute, devices.speed, op, d))
        placed += 1
        if g >= 0:
            if not pinned:  # the group goes where its first member went; its ready members queue there
                groups.device[g] = d
                groups.reserved[d] += group_bytes.extra[g]
                nfresh = _ready_members(ops, group_bytes, ready.missing, g, fresh, nfresh)
            groups.left[g] -= 1
            if groups.left[g] == 0:
                groups.reserved[d] -= group_bytes.extra[g]
        hold_persistent(m.memory, d, persistent)
        hold_op_memory(graph, ops, m.transfers, m.sent, m.memory, m.releases, op, received)
        nfresh = newly_ready(graph, ready.missing, op, fresh, nfresh)
        if policy.kind == SCT:
            awaiting[d] = policy.favorite[op]


@numba.njit(cache=True)
def newly_ready_sources(missing, fresh):  # pragma: no cover - compiled
    """The ops with no inputs, into ``fresh``; returns how many."""
    count = 0
    for i in range(len(missing)):
        if missing[i] == 0:
            fresh[count] = i
            count += 1
    return count


@numba.njit(cache=True)
def _may_go(groups, waits, op, d, ndev):  # pragma: no cover - compiled
    """Whether ``op`` may go to device ``d``: its group's device, or any it has not given up."""
    g = groups.of[op]
    pin = groups.device[g] if g >= 0 else -1
    return pin == d or (pin < 0 and not waits.dropped[op * ndev + d])


@numba.njit(cache=True)
def _ready_members(ops, group_bytes, missing, g, fresh, nfresh):  # pragma: no cover - compiled
    """The ready, unplaced members of group ``g`` join ``fresh[:nfresh]``; returns the new count."""
    for k in range(group_bytes.ptr[g], group_bytes.ptr[g + 1]):
        c = group_bytes.members[k]
        if ops.device[c] < 0 and missing[c] == 0:
            fresh[nfresh] = c
            nfresh += 1
    return nfresh


@numba.njit(cache=True)
def _best_effort(m, reserved, cap, op, own, persistent, scratch):  # pragma: no cover - compiled
    """Every device gave ``op`` up: the device it overfills least (``own`` bytes besides its
    received inputs, ``persistent`` of them), and its start there (the device free, the inputs in)."""
    best, over = 0, np.inf
    for d in range(len(cap)):
        extra = overfill(m.memory, reserved, cap, d, own + received_bytes(m.graph, m.ops, m.sent, op, d), persistent)
        if extra < over:
            best, over = d, extra
    return best, max(m.devices.avail[best], arrival(m.graph, m.ops, m.transfers, m.sent, m.channels, op, best, scratch))


@numba.njit(cache=True)
def _may_queue_urgent(ops, groups, op):  # pragma: no cover - compiled
    """Whether ``op`` stays in m-SCT's urgent heap: not placed, and not of a pinned group."""
    g = groups.of[op]
    return ops.device[op] < 0 and (g < 0 or groups.device[g] < 0)


@numba.njit(cache=True)
def _adjusted_device(m, groups, waits, policy, op, scratch):  # pragma: no cover - compiled
    """Adjusting Placement's device for ``op`` and its start there (Celeritas Eq. 8-9): the
    device of its predecessor in CPD-TOPO order (Algorithm 2's d_k) unless the device of
    earliest EST (Eq. 7) lets it start earlier by more than its back cost."""
    ndev = len(scratch)
    best, best_est, dk_est = 0, np.inf, np.inf
    p = policy.previous[op]
    dk = m.ops.device[p] if p >= 0 else -1
    for d in range(ndev):
        est = np.inf
        if _may_go(groups, waits, op, d, ndev):
            est = max(m.devices.avail[d], input_time(m.graph, m.ops, m.transfers, m.sent, m.channels,
                                                     waits.not_before, op, d, scratch))
        if est < best_est:
            best, best_est = d, est
        if d == dk:
            dk_est = est
    if dk < 0 or dk_est - best_est > policy.back_cost[op] or dk_est == np.inf:  # Eq. 9
        return best, best_est
    return dk, dk_est


@numba.njit(cache=True)
def _inputs_anywhere(graph, ops, op):  # pragma: no cover - compiled
    """When every input of ``op`` could be on any device: each producer's end plus one transfer."""
    t = 0.0
    for k in range(graph.in_ptr[op], graph.in_ptr[op + 1]):
        e = graph.in_edges[k]
        t = max(t, ops.end[graph.edge_src[e]] + graph.xfer_time[graph.edge_tensor[e]])
    return t


@numba.njit(cache=True)
def _release_held(ops, groups, held, fresh):  # pragma: no cover - compiled
    """Every ready op is a held source waiting for its group: they queue as usual (into
    ``fresh``); returns how many."""
    count = 0
    for c in range(len(held)):
        if held[c] and ops.device[c] < 0 and groups.device[groups.of[c]] < 0:
            held[c] = False
            fresh[count] = c
            count += 1
    return count
