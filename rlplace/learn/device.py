"""The torch device a learned placer trains on (``rlplace-train torch_device=auto|cpu|cuda|cuda:N``),
and random draws that follow a ``torch.Generator`` to whichever device it lives on.

A policy is built and initialised on the CPU (so a seed gives the same initial weights on every
device) and then moved, graph features included, to the device once; its samples come back to
the CPU (numpy) once per placement for the simulator. The trainer samples with a generator on
the policy's device, so that a decoder's step loop never waits for the host; a generator on
another device (a CPU generator for a policy on a GPU) still works: its draws are made where it
lives and moved, which gives the same samples on both devices.
"""

from __future__ import annotations

from typing import Sequence

import torch

from rlplace.learn.configs import check_device_name
from rlplace.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """``auto``: the first GPU if torch sees one, else the CPU; ``cpu``, ``cuda``, ``cuda:N``
    as named, a GPU only if torch sees it (ConfigError otherwise)."""
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"torch_device={name}: torch {torch.__version__} sees no CUDA GPU here "
                              "(use torch_device=cpu, or torch_device=auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"torch_device={name}: torch sees {torch.cuda.device_count()} CUDA GPU(s), "
                              f"numbered from 0")
    return device


def device_of(module: torch.nn.Module) -> torch.device:
    """Where a policy's parameters are."""
    return next(module.parameters()).device


def _where(generator: torch.Generator | None, device: torch.device) -> torch.device:
    return generator.device if generator is not None else device


def uniform(shape: Sequence[int], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``torch.rand(shape)`` from ``generator`` (the default one of ``device`` if None), on ``device``."""
    return torch.rand(shape, generator=generator, device=_where(generator, device)).to(device)


def normal(shape: Sequence[int], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``torch.randn(shape)`` from ``generator`` (the default one of ``device`` if None), on ``device``."""
    return torch.randn(shape, generator=generator, device=_where(generator, device)).to(device)


def multinomial(probs: torch.Tensor, samples: int, generator: torch.Generator | None,
                replacement: bool = False) -> torch.Tensor:
    """``torch.multinomial`` from ``generator``, on the device of ``probs``."""
    where = _where(generator, probs.device)
    return torch.multinomial(probs.to(where), samples, replacement=replacement, generator=generator).to(probs.device)


def device_name(device: torch.device) -> str:
    """``cpu``, or a GPU with its name (``cuda:0 (NVIDIA H100 80GB HBM3)``), for results."""
    if device.type == "cuda":
        return f"cuda:{device.index or 0} ({torch.cuda.get_device_name(device)})"
    return str(device)
