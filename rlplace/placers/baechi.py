"""Baechi's memory-constrained placers (Baechi, SoCC'20, §2-4): ``m_topo``, ``m_etf``, ``m_sct``.

All three first run Baechi's graph optimizer (``rlplace.coarsen.GraphOptimizer``: colocation,
co-placement and fusion, §3.1-3.3, each a switch) and place the groups it returns.
``forward_only``: when one device could hold the whole step, the optimizer and the placer see
only the forward ops, and each backward op follows its forward op (§3.3).

m-ETF and m-SCT are list schedulers that simulate the step while they place it (§4.2): an op
starts at its earliest schedulable time (Eq. 1: the later of its device's earliest available
time and the arrival of its inputs; with ``sequential`` communication the wait at the send and
receive queues is added, §3.4). Memory is tracked as the simulator does: persistent bytes for the
whole step, temporary bytes while the op runs, an output until its last reader on that device has
finished and its transfers are done, a received copy until its last reader there has finished.
An (op, device) pair whose device lacks the memory is put back until the device's next release
of memory, and dropped when none is due (§2.3); when the first op of a colocation group is placed,
the whole group goes to that device and the group's memory is reserved there (§3.1, §4.2). An op
that fits nowhere goes to the device it overfills least: placement never fails, and the
simulator reports the OOM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from rlplace.cluster import Cluster, CommModel
from rlplace.coarsen import GraphOptimizer, follow_forward, forward_part
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.placers import register
from rlplace.sim import _pop, _push, simulate


LP_METHODS = ("highs-ipm", "highs-ds", "highs")


@dataclass
class _BaechiPlacer:
    """Options shared by the three placers (Baechi §3, Table 5's switches)."""

    colocation: bool = True
    coplacement: bool = True
    fusion: bool = True
    fusion_exact_check: bool = False
    forward_only: bool = True
    memory_fraction: float = 1.0  # of each device's memory the placer may plan to use

    def place(self, graph: OpGraph, cluster: Cluster) -> Placement:
        if not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"{type(self).__name__}: memory_fraction must be in (0, 1], "
                              f"got {self.memory_fraction!r}")
        caps = np.floor(cluster.memory * self.memory_fraction).astype(np.int64)
        if (self.forward_only and np.any(graph.forward_op >= 0)
                and simulate(graph, cluster, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0] <= caps.min()):
            # §3.3: the optimizer and the placer see the forward ops only; backward ops follow
            sub, keep = forward_part(graph)
            return Placement(follow_forward(graph, keep, self._optimize_and_place(sub, cluster, caps)))
        return Placement(self._optimize_and_place(graph, cluster, caps))

    def _optimize_and_place(self, graph: OpGraph, cluster: Cluster, caps: np.ndarray) -> np.ndarray:
        """Baechi's graph optimizer (when on), then the placer on its groups: one device per op."""
        if not (self.coplacement or self.fusion):
            self.nodes_placed = graph.num_ops
            return self._place_work(graph, cluster, caps, False)
        coarse = GraphOptimizer(self.colocation, self.coplacement, self.fusion,
                                self.fusion_exact_check).optimize(graph)
        work = coarse.quotient()
        self.nodes_placed = work.num_ops
        return coarse.expand(self._place_work(work, cluster, caps, True)).device_of

    def _groups(self, work: OpGraph, optimized: bool) -> dict[str, np.ndarray]:
        """The sets placed together: the quotient's colocation groups (which are the
        optimizer's co-placement sets), or TensorFlow's colocation groups when not optimizing."""
        return work.colocation_groups if (optimized or self.colocation) else {}

    def _place_work(self, work: OpGraph, cluster: Cluster, caps: np.ndarray, optimized: bool) -> np.ndarray:
        raise NotImplementedError


@register("m_topo")
@dataclass
class MTopoPlacer(_BaechiPlacer):
    """m-TOPO (Baechi §2.2): ops in topological order fill device 0 up to the per-device cap
    (total memory / n + the largest op), then device 1, and so on; the last device takes what is
    left. An op's memory is its persistent, temporary and output bytes, as in §2.2; a colocation
    group counts whole at its first op."""

    def _place_work(self, work, cluster, caps, optimized):
        n, ndev = work.num_ops, cluster.num_devices
        unit = np.arange(n)
        for ops in self._groups(work, optimized).values():
            unit[ops] = ops[0]
        need = np.zeros(n, dtype=np.int64)
        np.add.at(need, unit, work.persistent_bytes + work.temporary_bytes + work.output_total)
        cap = need.sum() // ndev + need.max(initial=0)
        device = np.empty(n, dtype=np.int64)
        d, used = 0, 0
        for i in range(n):
            u = unit[i]
            if u == i:
                if used + need[i] > cap and used > 0 and d < ndev - 1:
                    d, used = d + 1, 0
                used += need[i]
                device[i] = d
            else:
                device[i] = device[u]
        return device


@register("m_etf")
@dataclass
class METFPlacer(_BaechiPlacer):
    """m-ETF (Baechi §2.3): repeatedly place the (op, device) pair of earliest schedulable time
    (Eq. 1) among ready ops whose device has the memory."""

    def _place_work(self, work, cluster, caps, optimized):
        return _list_schedule(work, cluster, caps, self._groups(work, optimized), None)


@register("m_sct")
@dataclass
class MSCTPlacer(_BaechiPlacer):
    """m-SCT (Baechi §2.4): ETF that keeps a device for the favorite child of the op it just
    ran (the child must start there no later than anywhere else), unless an urgent op (one whose
    inputs could have reached every device) can start first; favorite children come from the LP
    relaxation of Eq. 2, rounded at ``sct_threshold`` (§4.3). A full device is excluded."""

    sct_threshold: float = 0.1
    lp_method: str = "highs-ipm"  # Baechi §4.2 uses an interior-point method; "highs-ds" is faster here

    def _place_work(self, work, cluster, caps, optimized):
        if not 0 < self.sct_threshold <= 1:
            raise ConfigError(f"m_sct: sct_threshold must be in (0, 1], got {self.sct_threshold!r}")
        if self.lp_method not in LP_METHODS:
            raise ConfigError(f"m_sct: lp_method must be one of {LP_METHODS}, got {self.lp_method!r}")
        fav = favorite_children(work, cluster.comm, float(cluster.speeds.mean()), self.sct_threshold,
                                self.lp_method)
        return _list_schedule(work, cluster, caps, self._groups(work, optimized), fav)


def favorite_children(graph: OpGraph, comm: CommModel, speed: float = 1.0,
                      threshold: float = 0.1, method: str = "highs-ipm") -> np.ndarray:
    """The favorite child of each op (-1: none) from the LP relaxation of SCT's ILP (Eq. 2),
    solved with HiGHS (``method``: its interior-point method by default, as Baechi §4.2).

    Variables: x_e in [0, 1] per edge (0: the child is the favorite), start times s_i >= 0 and
    the makespan w. Minimize w subject to s_i + p_i + c_e x_e <= s_j for e = i -> j,
    s_i + p_i <= w (sinks suffice), sum of x over i's out-edges >= out-degree - 1 and over j's
    in-edges >= in-degree - 1. Edges with x_e < threshold are favorite; where rounding gives an
    op two favorites, the first edge (by source, then destination) wins."""
    n = graph.num_ops
    fav = np.full(n, -1, dtype=np.int64)
    if graph.num_edges == 0:
        return fav
    pairs, inverse = np.unique(graph.edge_src * n + graph.edge_dst, return_inverse=True)
    src, dst = pairs // n, pairs % n
    m = len(pairs)
    c = np.zeros(m)
    np.maximum.at(c, inverse.reshape(-1), comm.transfer_time(graph.tensor_bytes[graph.edge_tensor]))
    p = graph.compute_time / speed
    scale = max(float(p.max()), float(c.max()))
    if scale <= 0:
        return fav
    p, c = p / scale, c / scale
    outdeg, indeg = np.bincount(src, minlength=n), np.bincount(dst, minlength=n)
    sinks = np.flatnonzero(outdeg == 0)
    multi_out, multi_in = np.flatnonzero(outdeg >= 2), np.flatnonzero(indeg >= 2)
    s0, w = m, m + n  # column offsets of s and w; x comes first
    e = np.arange(m)
    out_row = np.full(n, -1)
    out_row[multi_out] = m + len(sinks) + np.arange(len(multi_out))
    in_row = np.full(n, -1)
    in_row[multi_in] = m + len(sinks) + len(multi_out) + np.arange(len(multi_in))
    eo, ei = e[out_row[src] >= 0], e[in_row[dst] >= 0]
    rows = np.concatenate([e, e, e, m + np.arange(len(sinks)), m + np.arange(len(sinks)),
                           out_row[src[eo]], in_row[dst[ei]]])
    cols = np.concatenate([s0 + src, s0 + dst, e, s0 + sinks, np.full(len(sinks), w), eo, ei])
    vals = np.concatenate([np.ones(m), -np.ones(m), c, np.ones(len(sinks)), -np.ones(len(sinks)),
                           -np.ones(len(eo)), -np.ones(len(ei))])
    nrows = m + len(sinks) + len(multi_out) + len(multi_in)
    a_ub = sp.csr_matrix((vals, (rows, cols)), shape=(nrows, m + n + 1))
    b_ub = np.concatenate([-p[src], -p[sinks], 1.0 - outdeg[multi_out], 1.0 - indeg[multi_in]])
    objective = np.zeros(m + n + 1)
    objective[w] = 1.0
    upper = np.full(m + n + 1, np.inf)
    upper[:m] = 1.0
    res = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=np.column_stack([np.zeros(m + n + 1), upper]),
                  method=method)
    if res.x is None:
        raise PlacementError(f"m_sct: the favorite-child LP of graph {graph.name!r} failed ({res.message})")
    has_parent = np.zeros(n, dtype=bool)
    for k in np.flatnonzero(res.x[:m] < threshold).tolist():
        i, j = int(src[k]), int(dst[k])
        if fav[i] < 0 and not has_parent[j]:
            fav[i] = j
            has_parent[j] = True
    return fav


def _list_schedule(work: OpGraph, cluster: Cluster, caps: np.ndarray, groups: dict[str, np.ndarray],
                   fav: np.ndarray | None) -> np.ndarray:
    """Device per op of ``work`` by m-ETF, or by m-SCT when favorite children ``fav`` are given."""
    n = work.num_ops
    group_of = np.full(n, -1, dtype=np.int64)
    members = [ops for ops in groups.values() if len(ops) > 1]
    group_ptr = np.zeros(len(members) + 1, dtype=np.int64)
    group_ptr[1:] = np.cumsum([len(ops) for ops in members])
    group_members = np.concatenate(members) if members else np.zeros(0, dtype=np.int64)
    for g, ops in enumerate(members):
        group_of[ops] = g
    k = len(members)
    owner = np.repeat(np.arange(k), np.diff(group_ptr))
    group_persistent = np.zeros(k, dtype=np.int64)
    np.add.at(group_persistent, owner, work.persistent_bytes[group_members])
    group_extra = np.zeros(k, dtype=np.int64)  # Baechi §4.2: largest temporary + largest output
    max_temp = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_temp, owner, work.temporary_bytes[group_members])
    np.maximum.at(group_extra, owner, work.output_total[group_members])
    group_extra += max_temp
    comm = cluster.comm
    device = _schedule(
        cluster.num_devices, work.compute_time, cluster.speeds, work.in_ptr, work.in_edges,
        work.edge_src, work.edge_dst, work.edge_tensor, work.out_ptr, work.tensor_ptr, work.tensor_src,
        work.tensor_output_bytes, np.where(work.tensor_port >= 0, work.tensor_bytes, 0),
        comm.transfer_time(work.tensor_bytes), work.persistent_bytes,
        work.temporary_bytes + work.output_total, work.temporary_bytes + work.unread_output_bytes,
        group_of, group_ptr, group_members, group_persistent, group_extra, caps,
        comm.mode == "sequential", fav if fav is not None else np.full(n, -1, dtype=np.int64), fav is not None)
    if np.any(device < 0):
        raise PlacementError(f"list scheduling left op {work.names[int(np.argmax(device < 0))]!r} unplaced")
    return device


# ------------------------------------------------------------------------------ the kernel

@numba.njit(cache=True)
def _arrival(op, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish, arrival, xtime,
             send_free, recv_free, sequential, not_before, scratch):  # pragma: no cover - compiled
    """When every input of ``op`` can be on device ``d`` (Eq. 1's second term; with sequential
    communication, after the transfers queued before them, §3.4), and no earlier than
    ``not_before`` (the device's next release of memory, where it lacked the memory)."""
    t = not_before[op * ndev + d]
    rf = recv_free[d]
    if sequential:
        for k in range(ndev):
            scratch[k] = send_free[k]
    for k in range(in_ptr[op], in_ptr[op + 1]):
        e = in_edges[k]
        s = edge_src[e]
        ds = dev_of[s]
        if ds == d:
            a = finish[s]
        else:
            tt = edge_tensor[e]
            a = arrival[tt * ndev + d]
            if a < 0:
                if sequential:
                    a = max(finish[s], scratch[ds], rf) + xtime[tt]
                    scratch[ds] = a
                    rf = a
                else:
                    a = finish[s] + xtime[tt]
        if a > t:
            t = a
    return t


@numba.njit(cache=True)
def _schedule(ndev, compute, speeds, in_ptr, in_edges, edge_src, edge_dst, edge_tensor, out_ptr,
              tensor_ptr, tensor_src, held_bytes, recv_bytes, xtime, persistent, alloc_start,
              free_end, group_of, group_ptr, group_members, group_persistent, group_extra, cap,
              sequential, fav, sct):  # pragma: no cover - compiled
    n = len(compute)
    ntensor = len(tensor_src)
    dev_of = np.full(n, -1, dtype=np.int64)
    finish = np.zeros(n)
    npred = in_ptr[1:] - in_ptr[:-1]
    avail = np.zeros(ndev)
    mem = np.zeros(ndev, dtype=np.int64)
    peak = np.zeros(ndev, dtype=np.int64)
    reserved = np.zeros(ndev, dtype=np.int64)
    group_dev = np.full(len(group_persistent), -1, dtype=np.int64)
    group_left = group_ptr[1:] - group_ptr[:-1]
    arrival = np.full(ntensor * ndev, -1.0)
    last_end = np.zeros(ntensor * ndev)
    readers_left = tensor_ptr[1:] - tensor_ptr[:-1]
    send_free = np.zeros(ndev)
    recv_free = np.zeros(ndev)
    not_before = np.zeros(n * ndev)
    dropped = np.zeros(n * ndev, dtype=np.bool_)
    drop_count = np.zeros(n, dtype=np.int64)
    scratch = np.zeros(ndev)
    # Ready ops per device keyed by a lower bound of their arrival time (lazily raised).
    hcap = 2 * n + 1
    hf = np.empty(ndev * hcap)
    hi = np.empty(ndev * hcap, dtype=np.int64)
    hsize = np.zeros(ndev, dtype=np.int64)
    # Memory releases per device: (time, event), event bytes in ev_bytes.
    fcap = n + 2 * ntensor + 1
    ff = np.empty(ndev * fcap)
    fi = np.empty(ndev * fcap, dtype=np.int64)
    fsize = np.zeros(ndev, dtype=np.int64)
    ev_bytes = np.empty(n + ntensor * ndev + 1, dtype=np.int64)
    nev = 0
    # m-SCT: ready ops keyed by the time their inputs could be on every device.
    uf = np.empty(n + 1)
    ui = np.empty(n + 1, dtype=np.int64)
    usize = 0
    awaiting = np.full(ndev, -1, dtype=np.int64)
    fresh = np.empty(n + 1, dtype=np.int64)
    nfresh = 0
    for i in range(n):
        if npred[i] == 0:
            fresh[nfresh] = i
            nfresh += 1

    placed = 0
    now = 0.0
    while placed < n:
        while nfresh > 0:  # newly ready ops join the queues
            nfresh -= 1
            c = fresh[nfresh]
            g = group_of[c]
            if g >= 0 and group_dev[g] >= 0:
                d = group_dev[g]
                key = _arrival(c, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish,
                               arrival, xtime, send_free, recv_free, sequential, not_before, scratch)
                hsize[d] = _push(hf, hi, d * hcap, hsize[d], key, c)
            else:
                for d in range(ndev):
                    key = _arrival(c, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish,
                                   arrival, xtime, send_free, recv_free, sequential, not_before, scratch)
                    hsize[d] = _push(hf, hi, d * hcap, hsize[d], key, c)
                if sct:
                    urgent = 0.0
                    for k in range(in_ptr[c], in_ptr[c + 1]):
                        e = in_edges[k]
                        urgent = max(urgent, finish[edge_src[e]] + xtime[edge_tensor[e]])
                    usize = _push(uf, ui, 0, usize, urgent, c)

        # Each device's candidate: (op, start).
        best_d, best_op, best_s = -1, -1, np.inf
        for d in range(ndev):
            op, s = -1, np.inf
            c = awaiting[d]
            if sct and c >= 0 and dev_of[c] < 0 and npred[c] == 0 and (
                    group_of[c] < 0 or group_dev[group_of[c]] < 0 or group_dev[group_of[c]] == d) and not (
                    dropped[c * ndev + d] and (group_of[c] < 0 or group_dev[group_of[c]] != d)):
                s_c = max(avail[d], _arrival(c, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of,
                                             finish, arrival, xtime, send_free, recv_free, sequential,
                                             not_before, scratch))
                earliest = True
                g = group_of[c]
                if g < 0 or group_dev[g] < 0:
                    for d2 in range(ndev):
                        if d2 != d and not dropped[c * ndev + d2] and max(avail[d2], _arrival(
                                c, d2, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish, arrival,
                                xtime, send_free, recv_free, sequential, not_before, scratch)) < s_c:
                            earliest = False
                            break
                if earliest:  # the device waits for the favorite child unless an urgent op comes first
                    while usize > 0 and (dev_of[ui[0]] >= 0 or (group_of[ui[0]] >= 0 and group_dev[group_of[ui[0]]] >= 0)):
                        _, _, usize = _pop(uf, ui, 0, usize)
                    op, s = c, s_c
                    if usize > 0 and ui[0] != c and not dropped[ui[0] * ndev + d] and max(avail[d], uf[0]) <= s_c:
                        u = ui[0]
                        op = u
                        s = max(avail[d], uf[0], _arrival(u, d, ndev, in_ptr, in_edges, edge_src, edge_tensor,
                                                          dev_of, finish, arrival, xtime, send_free, recv_free,
                                                          sequential, not_before, scratch))
            if op < 0:  # ETF: the ready op that can start first here
                base = d * hcap
                while hsize[d] > 0:
                    c = hi[base]
                    g = group_of[c]
                    if dev_of[c] >= 0 or (g >= 0 and group_dev[g] >= 0 and group_dev[g] != d) or (
                            dropped[c * ndev + d] and (g < 0 or group_dev[g] != d)):
                        _, _, hsize[d] = _pop(hf, hi, base, hsize[d])
                        continue
                    key = _arrival(c, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish,
                                   arrival, xtime, send_free, recv_free, sequential, not_before, scratch)
                    if key > hf[base]:
                        _, _, hsize[d] = _pop(hf, hi, base, hsize[d])
                        hsize[d] = _push(hf, hi, base, hsize[d], key, c)
                        continue
                    op, s = c, max(avail[d], key)
                    break
            if op >= 0 and s < best_s:
                best_d, best_op, best_s = d, op, s
        if best_op < 0:
            break  # cannot happen on a DAG; _list_schedule reports it

        op, d = best_op, best_d
        now = max(now, best_s)
        for d2 in range(ndev):  # memory released up to now
            while fsize[d2] > 0 and ff[d2 * fcap] <= now:
                _, ev, fsize[d2] = _pop(ff, fi, d2 * fcap, fsize[d2])
                mem[d2] -= ev_bytes[ev]

        g = group_of[op]
        if g < 0 or group_dev[g] < 0:  # memory check (a fixed group's memory is reserved)
            pers = group_persistent[g] if g >= 0 else persistent[op]
            need = pers + alloc_start[op] + (group_extra[g] if g >= 0 else 0)
            for k in range(in_ptr[op], in_ptr[op + 1]):
                e = in_edges[k]
                if dev_of[edge_src[e]] != d and arrival[edge_tensor[e] * ndev + d] < 0:
                    need += recv_bytes[edge_tensor[e]]
            if mem[d] + reserved[d] + need > cap[d] or peak[d] + pers > cap[d]:
                if awaiting[d] == op:
                    awaiting[d] = -1
                if fsize[d] > 0:  # try again when this device next releases memory
                    not_before[op * ndev + d] = ff[d * fcap]
                    continue
                dropped[op * ndev + d] = True
                drop_count[op] += 1
                if drop_count[op] < ndev:
                    continue
                over = np.inf  # it fits nowhere: the device it overfills least (best effort)
                for d2 in range(ndev):
                    extra = float(max(mem[d2] + reserved[d2] + need, peak[d2] + pers) - cap[d2])
                    if extra < over:
                        over = extra
                        d = d2
                best_s = max(now, avail[d], _arrival(op, d, ndev, in_ptr, in_edges, edge_src, edge_tensor,
                                                     dev_of, finish, arrival, xtime, send_free,
                                                     recv_free, sequential, not_before, scratch))

        # Place op on d, starting at best_s.
        start = best_s
        f = start + compute[op] / speeds[d]
        dev_of[op] = d
        finish[op] = f
        avail[d] = max(avail[d], f)
        placed += 1
        if g >= 0:
            if group_dev[g] < 0:
                group_dev[g] = d
                mem[d] += group_persistent[g]
                peak[d] += group_persistent[g]
                reserved[d] += group_extra[g]
                for k in range(group_ptr[g], group_ptr[g + 1]):
                    c = group_members[k]
                    if dev_of[c] < 0 and npred[c] == 0:
                        key = _arrival(c, d, ndev, in_ptr, in_edges, edge_src, edge_tensor, dev_of, finish,
                                       arrival, xtime, send_free, recv_free, sequential, not_before, scratch)
                        hsize[d] = _push(hf, hi, d * hcap, hsize[d], key, c)
            group_left[g] -= 1
            if group_left[g] == 0:
                reserved[d] -= group_extra[g]
        else:
            mem[d] += persistent[op]
            peak[d] += persistent[op]
        for k in range(in_ptr[op], in_ptr[op + 1]):  # inputs: transfers, then releases
            e = in_edges[k]
            s_op = edge_src[e]
            tt = edge_tensor[e]
            ds = dev_of[s_op]
            if ds != d and arrival[tt * ndev + d] < 0:
                xs = finish[s_op]
                if sequential:
                    xs = max(xs, send_free[ds], recv_free[d])
                    send_free[ds] = xs + xtime[tt]
                    recv_free[d] = xs + xtime[tt]
                arrival[tt * ndev + d] = xs + xtime[tt]
                mem[d] += recv_bytes[tt]
            if f > last_end[tt * ndev + d]:
                last_end[tt * ndev + d] = f
            readers_left[tt] -= 1
            if readers_left[tt] == 0:
                d0 = dev_of[tensor_src[tt]]
                t_free = last_end[tt * ndev + d0]
                for d2 in range(ndev):
                    a = arrival[tt * ndev + d2]
                    if d2 != d0 and a >= 0:
                        t_free = max(t_free, a)
                        if recv_bytes[tt] > 0:
                            ev_bytes[nev] = recv_bytes[tt]
                            fsize[d2] = _push(ff, fi, d2 * fcap, fsize[d2], last_end[tt * ndev + d2], nev)
                            nev += 1
                if held_bytes[tt] > 0:
                    ev_bytes[nev] = held_bytes[tt]
                    fsize[d0] = _push(ff, fi, d0 * fcap, fsize[d0], t_free, nev)
                    nev += 1
        mem[d] += alloc_start[op]
        if mem[d] > peak[d]:
            peak[d] = mem[d]
        if free_end[op] > 0:
            ev_bytes[nev] = free_end[op]
            fsize[d] = _push(ff, fi, d * fcap, fsize[d], f, nev)
            nev += 1
        for e in range(out_ptr[op], out_ptr[op + 1]):
            c = edge_dst[e]
            npred[c] -= 1
            if npred[c] == 0:
                fresh[nfresh] = c
                nfresh += 1
        if sct:
            awaiting[d] = fav[op]
    return dev_of
