"""What a calibration leaves behind for the other commands (issue 19, item 1): the calibrated
cluster preset, a YAML file in the format of ``rlplace/conf/cluster/`` (``cluster=file
cluster.path=<file>``, or copied into ``rlplace/conf/cluster/`` as ``cluster=<name>``), and the
cost-corrected graph, an OpGraph file (``graph=file graph.path=<file>``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml

from rlplace.cluster import Cluster
from rlplace.graph import OpGraph


def preset_text(cluster: Cluster, comments: Sequence[str] = ()) -> str:
    """``cluster`` as a cluster preset (``_target_: rlplace.cluster.Cluster``), with comment lines."""
    body = {"_target_": "rlplace.cluster.Cluster", "_convert_": "all", "name": cluster.name,
            "devices": [{"_target_": "rlplace.cluster.Device", "name": d.name, "memory_bytes": d.memory_bytes,
                         "speed": float(d.speed)} for d in cluster.devices],
            "comm": {"_target_": "rlplace.cluster.CommModel", "latency": float(cluster.comm.latency),
                     "seconds_per_byte": float(cluster.comm.seconds_per_byte), "mode": cluster.comm.mode}}
    header = "".join(f"# {line}\n" for line in comments)
    return header + yaml.safe_dump(body, sort_keys=False)


def write_preset(path: Path, cluster: Cluster, comments: Sequence[str] = ()) -> Path:
    path.write_text(preset_text(cluster, comments))
    return path


def write_graph(path: Path, graph: OpGraph) -> Path:
    graph.save(path)
    return path
