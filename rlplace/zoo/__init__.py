"""Benchmark graphs: synthetic generators and real profiles (TensorFlow model builders join
here with the TensorFlow issue)."""

from rlplace.zoo.baechi import default_profile_path, load_baechi_profile
from rlplace.zoo.synthetic import chain, fork_join, layered, linear_regression

__all__ = ["chain", "default_profile_path", "fork_join", "layered", "linear_regression",
           "load_baechi_profile"]
