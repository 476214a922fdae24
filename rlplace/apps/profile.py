"""rlplace-profile: build a zoo model in TensorFlow, profile one training step on one device and
write its OpGraph (``<model>_b<batch>.json.gz``) into the Hydra run directory.

    rlplace-profile model=gnmt model.batch_size=16 steps=5 warmup=5
    rlplace-profile model=inception_v3 standard_eval.batch_sizes=[1,2,4]

With ``standard_eval.batch_sizes`` set, Celeritas' Standard Evaluation (§4.2.1) also profiles
those small batches, predicts per-op costs at ``model.batch_size`` by linear regression, writes
the predicted graph and ``standard_eval.json`` with the relative deviations from the measured
profile.

The ``@hydra.main`` function returns the measured step time (s): the median wall-clock time of
the ``steps`` traced training steps (``profile.json``'s ``step_time``), for a Hydra sweeper to
minimize (e.g. over ``inter_op_threads`` and ``intra_op_threads``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlplace.apps.common import run_app, user_errors
from rlplace.errors import ConfigError
from rlplace.options import check_ranges
from rlplace.zoo import build_tf_model

PROG = "rlplace-profile"
log = logging.getLogger(__name__)


def profile_app(cfg: DictConfig, out_dir: Path) -> dict:
    check_ranges(cfg)
    knobs = OmegaConf.to_container(cfg.model, resolve=True)
    if not isinstance(knobs, dict) or "name" not in knobs:
        raise ConfigError("model: needs a name (one of rlplace/conf/model/)")
    name = knobs.pop("name")
    if "batch_size" not in knobs:
        raise ConfigError(f"model.batch_size: missing for model {name!r}")
    output = writable(out_dir / cfg.output) if cfg.output else None   # before the profiling, not after
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # tf.compat.v1 deprecation notes
    model = build_tf_model(name, **knobs)

    from rlplace.tf.profile import profile, standard_evaluation

    options = dict(warmup=cfg.warmup, steps=cfg.steps, inter_op_threads=cfg.inter_op_threads,
                   intra_op_threads=cfg.intra_op_threads, seed=cfg.seed)
    result = profile(model, **options)
    graph = result.graph
    path = output or out_dir / f"{graph.name}.json.gz"
    graph.save(path)
    stats = graph.stats()
    summary = {"model": name, "batch_size": model.batch_size, "file": str(path),
               "ops": graph.num_ops, "edges": graph.num_edges, "measured_ops": result.measured_ops,
               "compute_sum": stats.total_compute, "critical_path": stats.critical_path,
               "step_time": result.step_time, "memory": stats.total_memory,
               "colocation_groups": len(graph.colocation_groups)}
    log.info(f"{graph.name}: {graph.num_ops} ops ({result.measured_ops} measured), {graph.num_edges} "
             f"edges, {len(graph.colocation_groups)} colocation groups; per-op compute sum "
             f"{stats.total_compute * 1e3:.3f} ms, traced step {result.step_time * 1e3:.3f} ms; "
             f"memory {stats.total_memory / 2**20:.1f} MiB -> {path}")

    if cfg.standard_eval.batch_sizes:
        def build(batch: int):
            return build_tf_model(name, **{**knobs, "batch_size": batch})

        se = standard_evaluation(build, list(cfg.standard_eval.batch_sizes), model.batch_size,
                                 measure=cfg.standard_eval.measure, **options)
        se.predicted.save(out_dir / f"{se.predicted.name}.json.gz")
        summary["standard_eval"] = se.as_dict()
        if se.memory_deviation is not None:
            log.info(f"standard evaluation {se.batch_sizes} -> {se.target_batch}: mean relative "
                     f"deviation memory {se.memory_deviation:.2%} ({se.ops_compared['memory']} ops), "
                     f"time {se.time_deviation:.2%} ({se.ops_compared['time']} ops)")
    (out_dir / "profile.json").write_text(json.dumps(summary, indent=1))
    return summary


def writable(path: Path) -> Path:
    """``path``, its folder created: an ``output`` that cannot be written is refused before
    minutes of profiling, not after."""
    if path.is_dir():
        raise ConfigError(f"output={path}: is a directory (give a file name, e.g. {path / 'model.json.gz'})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"output={path}: cannot create its folder {path.parent} (a file is in the way)") from None
    except OSError as exc:
        raise ConfigError(f"output={path}: cannot create its folder {path.parent} ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"output={path}: its folder {path.parent} is not writable")
    return path


@hydra.main(version_base="1.3", config_path="pkg://rlplace.conf", config_name="profile")
def _hydra_main(cfg: DictConfig) -> float:
    with user_errors(PROG):
        return float(profile_app(cfg, Path(HydraConfig.get().runtime.output_dir))["step_time"])


def main() -> None:
    run_app(_hydra_main, PROG)


if __name__ == "__main__":
    main()
