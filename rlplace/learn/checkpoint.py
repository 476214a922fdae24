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

import math
import pickle
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlplace.atomic import write_whole
from rlplace.errors import CheckpointError, first_line


@dataclass
class Checkpoint:
    """What a training run depends on (``rlplace.learn.train``) and what rebuilds its policy
    elsewhere (``rlplace.learn.placer``)."""

    agent: str
    policy: dict[str, torch.Tensor]        # the policy's state dict
    algorithm: dict[str, Any]              # optimizer and algorithm state
    generator: torch.Tensor                # the sampling generator's state
    torch_rng: torch.Tensor
    numpy_rng: dict[str, Any]              # numpy_rng_state()
    progress: dict[str, Any]               # asdict(train.RunProgress): totals, and per graph under "graphs"
    policy_options: dict[str, Any]
    env: dict[str, Any]                    # PlacementEnv options, graph/cluster/backend left out
    problem: dict[str, Any]                # problem_identity(), or a family's: what the run placed

    def graph_progress(self, name: str | None = None) -> dict[str, Any]:
        """What the run did on graph ``name`` (asdict(train.Progress): its evaluated step times,
        first and best placements ...); without a name, on its only graph."""
        graphs = self.progress["graphs"]
        if name is None:
            if len(graphs) != 1:
                raise ValueError(f"the run trained on {len(graphs)} graphs; name one")
            return next(iter(graphs.values()))
        return graphs[name]


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
    write_whole(path, lambda out: torch.save({f.name: getattr(checkpoint, f.name) for f in fields(Checkpoint)}, out))


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
    check_contents(path, state)
    return Checkpoint(**{key: state[key] for key in _TYPES})


# ---------------------------------------------------------------------------------- contents
def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _time(v: Any) -> bool:
    """A step time or a duration in seconds: a number >= 0, infinity allowed (nothing fitted)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0   # NaN fails v >= 0


def _actions(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(_count(a) for a in v))


# Each field of train.Progress (one graph) and train.RunProgress (the run), with what it must be.
_GRAPH_PROGRESS = {
    "updates": (_count, "a count"), "evaluated": (_count, "a count"),
    "best_step_time": (_time, "a step time (seconds >= 0)"),
    "best_actions": (_actions, "null or a list of device indices"),
    "first_actions": (_actions, "null or a list of device indices"),
    "step_times": (lambda v: isinstance(v, list) and all(_time(t) for t in v), "a list of step times"),
    "valid": (lambda v: isinstance(v, list) and all(isinstance(b, bool) for b in v), "a list of true/false"),
    "warm_start": (lambda v: isinstance(v, dict), "a dict"),
    "references": (lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v), "a list of dicts"),
}
_RUN_PROGRESS = {
    "updates": (_count, "a count"), "evaluated": (_count, "a count"),
    "elapsed": (lambda v: _time(v) and math.isfinite(v), "seconds >= 0"),
    "graphs": (lambda v: isinstance(v, dict) and len(v) > 0 and all(isinstance(k, str) for k in v),
               "a dict of each graph's progress"),
    "generator_reseeded_at": (lambda v: isinstance(v, list) and all(_count(a) for a in v), "a list of counts"),
}


def _check_record(path: Path, where: str, record: Any, rules: dict[str, tuple[Any, str]]) -> None:
    if not isinstance(record, dict):
        raise CheckpointError(f"{path}: {where} is a {type(record).__name__}, not a dict")
    unexpected = sorted(set(record) - set(rules), key=str)
    if unexpected:
        raise CheckpointError(f"{path}: {where} has an unexpected field {unexpected[0]!r}")
    for key, (ok, what) in rules.items():
        if key not in record:
            raise CheckpointError(f"{path}: {where}.{key} is missing")
        if not ok(record[key]):
            raise CheckpointError(f"{path}: {where}.{key} is {_brief(record[key])}, not {what}")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _non_finite(value: Any, where: str) -> str | None:
    """The name of the first floating tensor or float under ``value`` (dicts, lists) holding
    a NaN or an infinity, or None."""
    if isinstance(value, torch.Tensor):
        return where if value.is_floating_point() and not bool(torch.isfinite(value).all()) else None
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}")
        if found:
            return found
    return None


def check_contents(path: Path, state: dict[str, Any]) -> None:
    """Field by field, what the trainer and the placers read: the progress of the run and of
    each graph (types and ranges), the policy's weights and the algorithms' state (finite;
    every Adam moment with its ``step``). A CheckpointError names the file and the field."""
    progress = state["progress"]
    _check_record(path, "progress", progress, _RUN_PROGRESS)
    for name, graph in progress["graphs"].items():
        where = f"progress.graphs[{name!r}]"
        _check_record(path, where, graph, _GRAPH_PROGRESS)
        if len(graph["valid"]) != len(graph["step_times"]):
            raise CheckpointError(f"{path}: {where} has {len(graph['step_times'])} step times but "
                                  f"{len(graph['valid'])} validity flags")
    bad = _non_finite(state["policy"], "policy")
    if bad:
        raise CheckpointError(f"{path}: {bad} holds a NaN or an infinity")
    graphs = state["algorithm"].get("graphs")
    if not isinstance(graphs, list) or len(graphs) != len(progress["graphs"]):
        raise CheckpointError(f"{path}: algorithm.graphs is not a list of each graph's algorithm state")
    for i, algorithm in enumerate(graphs):
        where = f"algorithm.graphs[{i}]"
        if not isinstance(algorithm, dict) or not isinstance(algorithm.get("optimizer"), dict):
            raise CheckpointError(f"{path}: {where}.optimizer is missing")
        if not _count(algorithm.get("updates")):
            raise CheckpointError(f"{path}: {where}.updates is {_brief(algorithm.get('updates'))}, not a count")
        baseline = algorithm.get("baseline")
        if baseline is not None and not (isinstance(baseline, (int, float)) and math.isfinite(baseline)):
            raise CheckpointError(f"{path}: {where}.baseline is {_brief(baseline)}, not null or a finite number")
        moments = algorithm["optimizer"].get("state")
        if not isinstance(moments, dict) or not all(isinstance(m, dict) and "step" in m for m in moments.values()):
            raise CheckpointError(f"{path}: {where}.optimizer.state is not a dict of Adam states with their step")
        bad = (_non_finite(algorithm["optimizer"], f"{where}.optimizer")
               or _non_finite(algorithm.get("buffer"), f"{where}.buffer"))
        if bad:
            raise CheckpointError(f"{path}: {bad} holds a NaN or an infinity")


def check_moments(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """After loading: every Adam moment has its parameter's shape (a CheckpointError otherwise)."""
    for g, group in enumerate(optimizer.param_groups):
        for i, parameter in enumerate(group["params"]):
            for key, value in optimizer.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != parameter.shape:
                    raise CheckpointError(f"{path}: optimizer state {key} of parameter {i} (group {g}) is "
                                          f"{tuple(value.shape)}, its parameter {tuple(parameter.shape)}")


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

