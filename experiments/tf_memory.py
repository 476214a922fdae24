"""Peak memory: the simulator against TensorFlow's allocator (issue 19, item 3), for every zoo
model at CPU size (rlplace/conf/model) on 2 logical CPU devices.

    .venv/bin/python experiments/tf_memory.py [--models gnmt bert] [--steps 5] [--sessions 2]

Per model: profile it on one device (as ``graph=tf_model``: ``rlplace.tf.profile``, one op at a
time, one thread per op), then run real training steps (``rlplace.tf.measure``, 3 warm-up steps,
``--steps`` measured ones, one inter-op thread per device used; ``--sessions`` fresh sessions,
since TensorFlow's executor may order a step's ops differently in each) for three placements: ``single``
(every op on device 0), ``prefix_0.5`` (the first half of the colocation units in topological
order on device 0, the rest on device 1) and ``expert`` (the models' layer tags; where it differs
from both). Measured:

* TensorFlow's allocator statistics: ``TF_CPU_ALLOCATOR_USE_BFC=true`` gives the CPU allocator
  statistics (without it ``get_memory_info`` raises "Allocator stats not available", or, with
  oneDNN on, reports zeros);
  ``reset_memory_stats`` before each step and ``get_memory_info`` after it give the step's peak
  bytes in use, variables included. Logical CPU devices share the one CPU allocator: for a split
  placement this is the process's peak, not a device's;
* per device, the step's traced allocation records replayed in time order (``RunMetadata``,
  attributed to the device of the op that allocated) plus the persistent bytes placed there, as
  TFBackend reports ``peak_memory``.

Simulated: each device's peak under ``memory_model=default`` and ``tf_reuse``
(``rlplace.schedule.aliases``), the peak of the devices' sum (what a shared allocator sees), and
for ``single`` the memory rules applied to TensorFlow's own traced schedule (so that what the
rules miss and what the order of ops changes are told apart). Fed inputs (placeholders) are held
by the caller: the CPU session wraps the fed arrays without allocating, so they are not in the
allocator's peak; the tables give the allocator's peak with them added.

Writes experiments/results/tf_memory.{json,md}.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # CPU allocator statistics
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from rlplace.errors import ArgumentParser, run_script  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CONF = Path(__file__).resolve().parents[1] / "rlplace" / "conf"
MODELS = ("linear_regression", "inception_v3", "gnmt", "transformer", "bert", "tensor_holography")
MEMORY_MODELS = ("default", "tf_reuse")
MIB = 2**20
TARGET = 0.10


def model_knobs(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{name}.yaml"))


def placements(graph, cluster) -> dict:
    from rlplace.coarsen import CoarseGraph
    from rlplace.placers import make_placer

    units = CoarseGraph.colocation(graph)
    out = {"single": np.zeros(graph.num_ops, dtype=np.int64),
           "prefix_0.5": units.expand((np.arange(units.num_groups) >= units.num_groups / 2).astype(np.int64)).device_of}
    expert = make_placer("expert").place(graph, cluster).device_of
    if not any(np.array_equal(expert, p) for p in out.values()):
        out["expert"] = expert
    return out


def tf_schedule(graph, op_trace: dict):
    """TensorFlow's traced schedule of a one-device step as a Schedule (no transfers)."""
    from rlplace.schedule import Schedule

    spans = np.array([op_trace.get(name, [0, 0.0, 0.0]) for name in graph.names], dtype=np.float64)
    none = np.zeros(0, dtype=np.int64)
    return Schedule(np.zeros(graph.num_ops, dtype=np.int64), spans[:, 1], spans[:, 2], none, none, none,
                    none, np.zeros(0), np.zeros(0), none, none)


def simulated(graph, cluster, device: np.ndarray) -> dict:
    """Per memory model: each device's peak, the peak of the devices' sum, and that sum if a
    received tensor were the sender's buffer (no copy; held until its last reader anywhere)."""
    from dataclasses import replace

    from rlplace.schedule import memory_peaks
    from rlplace.sim import simulate

    out = {}
    for mm in MEMORY_MODELS:
        r = simulate(graph, replace(cluster, memory_model=mm), device, trace=True)
        s = r.schedule
        merged = replace(s, op_device=np.zeros_like(s.op_device), transfer_src_device=np.zeros_like(s.transfer_src_device),
                         transfer_dst_device=np.zeros_like(s.transfer_dst_device))
        none = np.zeros(0, dtype=np.int64)
        shared_host = replace(merged, **{k: none for k in ("transfer_src_op", "transfer_src_output", "transfer_src_device",
                                                            "transfer_dst_device", "transfer_bytes", "transfer_tensor")},
                              transfer_start=np.zeros(0), transfer_end=np.zeros(0))
        out[mm] = {"per_device": [int(b) for b in r.peak_memory], "total": int(memory_peaks(graph, 1, merged, mm)[0]),
                   "total_without_copies": int(memory_peaks(graph, 1, shared_host, mm)[0]), "step_time": r.step_time}
    return out


def run_model(name: str, devices: list[str], steps: int, sessions: int) -> dict:
    from rlplace.cluster import load_preset
    from rlplace.schedule import memory_peaks
    from rlplace.tf.measure import measure
    from rlplace.tf.profile import profile
    from rlplace.tf.sources import build_model

    knobs = model_knobs(name)
    model = build_model(knobs)
    start = time.perf_counter()
    graph = profile(model, warmup=2, steps=3, inter_op_threads=1, intra_op_threads=1).graph
    profile_time = time.perf_counter() - start
    cluster = load_preset("local_cpu")
    fed = np.array([t == "Placeholder" for t in graph.op_type]) * graph.output_total
    feeds = int(fed.sum())
    rows = []
    for label, device in placements(graph, cluster).items():
        used = len(np.unique(device))
        runs = [measure(model, dict(zip(graph.names, device.tolist())), devices, warmup=3, steps=steps,
                        inter_op_threads=used, intra_op_threads=1, trace_ops=True) for _ in range(sessions)]
        raw = runs[0]  # its traced step: per-device peaks and TensorFlow's schedule
        held = np.bincount(device, weights=graph.persistent_bytes + fed, minlength=len(devices)).astype(np.int64)
        row = {"placement": label, "devices_used": used, "ops_on_1": int(device.sum()),
               "allocator_peaks": [r["allocator_peaks"] for r in runs],
               "allocator_base": [r["allocator_base"] for r in runs],
               "allocator_peak": int(np.median([b for r in runs for b in r["allocator_peaks"]])),
               "traced_per_device": [int(b) for b in held + np.asarray(raw["transient_peak"])],
               "step_time": raw["step_time"], "simulated": simulated(graph, cluster, device)}
        if used == 1:
            sched = tf_schedule(graph, raw["op_trace"])
            row["rules_on_tf_schedule"] = {mm: int(memory_peaks(graph, 1, sched, mm)[0]) for mm in MEMORY_MODELS}
        measured = row["allocator_peak"] + feeds
        row["ratio"] = {mm: measured / row["simulated"][mm]["total"] for mm in MEMORY_MODELS}
        row["ratio_without_copies"] = {mm: measured / row["simulated"][mm]["total_without_copies"]
                                       for mm in MEMORY_MODELS}
        row["ratio_per_device"] = {mm: [t / s if s else None for t, s in
                                        zip(row["traced_per_device"], row["simulated"][mm]["per_device"])]
                                   for mm in MEMORY_MODELS}
        rows.append(row)
        print(f"{name:18s} {label:10s} TF {measured / MIB:7.2f} MiB  sim "
              + "  ".join(f"{mm} {row['simulated'][mm]['total'] / MIB:7.2f} ({row['ratio'][mm]:.3f})"
                          for mm in MEMORY_MODELS), flush=True)
    return {"model": name, "knobs": knobs, "ops": graph.num_ops, "profile_seconds": profile_time,
            "persistent_bytes": int(graph.persistent_bytes.sum()), "feed_bytes": feeds,
            "rows": rows}


def _mib(b: float) -> str:
    return f"{b / MIB:.2f}"


def _ok(r: float) -> str:
    return f"{r:.3f}" + (" ✓" if abs(r - 1) <= TARGET else "")


def report(results: list[dict], elapsed: float, load: tuple) -> str:
    lines = ["# Peak memory: simulator vs TensorFlow's allocator (issue 19, item 3)", "",
             f"`experiments/tf_memory.py`, {time.strftime('%Y-%m-%d')}, this 2-core machine (load average "
             f"{load[0]:.1f}), TensorFlow's BFC CPU allocator (`TF_CPU_ALLOCATOR_USE_BFC=true`), 2 logical CPU "
             f"devices, {elapsed / 60:.1f} min. Ratio = measured / simulated; ✓ within {TARGET:.0%}.", "",
             "## The step's peak (one allocator for both logical devices)", "",
             "TF: median over the measured steps of every session of the allocator's peak bytes in use "
             "(variables included; min–max over all steps and sessions) "
             "plus the fed inputs (held by the caller, outside the allocator). Simulated: the peak of the "
             "devices' sum; *received tensors not copied*: the same schedule with each tensor held by its "
             "sender until its last reader anywhere is done, as TensorFlow's CPU devices in one process "
             "pass a buffer, not a copy. *Rules on TF's schedule*: the memory model applied to the op start and end "
             "times TensorFlow traced in the first session (one device).", "",
             "| model | ops | placement | TF allocator, MiB (min–max) | + feeds | sim default | sim tf_reuse "
             "| ratio default | ratio tf_reuse | tf_reuse, received tensors not copied: sim / ratio "
             "| rules on TF's schedule: default / tf_reuse |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            on_tf = r.get("rules_on_tf_schedule")
            lines.append(
                f"| {res['model']} | {res['ops']} | {r['placement']} | {_mib(r['allocator_peak'])} "
                f"({_mib(min(map(min, r['allocator_peaks'])))}–{_mib(max(map(max, r['allocator_peaks'])))}) "
                f"| {_mib(r['allocator_peak'] + res['feed_bytes'])} "
                f"| {_mib(r['simulated']['default']['total'])} | {_mib(r['simulated']['tf_reuse']['total'])} "
                f"| {_ok(r['ratio']['default'])} | {_ok(r['ratio']['tf_reuse'])} "
                f"| {_mib(r['simulated']['tf_reuse']['total_without_copies'])} / {_ok(r['ratio_without_copies']['tf_reuse'])} | "
                + (f"{_mib(on_tf['default'])} / {_mib(on_tf['tf_reuse'])}" if on_tf else "") + " |")
    lines += ["", "## Per device (split placements)", "",
              "TF: each device's traced allocation records (attributed to the device of the op that "
              "allocated) replayed in time order, plus the persistent bytes and fed inputs placed there. Simulated: "
              "each device's peak.", "",
              "| model | placement | TF per device, MiB | sim default | sim tf_reuse | ratio tf_reuse |",
              "|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            if r["devices_used"] < 2:
                continue
            lines.append(
                f"| {res['model']} | {r['placement']} | {' / '.join(_mib(b) for b in r['traced_per_device'])} "
                f"| {' / '.join(_mib(b) for b in r['simulated']['default']['per_device'])} "
                f"| {' / '.join(_mib(b) for b in r['simulated']['tf_reuse']['per_device'])} "
                f"| {' / '.join(_ok(x) if x else '-' for x in r['ratio_per_device']['tf_reuse'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    from rlplace.tf.devices import configure_devices

    devices = configure_devices(2)
    start = time.perf_counter()
    results = [run_model(name, devices, args.steps, args.sessions) for name in args.models]
    elapsed = time.perf_counter() - start
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "tf_memory.json").write_text(json.dumps(
        {"models": results, "steps": args.steps, "sessions": args.sessions, "seconds": elapsed,
         "load_average": os.getloadavg()}, indent=1))
    (args.output / "tf_memory.md").write_text(report(results, elapsed, os.getloadavg()))


if __name__ == "__main__":
    run_script(main)
