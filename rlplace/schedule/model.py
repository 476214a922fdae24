"""The execution model's state: a few small structs of arrays per graph and cluster.

``Model`` groups the state into parts; each operation of ``rlplace.schedule.ops`` takes only
the parts it touches (numba copies a part passed to a compiled function, at a cost that grows
with its arrays past four, so the parts on the simulator's hot path hold at most four):

* ``graph`` (read only): CSR adjacency, per-op compute and bytes, per-tensor bytes and transfer
  time (n ops, T tensors, E edges), and the buffers tensors share under the cluster's memory
  model (``rlplace.schedule.aliases``): per tensor the ``shared`` input tensor (-1: none) and the
  ``root`` of its chain, and each root's ``members`` (CSR: ``member_ptr``);
* ``ops``: the schedule of the ops: ``device`` (-1: not placed), ``start``, ``end``;
* ``devices``: ``speed``, ``avail`` (when each device is next free), ``busy`` (compute time);
* ``channels``: ``send_free``/``recv_free`` per device, used with sequential communication;
* ``transfers``: per transfer its ``tensor``, destination ``device``, ``start``, ``end``;
* ``sent``: ``of[tensor * D + device]``, the transfer that sent a tensor there (-1: none), and
  the ``count[0]`` of transfers;
* ``memory``: per device the bytes ``live`` now, the ``peak``, and ``instant``: bytes released
  at the current instant that were allocated at it (they still count there);
* ``releases`` (placers): releases already known, a heap per device, the ``last_read`` of each
  tensor on each device and the ``readers_left`` of each buffer (of the tensors of a chain root);
* ``slots`` (insertion scheduling): busy intervals of each resource (a device's compute, send
  and receive channel).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from rlplace.cluster import Cluster, CommModel
from rlplace.graph import OpGraph
from rlplace.schedule.aliases import buffer_roots, own_bytes, shared_input


class Graph(NamedTuple):
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
    persistent: np.ndarray      # bytes held for the whole step
    alloc_at_start: np.ndarray  # temporary + every output
    free_at_end: np.ndarray     # temporary + outputs nobody reads
    held_bytes: np.ndarray      # per tensor: the producer's copy (0: it shares an input's buffer)
    recv_bytes: np.ndarray      # per tensor: a received copy
    xfer_time: np.ndarray       # per tensor: one transfer between two devices
    shared: np.ndarray          # per tensor: the input tensor whose buffer it shares, -1: none
    root: np.ndarray            # per tensor: the first tensor of its chain of shared buffers
    member_ptr: np.ndarray      # root t's chain: members[member_ptr[t]:member_ptr[t + 1]]
    members: np.ndarray


class Ops(NamedTuple):
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray


class Devices(NamedTuple):
    speed: np.ndarray
    avail: np.ndarray
    busy: np.ndarray


class Channels(NamedTuple):
    send_free: np.ndarray
    recv_free: np.ndarray
    sequential: bool


class Transfers(NamedTuple):
    tensor: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray


class Sent(NamedTuple):
    of: np.ndarray     # tensor * D + device -> transfer, -1: not sent there
    count: np.ndarray  # one element: transfers so far


class Memory(NamedTuple):
    live: np.ndarray
    peak: np.ndarray
    instant: np.ndarray


class Releases(NamedTuple):
    time: np.ndarray        # heap keys, one slice per device
    ident: np.ndarray
    size: np.ndarray        # per device
    nbytes: np.ndarray      # per release
    count: np.ndarray       # one element
    last_read: np.ndarray   # tensor * D + device -> end of its last reader there
    readers_left: np.ndarray


class Slots(NamedTuple):
    lo: np.ndarray          # (resources, capacity): busy intervals [lo, hi), sorted
    hi: np.ndarray
    count: np.ndarray


class Model(NamedTuple):
    graph: Graph
    ops: Ops
    devices: Devices
    channels: Channels
    transfers: Transfers
    sent: Sent
    memory: Memory
    releases: Releases
    slots: Slots


@functools.lru_cache(maxsize=16)
def graph_arrays(graph: OpGraph, comm: CommModel, memory_model: str = "default") -> Graph:
    """The read-only part of a model of ``graph`` with interconnect ``comm`` and buffers counted
    by ``memory_model``; the last few are kept (an OpGraph never changes), so simulating many
    placements of one graph builds it once."""
    ntensor = len(graph.tensor_src)
    shared = shared_input(graph, memory_model)
    held = own_bytes(graph, shared)
    not_allocated = np.bincount(graph.tensor_src, weights=graph.tensor_output_bytes - held,
                                minlength=graph.num_ops).astype(np.int64)
    root = buffer_roots(shared)
    order = np.argsort(root, kind="stable")
    frozen = [np.where(graph.tensor_port >= 0, graph.tensor_bytes, 0).astype(np.int64),
              np.asarray(comm.transfer_time(graph.tensor_bytes), dtype=np.float64).reshape(ntensor),
              graph.temporary_bytes + graph.output_total - not_allocated,
              graph.temporary_bytes + graph.unread_output_bytes, held, root,
              np.searchsorted(root[order], np.arange(ntensor + 1)).astype(np.int64), order.astype(np.int64)]
    for a in frozen:
        a.flags.writeable = False
    recv_bytes, xfer_time, alloc_at_start, free_at_end, held, root, member_ptr, members = frozen
    return Graph(
        in_ptr=graph.in_ptr, in_edges=graph.in_edges, edge_src=graph.edge_src, edge_dst=graph.edge_dst,
        edge_tensor=graph.edge_tensor, out_ptr=graph.out_ptr, op_tensor_ptr=graph.op_tensor_ptr,
        tensor_ptr=graph.tensor_ptr, tensor_src=graph.tensor_src, compute=graph.compute_time,
        persistent=graph.persistent_bytes, alloc_at_start=alloc_at_start, free_at_end=free_at_end,
        held_bytes=held, recv_bytes=recv_bytes, xfer_time=xfer_time, shared=shared, root=root,
        member_ptr=member_ptr, members=members)


def new_model(graph: OpGraph, cluster: Cluster, placer: bool = False, insertion: bool = False) -> Model:
    """An empty schedule of ``graph`` on ``cluster``. ``placer``: with the release heaps a
    placer needs to know its memory at decision time; ``insertion``: with idle-slot lists."""
    n, ntensor, ndev, m = graph.num_ops, len(graph.tensor_src), cluster.num_devices, graph.num_edges
    per_device = (n + 2 * ntensor + 1) if placer else 0  # op ends, producer copies, received copies
    nslot = (max(n, m) + 1) if insertion else 0
    arrays = graph_arrays(graph, cluster.comm, cluster.memory_model)
    return Model(
        graph=arrays,
        ops=Ops(device=np.full(n, -1, dtype=np.int64), start=np.zeros(n), end=np.zeros(n)),
        devices=Devices(speed=np.asarray(cluster.speeds, dtype=np.float64), avail=np.zeros(ndev),
                        busy=np.zeros(ndev)),
        channels=Channels(send_free=np.zeros(ndev), recv_free=np.zeros(ndev),
                          sequential=cluster.comm.mode == "sequential"),
        transfers=Transfers(tensor=np.empty(m, dtype=np.int64), device=np.empty(m, dtype=np.int64),
                            start=np.empty(m), end=np.empty(m)),
        sent=Sent(of=np.full(ntensor * ndev, -1, dtype=np.int64), count=np.zeros(1, dtype=np.int64)),
        memory=Memory(live=np.zeros(ndev, dtype=np.int64), peak=np.zeros(ndev, dtype=np.int64),
                      instant=np.zeros(ndev, dtype=np.int64)),
        releases=Releases(time=np.empty(ndev * per_device), ident=np.empty(ndev * per_device, dtype=np.int64),
                          size=np.zeros(ndev, dtype=np.int64),
                          nbytes=np.empty((n + ntensor * (ndev + 1) + 1) if placer else 0, dtype=np.int64),
                          count=np.zeros(1, dtype=np.int64),
                          last_read=np.zeros(ntensor * ndev if placer else 0),
                          readers_left=np.bincount(arrays.root, weights=np.diff(graph.tensor_ptr),
                                                   minlength=ntensor).astype(np.int64)),
        slots=Slots(lo=np.empty((3 * ndev, nslot)), hi=np.empty((3 * ndev, nslot)),
                    count=np.zeros(3 * ndev, dtype=np.int64)),
    )
