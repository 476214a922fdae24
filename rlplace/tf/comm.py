"""Interconnect benchmark: time tensor transfers between two devices over sizes from bytes to
tens of MB, fit the linear model ``latency + seconds_per_byte * bytes`` of Baechi, Celeritas and
Pesto by least squares, report R², and save the fit as a cluster config.

    python -m rlplace.tf.comm --devices 2 --output rlplace/conf/cluster/local_cpu_fitted.yaml

Timing (``time_transfers``): a float32 variable on the source device is read and passed through
a chain of ``hops`` Identity ops alternating between the source and the destination device, so
every hop is one TensorFlow transfer (``_Send``/``_Recv``); the same chain on the source device
alone is the baseline, and two chain lengths separate the per-transfer time from what a step pays
once for spanning two devices (see ``time_transfers``). On
logical CPU devices a transfer hands over the buffer without copying it (one process, one host
memory), so the fit is mostly latency; between GPUs the bytes are copied.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rlplace.cluster import CommModel
from rlplace.errors import ArgumentParser, ConfigError, run_script

PROG = "python -m rlplace.tf.comm"
DEFAULT_SIZES = tuple(int(4 * round(b / 4)) for b in np.geomspace(4, 32 * 2**20, 14))


@dataclass(frozen=True)
class CommFit:
    """Least-squares line through (bytes, seconds) with its coefficient of determination."""

    latency: float
    seconds_per_byte: float
    r2: float
    nbytes: tuple[int, ...]
    seconds: tuple[float, ...]

    def comm_model(self, mode: str = "parallel") -> CommModel:
        """The fitted line as a CommModel (negative coefficients, from noise, become 0)."""
        return CommModel(max(self.latency, 0.0), max(self.seconds_per_byte, 0.0), mode)


def fit_comm(nbytes: Sequence[float], seconds: Sequence[float]) -> CommFit:
    """Fit ``seconds ≈ latency + seconds_per_byte * nbytes`` (ordinary least squares)."""
    x, y = np.asarray(nbytes, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or len(np.unique(x)) < 2:
        raise ConfigError("comm fit: needs timings at two or more different sizes, one time each")
    (slope, latency), *_ = np.linalg.lstsq(np.column_stack([x, np.ones_like(x)]), y, rcond=None)
    residual = y - (latency + slope * x)
    total = np.sum((y - y.mean()) ** 2)
    r2 = 1.0 - float(np.sum(residual ** 2) / total) if total > 0 else 1.0
    return CommFit(float(latency), float(slope), r2, tuple(int(b) for b in x), tuple(float(s) for s in y))


@dataclass(frozen=True)
class TransferTimes:
    """``seconds[k]``: one transfer of ``sizes[k]`` bytes. ``step_overhead``: what a step pays
    once for spanning two devices (a second executor; median over the sizes) — not a
    per-transfer cost, so not part of the CommModel."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    step_overhead: float


def time_transfers(src: str, dst: str, sizes: Sequence[int] = DEFAULT_SIZES, hops: int = 32,
                   repeats: int = 30, warmup: int = 3, inter_op_threads: int = 2) -> TransferTimes:
    """Time transfers of each size (bytes, rounded down to float32 elements) from device ``src``
    to ``dst`` in the calling process's configured devices. Two chains, of 2 and ``2 + hops``
    Identity ops, each alternating between ``dst`` and ``src`` (``hops`` even, so both end on
    ``src``) and each against the same chain on ``src`` alone: the slope over the extra hops is
    the time per transfer, free of the fixed cost of a two-device step. ``inter_op_threads`` as
    in the measurements (TensorFlow hands a received tensor on through that thread pool)."""
    if hops < 2 or hops % 2:
        raise ConfigError(f"comm benchmark: hops must be even and >= 2, got {hops}")
    import tensorflow as tf

    from rlplace.tf.devices import device_session_config

    config = device_session_config(inter_op_threads, intra_op_threads=1)
    seconds, overheads = [], []
    for size in sizes:
        graph, chains, init = _chains(tf, src, dst, size, hops)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            sess.run(init)
            times = _time_runs(sess, chains, warmup, repeats)
        extra = {length: np.median(times[length, True]) - np.median(times[length, False])
                 for length in (2, 2 + hops)}
        per_transfer = (extra[2 + hops] - extra[2]) / hops
        seconds.append(float(per_transfer))
        overheads.append(extra[2] - 2 * per_transfer)
    return TransferTimes(tuple(int(b) for b in sizes), tuple(seconds), float(np.median(overheads)))


def _chains(tf, src: str, dst: str, size: int, hops: int):
    """``time_transfers``' graph for one size: a variable on ``src`` read into chains of 2 and
    ``2 + hops`` Identity ops, across (alternating ``dst``, ``src``) or on ``src`` alone; returns
    the graph, {(length, across): the op that reads the chain's end} and the initializer."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        with tf.device(src):
            var = v1.get_variable("x", [max(int(size) // 4, 1)], initializer=v1.zeros_initializer(), use_resource=True)
            start = var.read_value()
        chains = {}
        for length in (2, 2 + hops):
            for across, devices in ((True, (dst, src)), (False, (src, src))):
                y = start
                for k in range(length):
                    with tf.device(devices[k % 2]):
                        y = tf.identity(y)
                with tf.device(src):
                    chains[length, across] = y[0].op  # reads the data: the chain must run
        init = v1.global_variables_initializer()
    return graph, chains, init


def _time_runs(sess, ops: dict, warmup: int, repeats: int) -> dict:
    """Seconds of each of ``repeats`` runs of every op (after ``warmup`` runs), taken in turns."""
    times: dict = {key: [] for key in ops}
    for k in range(warmup + repeats):
        for key, op in ops.items():
            t0 = time.perf_counter()
            sess.run(op)
            if k >= warmup:
                times[key].append(time.perf_counter() - t0)
    return times


def cluster_yaml(fit: CommFit, num_devices: int, memory_bytes: int, prefix: str, name: str,
                 mode: str = "parallel", source: str = "") -> str:
    """A cluster config like ``rlplace/conf/cluster/local_cpu.yaml`` with the fitted CommModel."""
    comm = fit.comm_model(mode)
    lines = [f"# {name}: {num_devices} devices, CommModel fitted by rlplace.tf.comm {source}".rstrip(),
             f"# least squares over {len(fit.nbytes)} sizes ({fit.nbytes[0]} B .. {fit.nbytes[-1]} B): "
             f"latency {fit.latency:.3e} s, {fit.seconds_per_byte:.3e} s/B, R^2 {fit.r2:.3f}",
             "# measured seconds per transfer: " + ", ".join(f"{b}: {s:.3e}" for b, s in zip(fit.nbytes, fit.seconds)),
             "_target_: rlplace.cluster.Cluster.homogeneous",
             f"name: {name}", f"n: {num_devices}", f"memory_bytes: {int(memory_bytes)}",
             f'prefix: "{prefix}"', "comm:", "  _target_: rlplace.cluster.CommModel",
             f"  latency: {comm.latency:.6e}", f"  seconds_per_byte: {comm.seconds_per_byte:.6e}",
             f"  mode: {mode}"]
    return "\n".join(lines) + "\n"


def preset_name(name: str | None, output: Path | None) -> str:
    """The cluster preset's name: as given, else the file it is written to (Hydra selects a
    preset by its file name), else ``local_cpu_fitted``."""
    return name or (output.stem if output is not None else "local_cpu_fitted")


def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=2, help="devices to set up (transfers go 0 -> 1)")
    parser.add_argument("--memory-bytes", type=int, default=4 * 2**30, help="declared memory per device")
    parser.add_argument("--hops", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--name", help="the preset's name (default: --output's file name, else local_cpu_fitted)")
    parser.add_argument("--mode", default="parallel", choices=["parallel", "sequential"])
    parser.add_argument("--output", type=Path, help="cluster yaml to write (default: print it)")
    args = parser.parse_args(argv)
    if args.devices < 2:
        parser.error("--devices must be >= 2")
    import os

    if args.output is not None:  # checked before measuring, so that a bad path costs no measurement
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--output {args.output}: cannot make its folder ({exc.strerror})")
        if args.output.is_dir() or not os.access(args.output.parent, os.W_OK):
            parser.error(f"--output {args.output}: not a file this user can write")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rlplace.tf.devices import configure_devices

    devices = configure_devices(args.devices)
    times = time_transfers(devices[0], devices[1], hops=args.hops, repeats=args.repeats)
    fit = fit_comm(times.sizes, times.seconds)
    name = preset_name(args.name, args.output)
    text = cluster_yaml(fit, args.devices, args.memory_bytes, devices[0][:-1], name, args.mode,
                        f"({devices[0]} -> {devices[1]}; a two-device step also pays "
                        f"{times.step_overhead:.2e} s once)")
    print(text, end="")
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    run_script(main, PROG)
