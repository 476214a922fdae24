"""The checkpoint file of ``rlplace-train`` (``checkpoint.pt``): the one writer and the one
reader, used by the trainer (resume, ``init_checkpoint``), the ``agent:checkpoint`` placers and
the experiments.

A checkpoint holds tensors and plain data only (dicts, lists, strings, numbers): numpy's RNG
state is stored as a dict with its key as a tensor. The reader unpickles with
``torch.load(weights_only=True)``, so a file that names any other Python object (a planted
``__reduce__`` payload, numpy arrays) is refused before anything in it runs. Every way a file
can fail (missing, a directory, empty, truncated, not a torch file, refused, wrong layout)
is a ``CheckpointError`` naming the file. The reader maps every tensor to the CPU, so a checkpoint
written on a GPU loads on a machine without one; the policy and algorithm move what they load to
their own device.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlplace.errors import CheckpointError


@dataclass
class Checkpoint:
    """What a training run depends on (``rlplace.agents.trainer``) and what rebuilds its policy
    elsewhere (``rlplace.agents.placer``)."""

    agent: str
    policy: dict[str, torch.Tensor]        # the policy's state dict
    algorithm: dict[str, Any]              # optimizer and algorithm state
    generator: torch.Tensor                # the sampling generator's state
    torch_rng: torch.Tensor
    numpy_rng: dict[str, Any]              # numpy_rng_state()
    progress: dict[str, Any]               # asdict(trainer.Progress)
    policy_options: dict[str, Any]
    env: dict[str, Any]                    # PlacementEnv options, graph/cluster/backend left out
    problem: dict[str, Any]                # problem_identity(): what the run placed


_TYPES = {"agent": str, "policy": dict, "algorithm": dict, "generator": torch.Tensor, "torch_rng": torch.Tensor,
          "numpy_rng": dict, "progress": dict, "policy_options": dict, "env": dict, "problem": dict}


def problem_identity(graph, cluster) -> dict[str, Any]:
    """Enough of the graph and cluster to tell that a checkpoint belongs to another problem."""
    return {"graph": graph.name, "ops": graph.num_ops, "edges": graph.num_edges, "devices": cluster.num_devices}


def numpy_rng_state() -> dict[str, Any]:
    """numpy's global RNG state as plain data (its key array as a tensor)."""
    state = np.random.get_state(legacy=False)
    return {**state, "state": {**state["state"], "key": torch.from_numpy(state["state"]["key"].astype(np.int64))}}


def set_numpy_rng_state(state: dict[str, Any]) -> None:
    key = np.asarray(state["state"]["key"].numpy(), dtype=np.uint32)
    np.random.set_state({**state, "state": {**state["state"], "key": key}})


def set_generator_state(path: Path, generator: torch.Generator, state: torch.Tensor,
                        reseed: int | None = None) -> bool:
    """Continue the sampling generator saved in ``path``. A generator of another kind of device
    (a run written on a GPU, resumed on the CPU) cannot continue: it is a CheckpointError, or,
    given ``reseed``, the generator is seeded with it instead (the run goes on, but not with the
    draws the first device would have made). Returns whether it was reseeded."""
    try:
        generator.set_state(state)
        return False
    except RuntimeError:
        if reseed is None:
            raise CheckpointError(f"{path}: its sampling generator is not a {generator.device.type} generator: resume "
                                  "the run on the kind of device it was written on (torch_device=cpu or cuda), "
                                  "or set resume_across_devices=true") from None
    generator.manual_seed(reseed)
    return True


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically: a kill while writing leaves the previous checkpoint intact."""
    tmp = path.with_suffix(".tmp")
    torch.save({f.name: getattr(checkpoint, f.name) for f in fields(Checkpoint)}, tmp)
    tmp.replace(path)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint in ``path``, on the CPU; never runs code from the file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"{path}: is not a checkpoint file (a directory?)")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file (0 bytes), not a checkpoint")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        refused = re.search(r"GLOBAL (\S+)", str(exc))
        if refused:
            raise CheckpointError(f"{path}: refused: it names {refused.group(1)}, and a checkpoint may hold only "
                                  "tensors and plain data (nothing in it was run)") from None
        detail = re.search(r"WeightsUnpickler error: (.+)", str(exc))
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt "
                              f"({detail.group(1)[:200] if detail else first_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001  (any failure to parse the bytes: truncated, corrupt, not torch)
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt "
                              f"({type(exc).__name__}: {first_line(exc)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not an rlplace-train checkpoint")
    for key, kind in _TYPES.items():
        if not isinstance(state.get(key), kind):
            found = "nothing" if key not in state else f"a {type(state[key]).__name__}"
            raise CheckpointError(f"{path}: not an rlplace-train checkpoint: {key!r} is {found}, "
                                  f"not a {kind.__name__}")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state["policy"].items()):
        raise CheckpointError(f"{path}: 'policy' is not a state dict of tensors")
    evaluated = state["progress"].get("evaluated")
    if not isinstance(evaluated, int) or evaluated < 0:
        raise CheckpointError(f"{path}: progress.evaluated is {evaluated!r}, not a count")
    return Checkpoint(**{key: state[key] for key in _TYPES})


def check_fits(path: Path, saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str,
               extra_ok: bool = False) -> None:
    """Every tensor of ``expected`` (a fresh state dict) is in ``saved`` with its shape, and
    ``saved`` has no others (unless ``extra_ok``); otherwise a CheckpointError naming the
    first difference, with ``what`` (the likely cause)."""
    for name, tensor in expected.items():
        if name not in saved:
            raise CheckpointError(f"{path}: has no {name} ({what})")
        if saved[name].shape != tensor.shape:
            raise CheckpointError(f"{path}: {name} is {tuple(saved[name].shape)} in the checkpoint but "
                                  f"{tuple(tensor.shape)} here ({what})")
    extra = sorted(set(saved) - set(expected))
    if extra and not extra_ok:
        raise CheckpointError(f"{path}: unexpected {extra[0]} ({what})")


def first_line(exc: BaseException) -> str:
    """An exception's message cut to one short line, for a one-line error."""
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else "no message"
