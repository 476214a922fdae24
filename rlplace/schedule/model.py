"""The execution model's state: one struct of arrays per graph and cluster.

``Model`` holds the graph's arrays (read only), the schedule being built (device, start and end
per op; the transfers), the devices' and channels' free times, and the memory ledger. The
simulator (``rlplace.sim``) and the list-scheduling placers build one with ``new_model`` and
change it only through the operations of ``rlplace.schedule.ops``.

Field groups (n ops, T tensors, D devices, E edges):

* graph: CSR adjacency, per-op compute and bytes, per-tensor bytes and transfer time;
* schedule: ``device``/``op_start``/``op_end`` (n), ``avail``/``busy`` (D), the transfers
  ``x_tensor``/``x_dev``/``x_start``/``x_end`` (up to E of them, ``num_transfers[0]`` used) and
  ``xfer_of[tensor * D + device]`` (-1: not sent there);
* channels: ``send_free``/``recv_free`` (D), used with sequential communication;
* memory: ``mem`` (live bytes now), ``peak``, ``instant`` (bytes released at the current instant
  that were allocated at it, still counted there) per device; for placers, the releases already
  known (a heap per device) and ``last_read[tensor * D + device]``;
* idle slots: busy intervals per resource (a device's compute, send and receive channel) for
  insertion scheduling (HEFT, Celeritas).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph


class Model(NamedTuple):
    # the graph and the cluster (read only)
    in_ptr: np.ndarray
    in_edges: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_tensor: np.ndarray
    out_ptr: np.ndarray
    op_tensor_ptr: np.ndarray
    tensor_ptr: np.ndarray
    tensor_src: np.ndarray
    compute: np.ndarray         # s on the reference device
    speeds: np.ndarray
    persistent: np.ndarray      # bytes held for the whole step
    alloc_at_start: np.ndarray  # temporary + every output
    free_at_end: np.ndarray     # temporary + outputs nobody reads
    held_bytes: np.ndarray      # per tensor: the producer's copy
    recv_bytes: np.ndarray      # per tensor: a received copy
    xfer_time: np.ndarray       # per tensor: one transfer between two devices
    sequential: bool
    # the schedule
    device: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    avail: np.ndarray
    busy: np.ndarray
    xfer_of: np.ndarray
    x_tensor: np.ndarray
    x_dev: np.ndarray
    x_start: np.ndarray
    x_end: np.ndarray
    num_transfers: np.ndarray   # one element
    send_free: np.ndarray
    recv_free: np.ndarray
    # memory
    mem: np.ndarray
    peak: np.ndarray
    instant: np.ndarray
    rel_t: np.ndarray           # placers: release heaps, one slice per device
    rel_i: np.ndarray
    rel_size: np.ndarray
    rel_bytes: np.ndarray
    num_releases: np.ndarray    # one element
    last_read: np.ndarray
    readers_left: np.ndarray
    # idle slots: busy intervals [slot_lo, slot_hi) of resource r (device d: r = d; its send
    # channel: D + d; its receive channel: 2D + d), sorted, slot_count[r] of them
    slot_lo: np.ndarray
    slot_hi: np.ndarray
    slot_count: np.ndarray


def new_model(graph: OpGraph, cluster: Cluster, placer: bool = False, insertion: bool = False) -> Model:
    """An empty schedule of ``graph`` on ``cluster``. ``placer``: with the release heaps a
    placer needs to know its memory at decision time; ``insertion``: with idle-slot lists."""
    n, ntensor, ndev, m = graph.num_ops, len(graph.tensor_src), cluster.num_devices, graph.num_edges
    comm = cluster.comm
    per_device = (n + 2 * ntensor + 1) if placer else 0  # op ends, producer copies, received copies
    nrel = (n + ntensor * (ndev + 1) + 1) if placer else 0
    nslot = (max(n, m) + 1) if insertion else 0
    return Model(
        in_ptr=graph.in_ptr, in_edges=graph.in_edges, edge_src=graph.edge_src, edge_dst=graph.edge_dst,
        edge_tensor=graph.edge_tensor, out_ptr=graph.out_ptr, op_tensor_ptr=graph.op_tensor_ptr,
        tensor_ptr=graph.tensor_ptr, tensor_src=graph.tensor_src,
        compute=graph.compute_time, speeds=np.asarray(cluster.speeds, dtype=np.float64),
        persistent=graph.persistent_bytes,
        alloc_at_start=graph.temporary_bytes + graph.output_total,
        free_at_end=graph.temporary_bytes + graph.unread_output_bytes,
        held_bytes=graph.tensor_output_bytes,
        recv_bytes=np.where(graph.tensor_port >= 0, graph.tensor_bytes, 0).astype(np.int64),
        xfer_time=np.asarray(comm.transfer_time(graph.tensor_bytes), dtype=np.float64).reshape(ntensor),
        sequential=comm.mode == "sequential",
        device=np.full(n, -1, dtype=np.int64), op_start=np.zeros(n), op_end=np.zeros(n),
        avail=np.zeros(ndev), busy=np.zeros(ndev),
        xfer_of=np.full(ntensor * ndev, -1, dtype=np.int64),
        x_tensor=np.empty(m, dtype=np.int64), x_dev=np.empty(m, dtype=np.int64),
        x_start=np.empty(m), x_end=np.empty(m), num_transfers=np.zeros(1, dtype=np.int64),
        send_free=np.zeros(ndev), recv_free=np.zeros(ndev),
        mem=np.zeros(ndev, dtype=np.int64), peak=np.zeros(ndev, dtype=np.int64),
        instant=np.zeros(ndev, dtype=np.int64),
        rel_t=np.empty(ndev * per_device), rel_i=np.empty(ndev * per_device, dtype=np.int64),
        rel_size=np.zeros(ndev, dtype=np.int64), rel_bytes=np.empty(nrel, dtype=np.int64),
        num_releases=np.zeros(1, dtype=np.int64),
        last_read=np.zeros(ntensor * ndev if placer else 0),
        readers_left=np.diff(graph.tensor_ptr).astype(np.int64),
        slot_lo=np.empty((3 * ndev, nslot)), slot_hi=np.empty((3 * ndev, nslot)),
        slot_count=np.zeros(3 * ndev, dtype=np.int64),
    )
