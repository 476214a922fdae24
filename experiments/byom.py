"""Bring your own model: import MobileNetV2 (Keras, 32x32, batch 2), a small Transformer
(PyTorch) and a dnn-partitioning sample; per graph: ops, edges, total compute, CCR and the
simulated step time of single / expert / m_etf / celeritas / metis on baechi_2080, and the import
time. Analytical costs on the GTX 2080 roofline (the cluster's device); for the PyTorch model,
the Spearman rank correlation of its per-op analytical times with the times profiled on this
machine's CPU (``profile_step``). Writes experiments/results/byom.md.

    .venv/bin/python experiments/byom.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from scipy.stats import spearmanr

from rlplace.cluster import load_preset
from rlplace.import_.fiddle import load_fiddle
from rlplace.placers import make_placer
from rlplace.sim import simulate

PLACERS = ("single", "expert", "m_etf", "celeritas", "metis")
OUT = Path(__file__).parent / "results" / "byom.md"


def keras_mobilenet():
    from rlplace.import_.keras import from_keras

    imported = from_keras("keras.applications:MobileNetV2", batch_size=2, device="gtx2080",
                          args={"weights": None, "input_shape": (32, 32, 3), "classes": 10})
    return imported.graph, imported.seconds


def torch_transformer():
    import torch
    from torch import nn

    from rlplace.import_.torch import from_torch, profile_step

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=4), nn.Linear(256, 1000))
    imported = from_torch(model, torch.randn(8, 64, 256), torch.randint(0, 1000, (8, 64)), device="gtx2080")
    profiled = profile_step(imported.step)
    graph = imported.graph
    ops = [i for i, name in enumerate(graph.names) if profiled.get(name, 0.0) > 0]
    rho = spearmanr(graph.compute_time[ops], [profiled[graph.names[i]] for i in ops]).statistic
    return graph, imported.seconds, None, (float(rho), len(ops))


def fiddle_sample():
    """A 4-layer MLP training graph in the dnn-partitioning format (forward, loss, backward;
    each layer's backward node in its colour class), latencies in ms."""
    layers = 4
    nodes, edges = [], []
    for k in range(layers):
        nodes.append({"id": k + 1, "name": f"fc{k}", "supportedOnFpga": 1, "cpuLatency": 20.0, "fpgaLatency": 2.0,
                      "isBackwardNode": 0, "colorClass": k + 1, "size": 64e6})
        nodes.append({"id": 100 + k, "name": f"fc{k}grad", "supportedOnFpga": 1, "cpuLatency": 40.0,
                      "fpgaLatency": 4.0, "isBackwardNode": 1, "colorClass": k + 1, "size": 64e6})
    nodes.append({"id": 50, "name": "loss", "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 0.1,
                  "isBackwardNode": 0, "size": 0.0})
    chain = [k + 1 for k in range(layers)] + [50] + [100 + k for k in reversed(range(layers))]
    for a, b in zip(chain, chain[1:]):
        edges.append({"sourceId": a, "destId": b, "cost": 0.5, "size": 16e6})
    for k in range(layers - 1):  # activations saved for the backward pass
        edges.append({"sourceId": k + 1, "destId": 100 + k + 1, "cost": 0.5, "size": 16e6})
    doc = {"maxSizePerFPGA": 8e9, "maxFPGAs": 4, "maxCPUs": 1, "nodes": nodes, "edges": edges}
    path = Path(tempfile.mkdtemp()) / "mlp4_training.json"
    path.write_text(json.dumps(doc))
    imported = load_fiddle(path, comm_mode="sequential")
    return imported.graph, imported.seconds, imported.cluster, None


def main() -> None:
    cluster = load_preset("baechi_2080")
    rows, ranks = [], []
    for label, make in (("MobileNetV2 (Keras, 32x32, batch 2)", keras_mobilenet),
                        ("Transformer 4x256 (PyTorch, 8x64 tokens)", torch_transformer),
                        ("dnn-partitioning sample (MLP-4 training)", fiddle_sample)):
        made = make()
        graph, seconds = made[0], made[1]
        on = made[2] if len(made) > 2 and made[2] is not None else cluster
        if len(made) > 3 and made[3] is not None:
            ranks.append(f"{label.split(' (')[0]}: Spearman {made[3][0]:.2f} over the {made[3][1]} ops that ran a kernel")
        times = {}
        for name in PLACERS:
            start = time.perf_counter()
            placement = make_placer(name).place(graph, on)
            times[name] = (simulate(graph, on, placement).step_time, time.perf_counter() - start)
        rows.append((label, on.name, graph.num_ops, graph.num_edges, graph.total_compute, graph.ccr(on.comm),
                     seconds, times))
        print(rows[-1], flush=True)
    lines = ["# Bring your own model (experiments/byom.py)", "",
             "Analytical costs (GTX 2080 roofline) for the Keras and PyTorch imports; the dnn-partitioning",
             "sample carries its own latencies and its own 4-accelerator cluster. Step times are simulated (ms).",
             "Import: wall time of building/tracing, extraction and costing on this machine (2 shared cores).", "",
             "| graph | cluster | ops | edges | total compute (ms) | CCR | import (s) | "
             + " | ".join(PLACERS) + " |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(PLACERS)]
    for label, cname, ops, edges, total, ccr, seconds, times in rows:
        lines.append(f"| {label} | {cname} | {ops:,} | {edges:,} | {total * 1e3:.2f} | {ccr:.3f} | {seconds:.1f} | "
                     + " | ".join(f"{times[p][0] * 1e3:.2f}" for p in PLACERS) + " |")
    lines += ["", "Placement time (s): " + "; ".join(
        f"{label.split(' (')[0]}: " + ", ".join(f"{p} {times[p][1]:.2f}" for p in PLACERS)
        for label, *_, times in rows), "",
        "Per-op analytical (GTX 2080 roofline) against profiled times on this CPU: " + "; ".join(ranks), ""]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
