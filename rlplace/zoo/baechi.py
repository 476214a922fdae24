"""Import the real GPU profile of GNMT published by the Baechi authors (``cost.pkl``).

The file (see ``shared/data/baechi_gnmt/README.md``) is a pickle of ``{'graphdef': GraphDef,
'cost_dict': {op_name: Cost}}``. It is read with a restricted unpickler that knows exactly those
two classes and refuses every other, so the file cannot run code. The conversion follows the
Baechi authors' own graph generator (``placer/placer_lib.py`` of their repository):

* profiled ops: compute time from ``compute_cost`` (µs), at least 1 µs; negative sizes become 0;
* ops without a profile (constants, initializers, no-ops): 1 µs, a constant's output sized from
  its value, other outputs 0 bytes;
* edges carry the producer's output size; an input read twice by one op is one edge;
* colocation groups come from the ``_class`` attribute (``loc:@<op>``): an op and every op
  colocated with it form one group (transitively), named after the first op (by name) that
  ``loc:@`` references in it;
* an op's persistent bytes hold its outputs' storage (a variable's output is its buffer), so the
  output bytes of an op with persistent memory are reduced by that amount (counted once).
"""

from __future__ import annotations

import io
import os
import pickle
from collections import namedtuple
from pathlib import Path

from rlplace.coarsen import linked_names
from rlplace.datafile import read_bounded
from rlplace.errors import GraphError
from rlplace.graph import CONTROL, DEFAULT_MAX_FILE_BYTES, OpGraph

Cost = namedtuple("Cost", "compute_cost output_memory temporary_memory persistent_memory")
UNPROFILED_COMPUTE_TIME = 1e-6  # seconds; Baechi's value for ops without a profile
ENV_VAR = "RLPLACE_BAECHI_GNMT"


class _SerializedProto:
    """Stand-in for a pickled protobuf message: keeps its serialized bytes."""

    def __setstate__(self, state):
        self.serialized = state["serialized"]


class _RestrictedUnpickler(pickle.Unpickler):
    _allowed = {("tensorflow.core.framework.graph_pb2", "GraphDef"): _SerializedProto,
                ("placer.cost", "Cost"): Cost}

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load class {module}.{name}") from None


def _brief(value: object) -> str:
    """The first line of ``value`` (or of its repr), at most 120 characters: for error messages."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an int too long to print
        text = f"<{type(value).__name__}>"
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= 120 else line[:117] + "..."


def default_profile_path() -> Path:
    """``$RLPLACE_BAECHI_GNMT`` if set (the file, or the profile's folder holding it), else
    ``shared/data/baechi_gnmt/cost.pkl`` beside the repository (found from this source file), else
    relative to the working directory."""
    if os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
        return path / "cost.pkl" if path.is_dir() else path
    rel = Path("shared", "data", "baechi_gnmt", "cost.pkl")
    for base in (Path(__file__).resolve().parents[3], Path.cwd().parent, Path.cwd()):
        if (base / rel).is_file():
            return base / rel
    return Path.cwd().parent / rel


def read_baechi_pickle(path: str | Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> tuple[list, dict[str, Cost]]:
    """The GraphDef's NodeDefs and the cost dictionary of a Baechi ``cost.pkl`` of at most
    ``max_bytes`` (``path``: the file, or the profile's folder holding it)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import graph_pb2  # TensorFlow's GraphDef without loading TensorFlow

    path = Path(path)
    if path.is_dir():
        path = path / "cost.pkl"
    raw = read_bounded(path, max_bytes, GraphError, "Baechi profile")
    try:
        data = _RestrictedUnpickler(io.BytesIO(raw)).load()
        graphdef = graph_pb2.GraphDef()
        graphdef.ParseFromString(data["graphdef"].serialized)
        costs = dict(data["cost_dict"])
    except (OSError, pickle.UnpicklingError, DecodeError, EOFError, KeyError, AttributeError, TypeError,
            ValueError, IndexError, MemoryError, RecursionError) as exc:
        raise GraphError(f"{path}: not a Baechi cost.pkl profile ({type(exc).__name__}: "
                         f"{_brief(str(exc))})") from None
    return list(graphdef.node), costs


def _profiled(cost: Cost) -> tuple[list[int], dict]:
    """Outputs and costs of a profiled op (Baechi's conversion: at least 1 µs, sizes >= 0)."""
    out = [max(0, int(b)) for b in cost.output_memory]
    return out, {"compute_time": max(int(cost.compute_cost), 1) * 1e-6,
                 "temporary_bytes": max(0, int(cost.temporary_memory)),
                 "persistent_bytes": max(0, int(cost.persistent_memory))}


def load_baechi_profile(path: str | Path | None = None, name: str = "baechi_gnmt",
                        max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> OpGraph:
    """The OpGraph of a Baechi ``cost.pkl`` (default: ``default_profile_path()``) of at most
    ``max_bytes``. Every problem is a GraphError naming the file (and the op, where one is)."""
    path = Path(path) if path is not None else default_profile_path()
    nodes, costs = read_baechi_pickle(path, max_bytes)
    try:
        return _profile_graph(path, nodes, costs, name)
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise GraphError(f"{path}: not a Baechi cost.pkl profile ({type(exc).__name__}: "
                         f"{_brief(str(exc))})") from None


def _profile_graph(path: Path, nodes: list, costs: dict, name: str) -> OpGraph:
    from tensorboard.compat.tensorflow_stub import dtypes

    names = {n.name for n in nodes}

    edges: dict[tuple[str, int, str], None] = {}  # ordered set of (src, port, dst)
    max_port: dict[str, int] = {}
    for node in nodes:
        for inp in node.input:
            if inp.startswith("^"):
                src, port = inp[1:], CONTROL
            else:
                src, _, p = inp.partition(":")
                if p and not p.isdigit():
                    raise GraphError(f"{path}: op {node.name!r} reads {inp!r}, not <op>[:<output>]")
                port = int(p) if p else 0
            if src not in names:
                raise GraphError(f"{path}: op {node.name!r} reads unknown op {src!r}")
            edges[(src, port, node.name)] = None
            max_port[src] = max(max_port.get(src, -1), port)

    pairs = [(node.name, loc.decode().removeprefix("loc:@"))   # colocation references
             for node in nodes if "_class" in node.attr for loc in node.attr["_class"].list.s]
    component = linked_names(pairs)
    group_name: dict[int, str] = {}   # a group is named after its smallest target
    for _, target in pairs:
        group_name[component[target]] = min(group_name.get(component[target], target), target)

    ops = []
    for node in nodes:
        cost = costs.get(node.name)
        if cost is not None:
            try:
                out, rec = _profiled(cost)
            except (TypeError, ValueError, OverflowError, AttributeError):
                raise GraphError(f"{path}: op {node.name!r}: bad profile {_brief(cost)} (sizes in bytes and "
                                 f"compute_cost in µs must be numbers)") from None
        else:
            out = [0] * (max_port.get(node.name, -1) + 1)
            if node.op == "Const" and out:
                value = node.attr["value"].tensor
                count = 1
                for dim in value.tensor_shape.dim:
                    count *= max(dim.size, 0)
                try:
                    out[0] = count * dtypes.as_dtype(value.dtype).size
                except TypeError:
                    raise GraphError(f"{path}: op {node.name!r}: constant of a dtype without a size "
                                     f"({value.dtype})") from None
            rec = {"compute_time": UNPROFILED_COMPUTE_TIME, "temporary_bytes": 0, "persistent_bytes": 0}
        rec.update(name=node.name, op_type=node.op, edge_bytes=list(out))
        held = rec["persistent_bytes"]  # outputs stored in the persistent buffer count once
        for k, b in enumerate(out):
            out[k] = b - min(b, held)
            held -= min(b, held)
        rec["output_bytes"] = out
        if node.name in component:
            rec["colocation_group"] = group_name[component[node.name]]
        ops.append(rec)

    size = {op["name"]: op.pop("edge_bytes") for op in ops}
    edge_list = [(src, dst, size[src][port] if 0 <= port < len(size[src]) else 0, port)
                 for src, port, dst in edges]  # a port out of range is reported by from_records
    try:
        return OpGraph.from_records(ops, edge_list, name=name)
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}") from None
