"""The OpGraph of a zoo model, for ``graph=tf_model``: the graph source that says which model a
graph is, so that ``backend=tf`` (whose ``options.model`` the config takes from ``graph.model``)
can rebuild and run it.

Costs come from a saved profile of that model (``profile``: an OpGraph file written by
``rlplace-profile`` with the same knobs) or, when none is given, from a quick profile on one
device in this process (``rlplace.tf.profile``).
"""

from __future__ import annotations

from typing import Any

from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.tf.sources import build_model


def model_graph(model: dict[str, Any], profile: str | None = None, warmup: int = 2, steps: int = 3,
                inter_op_threads: int = 1, intra_op_threads: int = 1, seed: int = 0) -> OpGraph:
    """``model`` is ``{name: <zoo model>, <knob>: value, ...}`` or a model source
    (``rlplace.tf.sources``)."""
    knobs = dict(model)
    name = knobs.pop("name", None)
    tf_model = build_model(model)
    if profile is None:
        from rlplace.tf.profile import profile as run_profile

        return run_profile(tf_model, warmup, steps, inter_op_threads, intra_op_threads, seed).graph
    from rlplace.tf.extract import step_ops

    graph = OpGraph.load(profile)
    ops = {op.name for op in step_ops(tf_model)}
    if set(graph.names) != ops:
        differ = sorted(set(graph.names) ^ ops)[0]
        raise ConfigError(f"graph.profile: {profile} is not a profile of model {name!r} with knobs "
                          f"{knobs} (op {differ!r} is in only one of them)")
    return graph
