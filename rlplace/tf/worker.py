"""The measuring worker: a separate process that owns TensorFlow, so that TensorFlow's fixed
devices and its crashes stay out of the caller (``rlplace.tf.backend.TFBackend`` starts it with
the ``spawn`` context and restarts it when it dies).

Protocol over one ``multiprocessing`` pipe, one request at a time:

* start-up: the worker configures its devices (``rlplace.tf.devices``), builds the model
  from its config (``rlplace.tf.sources.build_model``: a zoo model, a module path or a .keras
  file; optional) and sends
  ``("ready", {"devices": [...], "ops": [step op names]})`` or ``("error", message)``;
* ``("measure", {"device_of": {op name: device index}, **options})`` ->
  ``("ok", rlplace.tf.measure.measure(...))``;
* ``("transfers", {"src": i, "dst": j, **options})`` -> ``("ok", seconds per transfer)``
  (``rlplace.tf.comm.time_transfers``);
* ``("stop", None)`` ends the worker; so does the pipe closing.

A Python exception inside a request is answered with ``("error", message)``; the worker lives on.
This module imports no TensorFlow itself: the parent imports it to start the process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker fixes at start-up."""

    num_devices: int
    model: tuple[str, tuple[tuple[str, Any], ...]] | None  # (name, sorted knobs)
    memory_limits: tuple[int, ...] | None = None  # logical GPUs only


def worker_main(conn, setup: WorkerSetup) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import logging

        logging.getLogger("tensorflow").setLevel(logging.ERROR)
        from rlplace.tf.devices import configure_devices

        devices = configure_devices(setup.num_devices, setup.memory_limits)
        model, ops = None, []
        if setup.model is not None:
            from rlplace.tf.extract import step_ops
            from rlplace.tf.sources import build_model

            name, knobs = setup.model
            model = build_model({"name": name, **dict(knobs)})
            ops = [op.name for op in step_ops(model)]
        conn.send(("ready", {"devices": devices, "ops": ops}))
    except Exception as exc:  # reported to the parent, which raises it as a BackendError
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "stop":
            return
        try:
            conn.send(("ok", _handle(kind, payload, model, devices)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _handle(kind: str, payload: dict[str, Any], model, devices: list[str]) -> Any:
    if kind == "measure":
        from rlplace.tf.measure import measure

        if model is None:
            raise ValueError("this worker was started without a model")
        return measure(model, devices=devices, **payload)
    if kind == "transfers":
        from rlplace.tf.comm import time_transfers

        src, dst = payload.pop("src"), payload.pop("dst")
        return time_transfers(devices[src], devices[dst], **payload)
    raise ValueError(f"unknown request {kind!r}")
