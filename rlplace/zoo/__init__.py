"""Benchmark graphs: synthetic generators and real profiles (TensorFlow model builders join
here with the TensorFlow issue)."""

from rlplace.zoo.baechi import default_profile_path, load_baechi_profile
from rlplace.zoo.synthetic import chain, fork_join, layered, linear_regression

__all__ = ["chain", "default_profile_path", "fork_join", "layered", "linear_regression", "load_graph",
           "load_baechi_profile"]


def load_graph(name: str, seed: int = 0, **overrides):
    """The graph preset ``conf/graph/<name>.yaml`` (``layered``, ``baechi_gnmt``, ...) with
    overrides, or an OpGraph file when ``name`` ends in ``.json.gz``."""
    from rlplace.graph import OpGraph
    from rlplace.presets import load_preset

    if name.endswith(".json.gz"):
        return OpGraph.load(name)
    return load_preset("graph", name, seed=seed, **overrides)
