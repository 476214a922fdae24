"""The optional parts of rlplace and the extra that installs each.

``pip install rlplace`` brings the simulator, the algorithmic placers, the Gymnasium environment
and the apps; TensorFlow, PyTorch, the loggers and the sweep plugins come as extras
(``pyproject.toml``, ``[project.optional-dependencies]``). Code that needs an extra imports it
where it is used, and a missing one reaches the user as one line naming the extra to install.
"""

from __future__ import annotations

from rlplace.errors import ConfigError

# the top-level module a user lacks -> the extra that installs it
EXTRA_OF = {
    "tensorflow": "tf", "keras": "tf", "tf_keras": "tf",
    "torch": "learn", "torch_geometric": "learn",
    "wandb": "wandb", "tensorboard": "tensorboard", "ray": "ray",
    "stable_baselines3": "sb3", "sb3_contrib": "sb3", "accelerate": "accelerate",
}
# Hydra plugins: the launcher or sweeper config Hydra could not load -> the extra
PLUGIN_EXTRA = {"joblib": "joblib", "optuna": "optuna", "submitit_local": "slurm", "submitit_slurm": "slurm"}


class MissingExtra(ConfigError):
    """The configuration asks for a part of rlplace whose extra is not installed."""


def install_hint(extra: str) -> str:
    return f'pip install "rlplace[{extra}]"'


def missing_extra(exc: ModuleNotFoundError, what: str = "") -> MissingExtra | None:
    """``exc`` as a MissingExtra naming the extra to install, or None where the missing module
    is not one an extra brings (a real bug or a user's own module: keep the traceback)."""
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(module)
    if extra is None:
        return None
    prefix = f"{what}: " if what else ""
    return MissingExtra(f"{prefix}needs {module}, which the core install leaves out: {install_hint(extra)}")
