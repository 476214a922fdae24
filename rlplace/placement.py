"""Placement: one device index per op (by op index), and its checks and conversions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rlplace.cluster import Cluster
from rlplace.errors import PlacementError, first_line
from rlplace.graph import OpGraph


class Placement:
    """An integer array ``device_of[op_index]``. Immutable and hashable, so placements can be
    cached and compared."""

    __slots__ = ("device_of", "_hash")

    def __init__(self, device_of):
        try:
            a = np.asarray(device_of)
        except (TypeError, ValueError, OverflowError) as exc:
            raise PlacementError(f"a placement is a 1-D array of device indices ({first_line(exc)})") from None
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise PlacementError(f"a placement is a 1-D array of device indices, got shape {a.shape} "
                                 f"and dtype {a.dtype}")
        a = a.astype(np.int64, copy=True)
        a.flags.writeable = False
        self.device_of = a
        self._hash = None

    def __len__(self) -> int:
        return len(self.device_of)

    def __getitem__(self, i):
        return self.device_of[i]

    def __array__(self, dtype=None, copy=None):
        return self.device_of if dtype is None else self.device_of.astype(dtype)

    def __eq__(self, other) -> bool:
        return isinstance(other, Placement) and np.array_equal(self.device_of, other.device_of)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.device_of.tobytes())
        return self._hash

    def __repr__(self) -> str:
        return f"Placement({np.array2string(self.device_of, threshold=12)})"

    def ops_per_device(self, num_devices: int) -> np.ndarray:
        return np.bincount(self.device_of, minlength=num_devices)

    def validate(self, graph: OpGraph, cluster: Cluster) -> Placement:
        """Raise PlacementError if the placement has the wrong length, names a device the
        cluster lacks, or splits a colocation group; return self otherwise."""
        if len(self) != graph.num_ops:
            raise PlacementError(f"placement has {len(self)} entries but graph {graph.name!r} "
                                 f"has {graph.num_ops} ops")
        bad = np.flatnonzero((self.device_of < 0) | (self.device_of >= cluster.num_devices))
        if len(bad):
            i = int(bad[0])
            raise PlacementError(f"op {graph.names[i]!r}: device index {int(self.device_of[i])} out of "
                                 f"range (cluster has {cluster.num_devices} devices)")
        for group, ops in graph.colocation_groups.items():
            devs = self.device_of[ops]
            if np.any(devs != devs[0]):
                j = int(ops[np.flatnonzero(devs != devs[0])[0]])
                raise PlacementError(
                    f"colocation group {group!r} is split: op {graph.names[int(ops[0])]!r} on "
                    f"{cluster.devices[devs[0]].name}, op {graph.names[j]!r} on "
                    f"{cluster.devices[self.device_of[j]].name}")
        return self

    # ------------------------------------------------------------------- conversions and files
    def to_dict(self, graph: OpGraph, cluster: Cluster) -> dict[str, str]:
        """``{op_name: device_name}``, the form TensorFlow and placement files use."""
        names = cluster.device_names
        return {op: names[d] for op, d in zip(graph.names, self.device_of.tolist())}

    @classmethod
    def from_dict(cls, mapping: Mapping[str, str], graph: OpGraph, cluster: Cluster) -> Placement:
        """Inverse of ``to_dict``; every op must be named exactly once."""
        dev_index = {name: i for i, name in enumerate(cluster.device_names)}
        device_of = np.full(graph.num_ops, -1, dtype=np.int64)
        for op, dev in mapping.items():
            if op not in graph.index:
                raise PlacementError(f"placement names unknown op {op!r}")
            if dev not in dev_index:
                raise PlacementError(f"op {op!r}: unknown device {dev!r} (cluster has {cluster.device_names})")
            device_of[graph.index[op]] = dev_index[dev]
        missing = np.flatnonzero(device_of < 0)
        if len(missing):
            raise PlacementError(f"placement misses op {graph.names[int(missing[0])]!r} "
                                 f"({len(missing)} ops unplaced)")
        return cls(device_of)

    def save(self, path: str | Path, graph: OpGraph, cluster: Cluster) -> None:
        Path(path).write_text(json.dumps(self.to_dict(graph, cluster), indent=1))

    @classmethod
    def load(cls, path: str | Path, graph: OpGraph, cluster: Cluster) -> Placement:
        try:
            mapping = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise PlacementError(f"{path}: no such placement file") from None
        except json.JSONDecodeError as exc:
            raise PlacementError(f"{path}: not a JSON placement file ({exc})") from None
        try:
            return cls.from_dict(mapping, graph, cluster)
        except PlacementError as exc:
            raise PlacementError(f"{path}: {exc}") from None


class Placed(Placement):
    """A placement with what its placer knows of it: the placer contract (``rlplace.placers``).
    A field is None where the placer does not know it.

    * ``nodes_placed``: the nodes the placer decided on after its graph optimizer (ops or
      groups; Baechi Table 5's "ops placed");
    * ``schedule``: the placer's own schedule (``rlplace.schedule.trace.Schedule``) of the graph
      it placed (after its optimizer: the fused or forward-only graph where it placed that);
    * ``planned_peak``: peak bytes per device as the placer saw them while deciding;
    * ``peak_memory``: peak bytes per device of its own schedule;
    * ``fits``: whether the simulator ran the placement without OOM (where the placer checked);
    * ``curve``: the best step time after each evaluation (search placers, trained policies);
    * ``search``: a search's record, whose ``as_dict()`` results.json keeps
      (``rlplace.placers.search.SearchResult``, ``rlplace.apps.beside.BesideResult``)."""

    __slots__ = ("nodes_placed", "schedule", "planned_peak", "peak_memory", "fits", "curve", "search")

    def __init__(self, device_of, *, nodes_placed: int | None = None, schedule: Any = None,
                 planned_peak: np.ndarray | None = None, peak_memory: np.ndarray | None = None,
                 fits: bool | None = None, curve: list[float] | None = None, search: Any = None):
        super().__init__(device_of)
        self.nodes_placed, self.schedule, self.planned_peak, self.peak_memory = (
            nodes_placed, schedule, planned_peak, peak_memory)
        self.fits, self.curve, self.search = fits, curve, search

    @classmethod
    def of(cls, placement: Placement) -> Placed:
        """``placement`` as a Placed (one from a placer that knows nothing more: every field None)."""
        return placement if isinstance(placement, Placed) else cls(placement.device_of)


def ops_placed(placed: Placed, graph: OpGraph) -> int:
    """The nodes ``placed``'s placer decided on: every op of ``graph`` unless it says fewer."""
    return graph.num_ops if placed.nodes_placed is None else placed.nodes_placed
