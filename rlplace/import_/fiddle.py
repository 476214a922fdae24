"""The profiled-graph JSON of msr-fiddle/dnn-partitioning (Tarnawski et al., "Efficient
Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020) as an OpGraph and a
Cluster.

The format (the repository's README, "Input format"): top level ``maxSizePerFPGA`` (bytes),
``maxFPGAs``, ``maxCPUs``, ``nodes`` and ``edges``. A node has ``id``, ``supportedOnFpga``,
``cpuLatency``, ``fpgaLatency``, ``isBackwardNode``, optional ``colorClass`` (nodes of one
colour class share a device) and ``size`` (its memory on an accelerator, bytes), and may carry
a ``name``. An edge has ``sourceId``, ``destId``, ``cost`` (time to move the source's output
between an accelerator and CPU memory) and, in the published files, ``size`` (bytes).

The mapping (the paper's "FPGA" is any accelerator):

* an op per node, named ``name`` (else ``node<id>``); ``compute_time`` = ``fpgaLatency`` ×
  ``time_unit`` (the reference device is the accelerator); ``persistent_bytes`` = ``size``;
* ``colocation_group`` = ``color<colorClass>`` for classes of two or more nodes;
* ``forward_op`` of a backward node: the forward node of its colour class (the published
  training graphs pair each layer with its gradient that way), when there is exactly one;
* an edge per edge with ``size`` bytes; without ``size``, the bytes the CommModel gives
  ``cost`` (so the transfer time stays the file's);
* the Cluster: ``maxFPGAs`` accelerators of ``maxSizePerFPGA`` bytes, then ``maxCPUs`` CPUs
  (with ``include_cpus``) whose speed is total accelerator latency / total CPU latency over the
  nodes with both; the CommModel's seconds per byte is total ``cost`` / total ``size`` over the
  edges with both (no latency term; one link shared by all devices, as in the paper's model).

Not carried over: per-node CPU/accelerator speed ratios (a Device has one speed) and
``supportedOnFpga = 0`` (an OpGraph cannot pin an op to a device kind): ``FiddleImport.cpu_only``
lists those nodes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplace.cluster import Cluster, CommModel, Device
from rlplace.errors import GraphError
from rlplace.datafile import brief, finite_number, read_bounded
from rlplace.graph import DEFAULT_MAX_FILE_BYTES, OpGraph

# The document's keys and what each must hold; a key marked optional may be absent or null.
TOP_KEYS = {"maxSizePerFPGA": "size", "maxFPGAs": "count", "maxCPUs": "count", "nodes": "list", "edges": "list"}
NODE_KEYS = {"id": "id", "supportedOnFpga": "flag", "cpuLatency": "size", "fpgaLatency": "size",
             "isBackwardNode": "flag", "size": "size"}
NODE_OPTIONAL = {"colorClass": "id", "name": "id"}
EDGE_KEYS = {"sourceId": "id", "destId": "id", "cost": "size"}
EDGE_OPTIONAL = {"size": "size"}
MAX_DEVICES = 4096
_KINDS = {  # kind: (test, what the message says it must be)
    "id": (lambda v: isinstance(v, (int, str)) and not isinstance(v, bool), "an integer or a string"),
    "flag": (lambda v: isinstance(v, (bool, int)) and v in (0, 1), "true/false or 0/1"),
    "size": (lambda v: finite_number(v) and v >= 0,
             "a finite number >= 0"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_DEVICES,
              f"an integer in [0, {MAX_DEVICES}]"),
    "list": (lambda v: isinstance(v, list), "a list"),
}


@dataclass
class FiddleImport:
    graph: OpGraph
    cluster: Cluster
    cpu_only: list[str]  # ops whose node is not supported on an accelerator
    seconds: float


def load_fiddle(path: str | Path, time_unit: float = 1e-3, include_cpus: bool = False,
                comm_mode: str = "parallel") -> FiddleImport:
    """Read a dnn-partitioning JSON file. ``time_unit``: seconds per unit of the latencies and
    costs (milliseconds in the published files). Problems are GraphErrors naming the file."""
    path = Path(path)
    raw = read_bounded(Path(path), DEFAULT_MAX_FILE_BYTES, GraphError, "dnn-partitioning JSON file")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, huge ints
        raise GraphError(f"{path}: not a JSON file ({exc})") from None
    try:
        return fiddle_graph(doc, path.stem, time_unit, include_cpus, comm_mode)
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}") from None


def fiddle_graph(doc: dict[str, Any], name: str = "fiddle", time_unit: float = 1e-3,
                 include_cpus: bool = False, comm_mode: str = "parallel") -> FiddleImport:
    """The OpGraph and Cluster of a parsed dnn-partitioning document."""
    start = time.perf_counter()
    _check_document(doc)
    nodes, edges = doc["nodes"], doc["edges"]

    names = {node["id"]: str(node.get("name", f"node{node['id']}")) for node in nodes}
    if len(names) != len(nodes):
        raise GraphError("duplicate node id")
    colour_size: dict[Any, int] = {}
    for node in nodes:
        if node.get("colorClass") is not None:
            colour_size[node["colorClass"]] = colour_size.get(node["colorClass"], 0) + 1
    forward_of: dict[Any, list[str]] = {}
    for node in nodes:
        if not node["isBackwardNode"] and node.get("colorClass") is not None:
            forward_of.setdefault(node["colorClass"], []).append(names[node["id"]])

    comm = _comm(edges, time_unit, comm_mode)
    records = []
    for node in nodes:
        rec: dict[str, Any] = {"name": names[node["id"]], "op_type": "backward" if node["isBackwardNode"] else "forward",
                               "compute_time": float(node["fpgaLatency"]) * time_unit,
                               "persistent_bytes": int(round(node["size"])), "temporary_bytes": 0,
                               "output_bytes": [0]}
        colour = node.get("colorClass")
        if colour is not None and colour_size[colour] > 1:
            rec["colocation_group"] = f"color{colour}"
        if node["isBackwardNode"] and len(forward_of.get(colour, [])) == 1:
            rec["forward_op"] = forward_of[colour][0]
        records.append(rec)
    index = {r["name"]: r for r in records}
    rows = []
    for edge in edges:
        src, dst = edge["sourceId"], edge["destId"]
        if src not in names or dst not in names:
            raise GraphError(f"edge {src!r} -> {dst!r}: unknown node id {src if src not in names else dst!r}")
        nbytes = edge.get("size")
        if nbytes is None:
            nbytes = float(edge["cost"]) * time_unit / comm.seconds_per_byte if comm.seconds_per_byte else 0
        nbytes = int(round(nbytes))
        out = index[names[src]]["output_bytes"]
        out[0] = max(out[0], nbytes)  # a node has one output: what its edges carry
        rows.append((names[src], names[dst], nbytes, 0))
    graph = OpGraph.from_records(records, _unique(rows), name=name)
    cluster = _cluster(doc, nodes, comm, include_cpus, name)
    cpu_only = [names[n["id"]] for n in nodes if not n["supportedOnFpga"]]
    return FiddleImport(graph, cluster, cpu_only, time.perf_counter() - start)


def _check_document(doc: Any) -> None:
    """Every key the import reads is there and holds what it must (GraphError naming it)."""
    if not isinstance(doc, dict):
        raise GraphError(f"not a dnn-partitioning document (a JSON object, got {type(doc).__name__})")
    _check_fields(doc, TOP_KEYS, {}, "")
    for what, items, keys, optional in (("node", doc["nodes"], NODE_KEYS, NODE_OPTIONAL),
                                        ("edge", doc["edges"], EDGE_KEYS, EDGE_OPTIONAL)):
        for k, item in enumerate(items):
            if not isinstance(item, dict):
                raise GraphError(f"{what} {k}: must be a JSON object, got {type(item).__name__}")
            _check_fields(item, keys, optional, f"{what} {k}: ")


def _check_fields(item: dict, keys: dict[str, str], optional: dict[str, str], where: str) -> None:
    for key, kind in [*keys.items(), *optional.items()]:
        if key not in item:
            if key in keys:
                raise GraphError(f"{where}missing key {key!r}")
            continue
        value = item[key]
        test, wanted = _KINDS[kind]
        if not (key in optional and value is None) and not test(value):
            raise GraphError(f"{where}{key} must be {wanted}, got {brief(value, 40)}")


def _unique(rows: list[tuple]) -> list[tuple]:
    """Parallel edges (the published files repeat some) become one, carrying the larger size."""
    best: dict[tuple, int] = {}
    for s, d, b, p in rows:
        best[(s, d, p)] = max(best.get((s, d, p), 0), b)
    return [(s, d, b, p) for (s, d, p), b in best.items()]


def _comm(edges: list[dict], time_unit: float, mode: str) -> CommModel:
    timed = [(float(e["cost"]), float(e["size"])) for e in edges if e.get("size") and e["cost"] > 0]
    total_bytes = sum(size for _, size in timed)
    per_byte = sum(cost for cost, _ in timed) * time_unit / total_bytes if total_bytes else 0.0
    return CommModel(0.0, per_byte, mode)


def _cluster(doc: dict[str, Any], nodes: list[dict], comm: CommModel, include_cpus: bool, name: str) -> Cluster:
    memory = int(doc["maxSizePerFPGA"])
    devices = [Device(f"/device:GPU:{i}", memory) for i in range(int(doc["maxFPGAs"]))]
    if include_cpus and int(doc["maxCPUs"]) > 0:
        both = [n for n in nodes if n["cpuLatency"] > 0 and n["fpgaLatency"] > 0]
        speed = (sum(n["fpgaLatency"] for n in both) / sum(n["cpuLatency"] for n in both)) if both else 1.0
        total = sum(int(round(n["size"])) for n in nodes)
        devices += [Device(f"/device:CPU:{i}", max(total, 1), speed) for i in range(int(doc["maxCPUs"]))]
    if not devices:
        raise GraphError("maxFPGAs is 0 and CPUs are not included: no device")
    return Cluster(tuple(devices), comm, name)
