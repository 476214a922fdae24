"""OpGraph: the operators of one training step as a DAG, with per-op arrays computed once.

An op has a ``compute_time`` (seconds, on the reference device), ``persistent_bytes`` (held for
the whole step: weights, optimizer slots), ``temporary_bytes`` (scratch held while it runs) and
``output_bytes`` (one entry per output port). Optional: ``op_type``, ``output_shapes`` (one
shape per output, ``None`` where unknown), ``colocation_group`` (ops of one group must share a
device), ``forward_op`` (for a backward op: the forward op it belongs to) and ``layer`` (a tag
used by expert placements). An edge is a tensor: it carries ``bytes`` from output port
``src_output`` of its source; ``src_output = -1`` marks a control edge (an ordering constraint).

Ops get a stable index in topological order (the input order where it already is one), so
plain arrays stand for per-op data. Edges are sorted by (source, port, destination), so the
edges leaving one op and the edges carrying one tensor are contiguous ranges (CSR).

File format (``save``/``load``): gzip-compressed JSON, ``format = "rlplace.opgraph"``,
``version = 1``::

    {"format": "rlplace.opgraph", "version": 1, "name": "...",
     "ops":   [{"name": ..., "compute_time": ..., "persistent_bytes": ...,
               "temporary_bytes": ..., "output_bytes": [...], <optional attributes>}, ...],
     "edges": [[src_name, dst_name, bytes, src_output], ...]}

Ops are written in topological order; optional attributes that are unset are omitted.

Limits, so that arithmetic on a valid graph can neither overflow nor lose its resolution: byte
counts are integers, and all of a graph's bytes added up (every op's persistent, temporary and
output bytes and every edge's bytes) are at most ``MAX_TOTAL_BYTES`` = 2**62, so the int64 sums the
memory model and the simulator take over any subset of them fit; the compute times added up are
at most ``MAX_TOTAL_COMPUTE`` = 1e9 s (32 years), where a float64 clock still resolves 1.2e-7 s,
finer than the 1 µs of the shortest profiled op, and any schedule's makespan (at most that sum
over the slowest device's speed plus the transfers) stays finite. ``load`` also caps the
decompressed size of a file (``DEFAULT_MAX_FILE_BYTES``), against gzip bombs.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx
import numba
import numpy as np

from rlplace.datafile import regular_file
from rlplace.errors import GraphError

FORMAT = "rlplace.opgraph"
FORMAT_VERSION = 1
CONTROL = -1  # src_output of a control edge

REQUIRED_ATTRS = ("compute_time", "persistent_bytes", "temporary_bytes", "output_bytes")
OPTIONAL_ATTRS = ("op_type", "output_shapes", "colocation_group", "forward_op", "layer")
EDGE_ATTRS = ("bytes", "src_output")

MAX_TOTAL_BYTES = 2**62  # all of a graph's byte counts added up (module docstring)
MAX_TOTAL_COMPUTE = 1e9  # seconds, all compute times added up (module docstring)
# Decompressed size of a graph file: 256 MiB, about 580,000 ops of a TensorFlow profile (the
# GNMT profile takes 464 bytes per op) or 1.2 million of a layered graph (218 bytes per op).
DEFAULT_MAX_FILE_BYTES = 2**28


@dataclass(frozen=True)
class GraphStats:
    """Summary figures of an OpGraph (seconds and bytes)."""

    num_ops: int
    num_edges: int
    total_compute: float
    total_memory: int
    critical_path: float
    ccr: float | None  # Celeritas Eq. 1; None when no CommModel was given

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class OpGraph:
    """One training step as a DAG of operators. Build it with ``from_records``,
    ``from_networkx`` or ``load``; it is not meant to be modified afterwards."""

    def __init__(self, name: str, ops: list[dict[str, Any]], edges: np.ndarray):
        # ``ops`` are validated, in topological order; ``edges`` is an int64 array of rows
        # (src, dst, bytes, src_output), sorted. Use the constructors below.
        self.name = name
        n = len(ops)
        self.names: list[str] = [op["name"] for op in ops]
        self.index: dict[str, int] = {nm: i for i, nm in enumerate(self.names)}
        self.compute_time = _frozen(np.array([op["compute_time"] for op in ops], dtype=np.float64))
        self.persistent_bytes = _frozen(np.array([op["persistent_bytes"] for op in ops], dtype=np.int64))
        self.temporary_bytes = _frozen(np.array([op["temporary_bytes"] for op in ops], dtype=np.int64))
        self.output_bytes: list[list[int]] = [op["output_bytes"] for op in ops]
        self.output_total = _frozen(np.array([sum(b) for b in self.output_bytes], dtype=np.int64))
        self.op_type: list[str | None] = [op.get("op_type") for op in ops]
        self.output_shapes: list[list | None] = [op.get("output_shapes") for op in ops]
        self.colocation_group: list[str | None] = [op.get("colocation_group") for op in ops]
        self.layer: list[int | str | None] = [op.get("layer") for op in ops]
        self.forward_op = _frozen(np.array(
            [self.index[op["forward_op"]] if op.get("forward_op") is not None else -1 for op in ops],
            dtype=np.int64).reshape(n))

        e = edges.reshape(-1, 4)
        self.edge_src = _frozen(e[:, 0].copy())
        self.edge_dst = _frozen(e[:, 1].copy())
        self.edge_bytes = _frozen(e[:, 2].copy())
        self.edge_src_output = _frozen(e[:, 3].copy())
        m = len(e)
        # Out-edges of op i: edges out_ptr[i]:out_ptr[i+1] (edges are sorted by source).
        self.out_ptr = _frozen(np.searchsorted(self.edge_src, np.arange(n + 1)).astype(np.int64))
        # In-edges of op i: edge ids in_edges[in_ptr[i]:in_ptr[i+1]].
        order = np.argsort(self.edge_dst, kind="stable")
        self.in_edges = _frozen(order.astype(np.int64))
        self.in_ptr = _frozen(np.searchsorted(self.edge_dst[order], np.arange(n + 1)).astype(np.int64))
        # Tensors: one per (source, port) that has edges; edges of tensor t are
        # tensor_ptr[t]:tensor_ptr[t+1]; tensors of op i are op_tensor_ptr[i]:op_tensor_ptr[i+1].
        new_tensor = np.ones(m, dtype=bool)
        if m:
            new_tensor[1:] = (np.diff(self.edge_src) != 0) | (np.diff(self.edge_src_output) != 0)
        starts = np.flatnonzero(new_tensor)
        self.tensor_ptr = _frozen(np.append(starts, m).astype(np.int64))
        self.edge_tensor = _frozen((np.cumsum(new_tensor) - 1).astype(np.int64))
        self.tensor_src = _frozen(self.edge_src[starts].copy())
        self.tensor_port = _frozen(self.edge_src_output[starts].copy())
        self.op_tensor_ptr = _frozen(np.searchsorted(self.tensor_src, np.arange(n + 1)).astype(np.int64))
        # Bytes a tensor occupies in its producer's memory and bytes it takes to send it.
        self.tensor_output_bytes = _frozen(np.array(
            [self.output_bytes[s][p] if p >= 0 else 0 for s, p in zip(self.tensor_src, self.tensor_port)],
            dtype=np.int64))
        self.tensor_bytes = _frozen(
            np.maximum.reduceat(self.edge_bytes, starts) if m else np.zeros(0, dtype=np.int64))
        # Output bytes of ports no edge reads: allocated at the op's start, freed at its end.
        read = np.zeros(n, dtype=np.int64)
        np.add.at(read, self.tensor_src, self.tensor_output_bytes)
        self.unread_output_bytes = _frozen(self.output_total - read)

    # ----------------------------------------------------------------------------- basics
    @property
    def num_ops(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    def __len__(self) -> int:
        return self.num_ops

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={self.num_ops}, edges={self.num_edges})"

    def successors(self, i: int) -> np.ndarray:
        return self.edge_dst[self.out_ptr[i]:self.out_ptr[i + 1]]

    def predecessors(self, i: int) -> np.ndarray:
        return self.edge_src[self.in_edges[self.in_ptr[i]:self.in_ptr[i + 1]]]

    def op_record(self, i: int) -> dict[str, Any]:
        """The attributes of op ``i`` as in the file format (unset optional ones omitted)."""
        rec: dict[str, Any] = {
            "name": self.names[i],
            "compute_time": float(self.compute_time[i]),
            "persistent_bytes": int(self.persistent_bytes[i]),
            "temporary_bytes": int(self.temporary_bytes[i]),
            "output_bytes": list(self.output_bytes[i]),
        }
        optional = {
            "op_type": self.op_type[i],
            "output_shapes": self.output_shapes[i],
            "colocation_group": self.colocation_group[i],
            "forward_op": self.names[self.forward_op[i]] if self.forward_op[i] >= 0 else None,
            "layer": self.layer[i],
        }
        rec.update({k: v for k, v in optional.items() if v is not None})
        return rec

    def edge_records(self) -> list[list]:
        return [[self.names[s], self.names[d], int(b), int(p)] for s, d, b, p in
                zip(self.edge_src, self.edge_dst, self.edge_bytes, self.edge_src_output)]

    @cached_property
    def colocation_groups(self) -> dict[str, np.ndarray]:
        """Colocation group name -> indices of its ops (only groups that are set)."""
        groups: dict[str, list[int]] = {}
        for i, g in enumerate(self.colocation_group):
            if g is not None:
                groups.setdefault(g, []).append(i)
        return {g: np.array(ops, dtype=np.int64) for g, ops in groups.items()}

    def subgraph(self, ops) -> OpGraph:
        """The graph induced by ``ops`` (indices or a boolean mask): those ops and the edges
        between them, in the same relative order."""
        keep = np.zeros(self.num_ops, dtype=bool)
        keep[np.asarray(ops)] = True
        inside = keep[self.edge_src] & keep[self.edge_dst]
        records = [self.op_record(i) for i in np.flatnonzero(keep)]
        kept = {r["name"] for r in records}
        for r in records:
            if r.get("forward_op") not in kept:
                r.pop("forward_op", None)
        edges = [(self.names[s], self.names[d], int(b), int(p)) for s, d, b, p in
                 zip(self.edge_src[inside], self.edge_dst[inside], self.edge_bytes[inside],
                     self.edge_src_output[inside])]
        return OpGraph.from_records(records, edges, name=f"{self.name}/sub")

    # ----------------------------------------------------------------------------- statistics
    @property
    def total_compute(self) -> float:
        return float(self.compute_time.sum())

    @property
    def op_memory(self) -> np.ndarray:
        """Per op: its persistent, temporary and output bytes, no reuse (Baechi §2.2's memory of
        an op, Celeritas Eq. 6's Memory[v])."""
        return self.persistent_bytes + self.temporary_bytes + self.output_total

    @property
    def total_memory(self) -> int:
        """Sum of persistent, temporary and output bytes over all ops (no reuse)."""
        return int(self.op_memory.sum())

    def critical_path(self, speed: float = 1.0) -> float:
        """Length of the longest compute-only path, with every op at ``speed``."""
        return float(_longest_path(self.in_ptr, self.in_edges, self.edge_src,
                                   self.compute_time / speed).max(initial=0.0))

    def bottom_levels(self, speed: float = 1.0) -> np.ndarray:
        """Per op, the longest compute-only path from it to an exit (the op included), with every
        op at ``speed``: the ``blevel`` of list scheduling without communication."""
        return _longest_path_to_exit(self.out_ptr, self.edge_dst, self.compute_time / speed)

    def ccr(self, comm) -> float:
        """Communication-to-computation ratio (Celeritas Eq. 1): the transfer time of every
        edge under ``comm`` (a CommModel) over the total compute time."""
        total = self.total_compute
        comm_time = float(np.sum(comm.transfer_time(self.edge_bytes)))
        return comm_time / total if total > 0 else math.inf

    def stats(self, comm=None) -> GraphStats:
        return GraphStats(self.num_ops, self.num_edges, self.total_compute, self.total_memory,
                          self.critical_path(), self.ccr(comm) if comm is not None else None)

    # ----------------------------------------------------------------------------- constructors
    @classmethod
    def from_records(cls, ops: Sequence[Mapping[str, Any]], edges: Iterable[Sequence],
                     name: str = "") -> OpGraph:
        """Build and validate a graph from op records (dicts with ``name`` and the attributes of
        the module docstring) and edges ``(src, dst, bytes[, src_output])`` given by op name.
        ``src_output`` defaults to 0. Raises GraphError naming the offending op or edge."""
        clean = [_check_op(op, k) for k, op in enumerate(ops)]
        nbytes = _check_totals(clean)
        index: dict[str, int] = {}
        for i, op in enumerate(clean):
            if op["name"] in index:
                raise GraphError(f"duplicate op name {op['name']!r}")
            index[op["name"]] = i
        for op in clean:
            fwd = op.get("forward_op")
            if fwd is not None and fwd not in index:
                raise GraphError(f"op {op['name']!r}: forward_op {fwd!r} is not an op of the graph")

        rows = [_check_edge(e, index, clean) for e in edges]
        _check_edge_bytes(rows, clean, nbytes)
        e = np.array(rows, dtype=np.int64).reshape(-1, 4)
        if len(e) and len(np.unique(e[:, [0, 1, 3]], axis=0)) != len(e):
            seen = set()
            for s, d, _, p in e.tolist():
                if (s, d, p) in seen:
                    raise GraphError(f"duplicate edge {clean[s]['name']!r} -> {clean[d]['name']!r} "
                                     f"(src_output {p})")
                seen.add((s, d, p))

        order = _topological_order(len(clean), e, [op["name"] for op in clean])
        rank = np.empty(len(clean), dtype=np.int64)
        rank[order] = np.arange(len(clean))
        ops_sorted = [clean[i] for i in order]
        if len(e):
            e = np.column_stack([rank[e[:, 0]], rank[e[:, 1]], e[:, 2], e[:, 3]])
            e = e[np.lexsort((e[:, 1], e[:, 3], e[:, 0]))]
        return cls(name, ops_sorted, e)

    @classmethod
    def from_networkx(cls, g: nx.DiGraph, name: str | None = None) -> OpGraph:
        """Build from a networkx DiGraph (or MultiDiGraph, for an op that reads several outputs
        of one producer) whose node attributes are those of the module docstring and whose edge
        attributes are ``bytes`` and optionally ``src_output``."""
        ops = []
        for node, attrs in g.nodes(data=True):
            if not isinstance(node, str):
                raise GraphError(f"op {node!r}: op names must be strings")
            ops.append({"name": node, **attrs})
        edges = []
        for u, v, attrs in g.edges(data=True):
            unknown = set(attrs) - set(EDGE_ATTRS)
            if unknown:
                raise GraphError(f"edge {u!r} -> {v!r}: unknown attribute {sorted(unknown)[0]!r}")
            if "bytes" not in attrs:
                raise GraphError(f"edge {u!r} -> {v!r}: missing required attribute 'bytes'")
            edges.append((u, v, attrs["bytes"], attrs.get("src_output", 0)))
        return cls.from_records(ops, edges, name=g.graph.get("name", "") if name is None else name)

    def to_networkx(self) -> nx.DiGraph:
        """The graph as a networkx DiGraph; a MultiDiGraph where one op reads several outputs
        of the same producer (a DiGraph cannot hold those parallel edges)."""
        pairs = self.edge_src * self.num_ops + self.edge_dst
        multi = len(np.unique(pairs)) != len(pairs)
        g = nx.MultiDiGraph(name=self.name) if multi else nx.DiGraph(name=self.name)
        for i in range(self.num_ops):
            rec = self.op_record(i)
            g.add_node(rec.pop("name"), **rec)
        for s, d, b, p in self.edge_records():
            g.add_edge(s, d, bytes=b, src_output=p)
        return g

    # ----------------------------------------------------------------------------- files
    def save(self, path: str | Path) -> None:
        """Write the versioned json.gz format of the module docstring."""
        doc = {"format": FORMAT, "version": FORMAT_VERSION, "name": self.name,
               "ops": [self.op_record(i) for i in range(self.num_ops)],
               "edges": self.edge_records()}
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))

    @classmethod
    def load(cls, path: str | Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> OpGraph:
        """Read a json.gz graph file of at most ``max_bytes`` decompressed. Every problem is a
        GraphError naming the file (and the op, where one is at fault)."""
        path = regular_file(path, GraphError, "graph file")
        try:
            raw = _read_gzip(path, max_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise GraphError(f"{path}: not a json.gz OpGraph file ({exc})") from None
        if raw is None:
            raise GraphError(f"{path}: more than {max_bytes} bytes decompressed (graph.max_bytes raises "
                             f"the limit)")
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, huge ints
            raise GraphError(f"{path}: not a json.gz OpGraph file ({_first_line(exc)})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise GraphError(f"{path}: not an OpGraph file (format is not {FORMAT!r})")
        if doc.get("version") != FORMAT_VERSION:
            raise GraphError(f"{path}: unsupported OpGraph format version {_show(doc.get('version'))} "
                             f"(this rlplace reads version {FORMAT_VERSION})")
        for key in ("ops", "edges"):
            if key not in doc:
                raise GraphError(f"{path}: missing key {key!r}")
            if not isinstance(doc[key], list):
                raise GraphError(f"{path}: {key} must be a list, got {_show(doc[key])}")
        if not doc["ops"]:
            raise GraphError(f"{path}: the graph has no ops (nothing to place)")
        name = doc.get("name", path.stem)
        if not isinstance(name, str):
            raise GraphError(f"{path}: name must be a string, got {_show(name)}")
        try:
            return cls.from_records(doc["ops"], doc["edges"], name=name)
        except GraphError as exc:
            raise GraphError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------------- helpers
def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _read_gzip(path: Path, max_bytes: int) -> bytes | None:
    """The decompressed content of ``path``, or None past ``max_bytes`` (read in chunks, so a
    bomb costs no more memory than the limit)."""
    chunks, size = [], 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
            if size > max_bytes:
                return None
            chunks.append(chunk)
    return b"".join(chunks)


def _show(value: Any) -> str:
    """``repr(value)`` cut to one short line (error messages quote untrusted input)."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python prints
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= 80 else text[:77] + "..."


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0] or type(exc).__name__


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def _nonneg_int(value: Any, what: str) -> int:
    """An integer in [0, MAX_TOTAL_BYTES] (a float with an integer value counts)."""
    ok = _is_number(value) and (not isinstance(value, (float, np.floating))
                                or (math.isfinite(value) and value == int(value)))
    if not ok or not 0 <= int(value) <= MAX_TOTAL_BYTES:
        raise GraphError(f"{what} must be an integer in [0, 2**62], got {_show(value)}")
    return int(value)


def _check_op(op: Any, k: int) -> dict[str, Any]:
    if not isinstance(op, Mapping):
        raise GraphError(f"op #{k}: expected a record with a name and costs, got {_show(op)}")
    name = op.get("name")
    if not isinstance(name, str) or not name:
        raise GraphError(f"op {_show(name)} (#{k} of the ops): op names must be non-empty strings")
    where = f"op {_show(name)}"
    unknown = set(op) - {"name", *REQUIRED_ATTRS, *OPTIONAL_ATTRS}
    if unknown:
        raise GraphError(f"{where}: unknown attribute {_show(sorted(map(str, unknown))[0])}")
    for key in REQUIRED_ATTRS:
        if key not in op:
            raise GraphError(f"{where}: missing required attribute {key!r}")
    ct = op["compute_time"]
    try:
        ok = _is_number(ct) and 0 <= float(ct) <= MAX_TOTAL_COMPUTE
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:  # NaN fails the comparison too
        raise GraphError(f"{where}: compute_time must be a number of seconds in [0, {MAX_TOTAL_COMPUTE:g}], "
                         f"got {_show(ct)}")
    out = op["output_bytes"]
    if not isinstance(out, (list, tuple, np.ndarray)):
        raise GraphError(f"{where}: output_bytes must be a list (one entry per output), got {_show(out)}")
    clean: dict[str, Any] = {
        "name": name,
        "compute_time": float(ct),
        "persistent_bytes": _nonneg_int(op["persistent_bytes"], f"{where}: persistent_bytes"),
        "temporary_bytes": _nonneg_int(op["temporary_bytes"], f"{where}: temporary_bytes"),
        "output_bytes": [_nonneg_int(b, f"{where}: output_bytes[{k}]") for k, b in enumerate(out)],
    }
    shapes = op.get("output_shapes")
    if shapes is not None:
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(out):
            raise GraphError(f"{where}: output_shapes must list one shape per output ({len(out)}), "
                             f"got {_show(shapes)}")
        for s in shapes:
            if s is not None and not isinstance(s, (list, tuple)):
                raise GraphError(f"{where}: output_shapes: a shape must be a list of dimensions or "
                                 f"null, got {_show(s)}")
        clean["output_shapes"] = [None if s is None else
                                  [_nonneg_int(d, f"{where}: output_shapes dimension") for d in s]
                                  for s in shapes]
    for key in ("op_type", "colocation_group", "forward_op"):
        value = op.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise GraphError(f"{where}: {key} must be a string, got {_show(value)}")
            clean[key] = value
    layer = op.get("layer")
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, (int, str, np.integer)):
            raise GraphError(f"{where}: layer must be an integer or a string, got {_show(layer)}")
        clean["layer"] = int(layer) if isinstance(layer, np.integer) else layer
    return clean


def _check_totals(ops: list[dict[str, Any]]) -> int:
    """The sums of the module docstring's limits, over the ops (the op that crosses one is named);
    returns the ops' bytes added up."""
    seconds, nbytes = 0.0, 0
    for op in ops:
        seconds += op["compute_time"]
        nbytes += op["persistent_bytes"] + op["temporary_bytes"] + sum(op["output_bytes"])
        if seconds > MAX_TOTAL_COMPUTE:
            raise GraphError(f"op {_show(op['name'])}: the compute times up to this op add up to more "
                             f"than {MAX_TOTAL_COMPUTE:g} s")
        if nbytes > MAX_TOTAL_BYTES:
            raise GraphError(f"op {_show(op['name'])}: the bytes up to this op add up to more than 2**62")
    return nbytes


def _check_edge_bytes(rows: list[tuple[int, int, int, int]], ops: list[dict[str, Any]], nbytes: int) -> None:
    """The bytes limit over the edges too, ``nbytes`` being the ops' bytes added up."""
    for s, d, b, _ in rows:
        nbytes += b
        if nbytes > MAX_TOTAL_BYTES:
            raise GraphError(f"edge {_show(ops[s]['name'])} -> {_show(ops[d]['name'])}: the graph's bytes "
                             f"up to this edge add up to more than 2**62")


def _check_edge(edge: Any, index: Mapping[str, int], ops: list[dict]) -> tuple[int, int, int, int]:
    if not isinstance(edge, (list, tuple)) or len(edge) not in (3, 4):
        raise GraphError(f"edge {_show(edge)}: expected (src, dst, bytes[, src_output])")
    src, dst, nbytes = edge[0], edge[1], edge[2]
    port = edge[3] if len(edge) == 4 else 0
    where = f"edge {_show(src)} -> {_show(dst)}"
    for end in (src, dst):
        if not isinstance(end, str) or end not in index:
            raise GraphError(f"{where}: unknown op {_show(end)}")
    if src == dst:
        raise GraphError(f"op {_show(src)}: self-loop")
    nbytes = _nonneg_int(nbytes, f"{where}: bytes")
    if isinstance(port, bool) or not isinstance(port, (int, np.integer)):
        raise GraphError(f"{where}: src_output must be an integer, got {_show(port)}")
    n_out = len(ops[index[src]]["output_bytes"])
    if not (port == CONTROL or 0 <= port < n_out):
        raise GraphError(f"{where}: src_output {_show(port)} out of range (op {_show(src)} has {n_out} "
                         f"outputs; use {CONTROL} for a control edge)")
    return index[src], index[dst], nbytes, int(port)


def _topological_order(n: int, e: np.ndarray, names: list[str]) -> np.ndarray:
    """The input order if it is topological already, else the topological order that keeps
    the input order wherever the edges allow (networkx lexicographical sort)."""
    if len(e) == 0 or np.all(e[:, 0] < e[:, 1]):
        return np.arange(n)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(e[:, :2].tolist())
    try:
        return np.fromiter(nx.lexicographical_topological_sort(g), dtype=np.int64, count=n)
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
        path = " -> ".join(repr(names[u]) for u, _ in cycle) + f" -> {names[cycle[0][0]]!r}"
        raise GraphError(f"graph has a cycle through op {names[cycle[0][0]]!r}: {path}") from None


@numba.njit(cache=True)
def _longest_path(in_ptr, in_edges, edge_src, weight):  # pragma: no cover - compiled
    """finish[i] = weight[i] + max(finish of i's predecessors), ops in topological order."""
    n = len(weight)
    finish = np.zeros(n)
    for i in range(n):
        start = 0.0
        for k in range(in_ptr[i], in_ptr[i + 1]):
            f = finish[edge_src[in_edges[k]]]
            if f > start:
                start = f
        finish[i] = start + weight[i]
    return finish


@numba.njit(cache=True)
def _longest_path_to_exit(out_ptr, edge_dst, weight):  # pragma: no cover - compiled
    """level[i] = weight[i] + max(level of i's successors), ops in topological order."""
    n = len(weight)
    level = np.zeros(n)
    for i in range(n - 1, -1, -1):
        tail = 0.0
        for e in range(out_ptr[i], out_ptr[i + 1]):
            if level[edge_dst[e]] > tail:
                tail = level[edge_dst[e]]
        level[i] = tail + weight[i]
    return level
