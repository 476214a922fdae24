"""Benchmark graphs: synthetic generators, real profiles and the TensorFlow model builders.

The TensorFlow builders live in ``rlplace.zoo.tf_models``; ``build_tf_model`` imports it (and
TensorFlow) only when called, so importing ``rlplace.zoo`` stays fast."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from rlplace.atomic import write_whole
from rlplace.errors import ConfigError, GraphError
from rlplace.graph import OpGraph
from rlplace.zoo.baechi import default_profile_path, load_baechi_profile
from rlplace.zoo.synthetic import chain, fork_join, layered, linear_regression

TF_MODELS = ("bert", "gnmt", "inception_v3", "linear_regression", "tensor_holography", "transformer")

__all__ = ["TF_MODELS", "build_tf_model", "cache_dir", "zoo_graph", "zoo_graph_path", "chain", "default_profile_path", "fork_join", "layered",
           "linear_regression", "load_baechi_profile", "load_graph"]


def build_tf_model(name: str, **knobs: Any):
    """Build the TensorFlow zoo model ``name`` (see ``rlplace.zoo.tf_models``) with the given
    size knobs. An unknown name is a ConfigError before TensorFlow loads; an unknown knob, one
    after (the builders' signatures list the knobs)."""
    if name not in TF_MODELS:
        raise ConfigError(f"model.name: unknown model {name!r} (known: {', '.join(TF_MODELS)})")
    from rlplace.zoo import tf_models

    builder = tf_models.MODELS[name]
    params = inspect.signature(builder).parameters
    for key, value in knobs.items():
        if key not in params:
            raise ConfigError(f"model.{key}: {name} has no knob {key!r} "
                              f"(knobs: {', '.join(params)})")
        _check_knob(key, value, params[key].default)
    return builder(**knobs)


def _check_knob(key: str, value: Any, default: Any) -> None:
    """A knob takes the type of its default: sizes and counts (int) are >= 1, rates (float)
    finite and > 0, switches (bool) true or false."""
    if isinstance(default, bool):
        ok, allowed = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, allowed = isinstance(value, int) and not isinstance(value, bool) and value >= 1, "an integer >= 1"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        allowed = "a finite number > 0"
    else:
        return
    if not ok:
        raise ConfigError(f"model.{key} must be {allowed}, got {value!r}")


def load_graph(name: str, seed: int = 0, **overrides):
    """The graph preset ``rlplace/conf/graph/<name>.yaml`` (``layered``, ``baechi_gnmt``, ...) with
    overrides, or an OpGraph file when ``name`` ends in ``.json.gz``."""
    from rlplace.graph import OpGraph
    from rlplace.presets import load_preset

    if name.endswith(".json.gz"):
        return OpGraph.load(name)
    return load_preset("graph", name, seed=seed, **overrides)


def cache_dir() -> Path:
    """Extracted zoo graphs are cached here (``$RLPLACE_CACHE``, else ~/.cache/rlplace)."""
    return Path(os.environ.get("RLPLACE_CACHE", Path.home() / ".cache" / "rlplace")) / "graphs"


# The code a zoo graph comes from: a cached graph is read only while these files (and the
# installed TensorFlow) are unchanged.
EXTRACTION_MODULES = ("rlplace.zoo.tf_models", "rlplace.tf.builder", "rlplace.tf.layers", "rlplace.tf.extract")


@functools.cache
def extraction_code_tag() -> str:
    """A digest of ``EXTRACTION_MODULES``' source files and the installed TensorFlow's version
    (found without importing TensorFlow)."""
    try:
        digest = hashlib.sha1(importlib.metadata.version("tensorflow").encode())
    except importlib.metadata.PackageNotFoundError:
        digest = hashlib.sha1()
    for name in EXTRACTION_MODULES:
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return digest.hexdigest()[:10]


def zoo_graph_path(model: str, knobs: Mapping[str, Any]) -> Path:
    """Where ``zoo_graph`` caches a model: ``<model>_<digest of knobs>_<extraction code tag>``."""
    knobs_tag = hashlib.sha1(json.dumps(dict(knobs), sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir() / f"{model}_{knobs_tag}_{extraction_code_tag()}.json.gz"


def zoo_graph(model: str, knobs: Mapping[str, Any]) -> OpGraph:
    """The extracted (never run) TensorFlow zoo model, cached by name, knobs and the extraction
    code (a graph cached by other builder or extractor code is extracted again, and the older file
    removed; so is a cache file that does not read). The cache file is written whole or not at
    all: processes that extract the same model at once each write their own and rename it into
    place."""
    path = zoo_graph_path(model, knobs)
    if path.is_file():
        try:
            return OpGraph.load(path)
        except GraphError:
            pass
    from rlplace.tf.extract import extract

    graph = extract(build_tf_model(model, **knobs))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, graph.save)
    stem = path.name.removesuffix(f"_{extraction_code_tag()}.json.gz")
    for older in path.parent.glob(f"{stem}_*.json.gz"):  # the same model extracted by other code
        if older != path:
            older.unlink(missing_ok=True)
    return graph
