"""TFBackend (``backend=tf``): evaluate a placement by running a model's training step on
real TensorFlow devices (Hierarchical Planner §4; Mars §3.4 for the step-time limit).

The backend itself imports no TensorFlow. It starts a worker process (``rlplace.tf.worker``,
``spawn`` context) that sets up one device per cluster device (``rlplace.tf.devices``) and
rebuilds the model from its config (a zoo model, ``"package.module:function"`` or a ``.keras``
file: ``rlplace.tf.sources``); it sends each placement as ``{op name: device index}`` and
reads back the measurement (``rlplace.tf.measure``). Results live in this process:

* a placement that splits a colocation group raises PlacementError before any TensorFlow runs;
* repeated placements are answered from an LRU cache (``cache_hits`` counts them);
* a worker that dies (a TensorFlow crash, a kill) is restarted and the request sent again once;
  the cache survives, so nothing measured is lost. A second death on the same request raises
  BackendError;
* a real ``ResourceExhaustedError`` is an OOM; so is a device whose peak memory (the step's
  traced allocations plus the persistent bytes of the ops placed there) exceeds the cluster's
  ``memory_bytes`` — the only limit logical CPU devices have;
* a step slower than ``step_time_limit`` stops the measurement: ``StepResult.timed_out``, with
  the step time seen so far (at least the limit).

The OpGraph must be the model's training step (same op names, e.g. from ``graph=tf_model`` or a
profile of that model); the transfer counts of the result come from it.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rlplace.backends import MeasuringBackend
from rlplace.cluster import Cluster
from rlplace.errors import BackendError, ConfigError
from rlplace.graph import OpGraph
from rlplace.placement import Placement
from rlplace.sim import StepResult
from rlplace.tf.comm import DEFAULT_SIZES, TransferTimes
from rlplace.tf.sources import check_spec
from rlplace.tf.worker import WorkerSetup, worker_main


@dataclass
class TFBackend(MeasuringBackend):
    """Options: ``model`` (``{name: <zoo model>, <knob>: value, ...}``, or a model source:
    ``{name: "package.module:function" or "<file>.keras", batch_size: ..., args: {...}}``,
    ``rlplace.tf.sources``), ``warmup`` and
    ``steps`` (median of ``steps`` after ``warmup``), ``step_time_limit`` (seconds; None: no
    limit), ``inter_op_threads`` (None: one per device, so each device can run an op at a time)
    and ``intra_op_threads`` (1: an op uses one core, as the profiles of ``graph=tf_model``),
    ``logical_gpus`` (GPU machines: logical GPUs with the cluster's ``memory_bytes`` as
    ``memory_limit``), ``seed`` (synthetic inputs), ``cache_size``, and the seconds to wait
    for the worker to start (``start_timeout``) and to answer (``request_timeout``)."""

    model: dict[str, Any] | None = None
    warmup: int = 5
    steps: int = 5
    step_time_limit: float | None = None
    inter_op_threads: int | None = None
    intra_op_threads: int = 1
    logical_gpus: bool = False
    seed: int = 0
    cache_size: int = 10_000
    start_timeout: float = 600.0
    request_timeout: float = 3600.0

    measurements: int = field(default=0, init=False)
    cache_hits: int = field(default=0, init=False)
    restarts: int = field(default=0, init=False)
    name: ClassVar[str] = "tf"

    def __post_init__(self):
        if self.model is not None:
            self.model = dict(self.model)
            try:
                check_spec(self.model)
            except ConfigError as exc:
                raise ConfigError(f"backend tf: {exc}") from None
        self.check_measuring()
        self._proc = self._conn = self._setup = None
        self._devices: list[str] = []
        self._ops: frozenset[str] = frozenset()

    # ------------------------------------------------------------------------ Backend protocol
    def measure(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        if self.model is None:
            raise ConfigError("backend tf: options.model is missing: say which zoo model the graph is "
                              "(graph=tf_model sets it, or backend.options.model={name: ..., <knobs>})")
        self._ensure_worker(cluster)
        self._check_graph(graph)
        raw = self._request(cluster, "measure", {
            "device_of": dict(zip(graph.names, placement.device_of.tolist())), "warmup": self.warmup,
            "steps": self.steps, "step_time_limit": self.step_time_limit,
            "inter_op_threads": self.inter_op_threads or cluster.num_devices,
            "intra_op_threads": self.intra_op_threads, "seed": self.seed})
        return _step_result(graph, cluster, placement, raw)

    def time_transfers(self, cluster: Cluster, src: int = 0, dst: int = 1, sizes=DEFAULT_SIZES,
                       hops: int = 32, repeats: int = 30) -> TransferTimes:
        """Time transfers from device ``src`` to ``dst`` in the worker (``rlplace.tf.comm``;
        ``fit_comm(times.sizes, times.seconds)`` fits the CommModel)."""
        return self._request(cluster, "transfers", {
            "src": src, "dst": dst, "sizes": list(sizes), "hops": hops, "repeats": repeats,
            "inter_op_threads": self.inter_op_threads or cluster.num_devices})

    # ------------------------------------------------------------------------ worker process
    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def close(self) -> None:
        """Stop the worker (a later evaluation starts a new one)."""
        if self._proc is None:
            return
        try:
            self._conn.send(("stop", None))
        except (OSError, ValueError):
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()
        self._proc = self._conn = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _wanted_setup(self, cluster: Cluster) -> WorkerSetup:
        model = None
        if self.model is not None:
            knobs = {k: v for k, v in self.model.items() if k != "name"}
            model = (self.model["name"], tuple(sorted(knobs.items())))
        limits = tuple(cluster.memory.tolist()) if self.logical_gpus else None
        return WorkerSetup(cluster.num_devices, model, limits)

    def _ensure_worker(self, cluster: Cluster) -> None:
        setup = self._wanted_setup(cluster)
        if self._proc is not None and not self._proc.is_alive():
            self._reap()
            self.restarts += 1
        if self._proc is not None and setup != self._setup:
            self.close()
        if self._proc is None:
            self._start(setup)

    def _start(self, setup: WorkerSetup) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=worker_main, args=(child, setup), daemon=True,
                                 name="rlplace-tf-worker")
        self._proc.start()
        child.close()  # so that the worker's death reads as end of file here
        self._setup = setup
        try:
            kind, info = self._receive(self.start_timeout)
        except EOFError:
            code = self._reap()
            raise BackendError(f"backend tf: the TensorFlow worker died while starting (exit code {code})") from None
        if kind != "ready":
            self.close()
            raise BackendError(f"backend tf: the TensorFlow worker could not start: {info}")
        self._devices, self._ops = info["devices"], frozenset(info["ops"])

    def _receive(self, timeout: float):
        if not self._conn.poll(timeout):
            self._reap()
            raise BackendError(f"backend tf: the TensorFlow worker gave no answer within {timeout:g} s; "
                               f"it was stopped")
        return self._conn.recv()

    def _reap(self) -> int | None:
        """Forget a dead (or hung) worker; its exit code."""
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()
        code = self._proc.exitcode
        self._conn.close()
        self._proc = self._conn = None
        return code

    def _request(self, cluster: Cluster, kind: str, payload: dict[str, Any]) -> Any:
        for attempt in range(2):
            self._ensure_worker(cluster)
            try:
                self._conn.send((kind, dict(payload)))
                status, answer = self._receive(self.request_timeout)
            except (EOFError, OSError):
                code = self._reap()
                self.restarts += 1
                if attempt:
                    raise BackendError(f"backend tf: the TensorFlow worker died twice on one {kind} "
                                       f"request (exit code {code})") from None
                continue
            if status == "error":
                raise BackendError(f"backend tf: {answer}")
            return answer

    def _check_graph(self, graph: OpGraph) -> None:
        if set(graph.names) != self._ops:
            extra = sorted(set(graph.names) - self._ops)
            missing = sorted(self._ops - set(graph.names))
            what = f"op {extra[0]!r} is not in the model" if extra else f"model op {missing[0]!r} is not in the graph"
            raise BackendError(f"backend tf: graph {graph.name!r} is not the training step of model "
                               f"{self.model['name']!r} with these knobs: {what}")


def _step_result(graph: OpGraph, cluster: Cluster, placement: Placement, raw: dict[str, Any]) -> StepResult:
    n, dev = cluster.num_devices, placement.device_of
    persistent = np.bincount(dev, weights=graph.persistent_bytes, minlength=n).astype(np.int64)
    peak = persistent + np.asarray(raw["transient_peak"], dtype=np.int64)
    oom_devices = sorted(set(raw["oom_devices"]) | set(np.flatnonzero(peak > cluster.memory).tolist()))
    data = graph.edge_src_output >= 0
    cross = data & (dev[graph.edge_src] != dev[graph.edge_dst])
    sent = np.unique(np.stack([graph.edge_tensor[cross], dev[graph.edge_dst[cross]]]), axis=1)
    busy = None if raw["busy_time"] is None else np.asarray(raw["busy_time"], dtype=np.float64)
    return StepResult(step_time=float(raw["step_time"]),  # inf after a real OOM
                      oom=bool(oom_devices), oom_devices=tuple(int(d) for d in oom_devices),
                      peak_memory=peak, busy_time=busy, num_transfers=int(sent.shape[1]),
                      transfer_bytes=int(graph.tensor_bytes[sent[0]].sum()),
                      timed_out=bool(raw["timed_out"]))
