"""TorchBackend (``backend=torch``): evaluate a placement by running a PyTorch model's training
step (forward, loss, backward, SGD step) with the placement's ``device_map`` (issue 43).

The graph is the model's training step imported at module granularity (``graph=torch_model``,
``rlplace.import_.torch_model``), so every placement is a ``device_map``
(``rlplace.export.torch_device_map``). Per placement, a fresh copy of the model is dispatched
with Hugging Face ``accelerate.dispatch_model`` (whose hooks move activations between devices),
``warmup`` steps run, and the step time is the median of ``steps`` timed steps (CUDA devices
synchronized). The devices: ``devices[k]`` is the torch device of the cluster's device k; by
default ``cuda:k`` where CUDA has that device, ``cpu`` otherwise.

Memory: a CUDA device's peak is measured (``torch.cuda.max_memory_allocated``), and a CUDA
out-of-memory error is an OOM on the device it names; a CPU device has no memory of its own to
measure, so its peak is the simulator's for the placement. A device whose peak exceeds the
cluster's ``memory_bytes`` is an OOM. The transfer counts are the simulator's (the graph's
cross-device tensors). Repeated placements come from an LRU cache; a step slower than
``step_time_limit`` stops the measurement (``timed_out``).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rlplace.backends import MeasuringBackend
from rlplace.cluster import Cluster
from rlplace.errors import BackendError, ConfigError, first_line
from rlplace.export import torch_device_map
from rlplace.graph import OpGraph
from rlplace.import_.torch_model import TorchModel, build_model, check_spec
from rlplace.placement import Placement
from rlplace.sim import StepResult, simulate

if TYPE_CHECKING:  # PyTorch loads on the first measurement: the apps' schemas read the options without it
    from rlplace.import_.torch import TorchImport


@dataclass
class TorchBackend(MeasuringBackend):
    """Options: ``model`` (a PyTorch model source, ``rlplace.import_.torch_model``; ``graph=
    torch_model`` sets it), ``devices`` (torch device per cluster device; None: ``cuda:k`` where
    present, else ``cpu``), ``warmup`` and ``steps`` (median of ``steps`` after ``warmup``),
    ``step_time_limit`` (seconds; None: no limit), ``threads`` (PyTorch's CPU threads while
    measuring; None: as they are), ``cache_size``."""

    model: dict[str, Any] | None = None
    devices: list[str] | None = None
    warmup: int = 3
    steps: int = 5
    step_time_limit: float | None = None
    threads: int | None = None
    cache_size: int = 10_000

    measurements: int = field(default=0, init=False)
    cache_hits: int = field(default=0, init=False)
    name: ClassVar[str] = "torch"

    def __post_init__(self):
        if self.model is not None:
            self.model = dict(self.model)
            try:
                check_spec(self.model)
            except ConfigError as exc:
                raise ConfigError(f"backend torch: {exc}") from None
        self.check_measuring()
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"backend torch: threads must be >= 1 or null, got {self.threads!r}")

    @cached_property
    def _built(self) -> tuple[TorchModel, TorchImport]:
        if self.model is None:
            raise ConfigError("backend torch: options.model is missing: say which PyTorch model the graph is "
                              "(graph=torch_model sets it, or backend.options.model={name: 'package.module:function'})")
        built = build_model(self.model)
        return built, built.imported()

    def device_names(self, cluster: Cluster) -> list[str]:
        import torch

        if self.devices is not None:
            if len(self.devices) != cluster.num_devices:
                raise ConfigError(f"backend torch: {len(self.devices)} devices named for a cluster of "
                                  f"{cluster.num_devices}")
            return list(self.devices)
        cuda = torch.cuda.device_count()
        return [f"cuda:{k}" if k < cuda else "cpu" for k in range(cluster.num_devices)]

    # ------------------------------------------------------------------------ Backend protocol
    def measure(self, graph: OpGraph, cluster: Cluster, placement: Placement) -> StepResult:
        built, imported = self._built
        if set(graph.names) != set(imported.graph.names):
            differ = sorted(set(graph.names) ^ set(imported.graph.names))[0]
            raise BackendError(f"backend torch: graph {graph.name!r} is not the training step of model "
                               f"{self.model['name']!r} (op {differ!r} is in only one of them)")
        own = Placement(placement.device_of[[graph.index[n] for n in imported.graph.names]])
        names = self.device_names(cluster)
        device_map = torch_device_map(imported, own, names)
        simulated = simulate(graph, cluster, placement)
        step_time, timed_out, oom_on, cuda_peaks = self._run_steps(built, device_map, names)
        peak = simulated.peak_memory.copy()
        peak[list(cuda_peaks)] = list(cuda_peaks.values())
        oom_devices = sorted(set(oom_on) | set(np.flatnonzero(peak > cluster.memory).tolist()))
        return dataclasses.replace(simulated, step_time=step_time if not oom_on else float("inf"),
                                   oom=bool(oom_devices), oom_devices=tuple(oom_devices), peak_memory=peak,
                                   busy_time=None, timed_out=timed_out)

    def _run_steps(self, built: TorchModel, device_map: dict[str, str],
                 names: list[str]) -> tuple[float, bool, list[int], dict[int, int]]:
        """(median step time, timed out, cluster devices of a CUDA OOM, peak bytes of each
        cluster device on CUDA) of the model dispatched with ``device_map``."""
        import accelerate
        import torch

        from rlplace.import_.torch import default_loss

        cuda = {n for n in names if n.startswith("cuda")}
        for name in cuda:
            torch.cuda.reset_peak_memory_stats(name)

        def peaks() -> dict[int, int]:
            return {k: torch.cuda.max_memory_allocated(n) for k, n in enumerate(names) if n in cuda}

        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads or threads)
        try:
            model = accelerate.dispatch_model(copy.deepcopy(built.module), device_map=device_map)
            optimizer = torch.optim.SGD(model.parameters(), lr=built.learning_rate)
            first = torch.device(next(iter(device_map.values())) if device_map else "cpu")
            inputs = [x.to(first) for x in built.inputs]

            def step() -> float:
                start = time.perf_counter()
                output = model(*inputs)
                loss = default_loss(output, *[t.to(output.device) for t in built.targets])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                for name in cuda:
                    torch.cuda.synchronize(name)
                return time.perf_counter() - start

            times = []
            for i in range(self.warmup + self.steps):
                seconds = step()
                if self.step_time_limit is not None and seconds > self.step_time_limit:
                    return seconds, True, [], peaks()
                if i >= self.warmup:
                    times.append(seconds)
            return statistics.median(times), False, [], peaks()
        except torch.cuda.OutOfMemoryError as exc:
            gpus = {int(g) for g in re.findall(r"GPU (\d+)", str(exc))}
            on_cuda = [k for k, n in enumerate(names) if n.startswith("cuda")]
            return float("inf"), False, [k for k in on_cuda if torch.device(names[k]).index in gpus] or on_cuda, peaks()
        except (RuntimeError, ValueError, TypeError) as exc:
            raise BackendError(f"backend torch: the placed model did not run ({first_line(exc)})") from None
        finally:
            torch.set_num_threads(threads)
