"""rlplace-train: train a learned placer on one graph and cluster with the Gymnasium
environment; checkpoints, metrics, the best placement and the training curve go into the Hydra
run directory.

    rlplace-train agent=hierarchical graph=layered graph.num_ops=300 budget.placements=200
    rlplace-train ... backend.workers=4                # the k samples of a step on 4 Ray workers
    rlplace-train ... ray.address=auto                 # on a running Ray cluster (docs/distributed.md)

The ``@hydra.main`` function returns the step time (s) of the best placement found, as evaluated
once more at the end (inf if no placement fit in memory), the objective a Hydra sweeper such as
Optuna minimizes:

    rlplace-train --multirun hydra/sweeper=tune_ppo agent=mars graph=layered graph.num_ops=200
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlplace.apps.common import refuse_to_overwrite, run_app, user_errors, verifying
from rlplace.cluster import Cluster
from rlplace.distributed import make_parallel_backend
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import check_ranges
from rlplace.presets import instantiate_node

PROG = "rlplace-train"
log = logging.getLogger(__name__)


def train_from_config(cfg: DictConfig, out_dir: Path) -> dict:
    import torch

    from rlplace.learn.loggers import check_logger, make_logger
    from rlplace.learn.train import TrainConfig, train

    check_ranges(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    graph = instantiate_node(cfg, "graph")
    cluster = instantiate_node(cfg, "cluster")
    if not isinstance(graph, OpGraph) or not isinstance(cluster, Cluster):
        raise ConfigError("graph must build an OpGraph and cluster a Cluster (check their _target_)")
    agent = cfg.agent
    warm_start = OmegaConf.to_object(cfg.warm_start)  # a WarmStartConfig (the schema's type)
    config = TrainConfig(
        agent=agent.name, policy=OmegaConf.to_container(agent.policy, resolve=True),
        algorithm=agent.algorithm.name, algorithm_options=OmegaConf.to_container(agent.algorithm.options, resolve=True),
        samples=agent.samples, env={**OmegaConf.to_container(cfg.env), "oom_penalty": agent.oom_penalty},
        budget_placements=cfg.budget.placements, budget_seconds=cfg.budget.seconds,
        checkpoint_every=cfg.checkpoint_every, resume=cfg.resume,
        resume_across_devices=cfg.resume_across_devices, stop_after_updates=cfg.stop_after_updates,
        init_checkpoint=cfg.init_checkpoint, warm_start=warm_start, seed=cfg.seed, torch_device=cfg.torch_device,
        progress=cfg.progress, plots=cfg.plots)
    log.info(f"{PROG}: {agent.name} on {graph.name} ({graph.num_ops} ops) and {cluster.name or 'cluster'} "
             f"({cluster.num_devices} devices); output in {out_dir}")
    logger_options = _logger_options(cfg)
    check_logger(cfg.logger.name, **logger_options)
    backend = None
    try:
        backend = verifying(make_parallel_backend(cfg.backend.name, OmegaConf.to_container(cfg.backend.options, resolve=True),
                                                  workers=cfg.backend.get("workers", 1),
                                                  **OmegaConf.to_container(cfg.ray)), cfg)
        summary = train(graph, cluster, backend, config, out_dir,
                        lambda start_step: make_logger(cfg.logger.name, out_dir, start_step, **logger_options))
    finally:
        backend.close()
    if not summary.get("stopped"):
        final = summary.get("final_evaluation")
        best = f"{final['step_time'] * 1e3:.3f} ms" if final else "none valid"
        retries = f", {summary['evaluation_retries']} re-run on another worker" if "evaluation_retries" in summary else ""
        log.info(f"best step time {best} after {summary['evaluated']} placements "
                 f"({summary['placements_per_second']:.1f}/s on {summary['torch_device']}{retries}); results in {out_dir}")
    return summary


def best_step_time(summary: dict) -> float:
    """The app's objective: the final evaluation of the best placement (inf if it does not fit);
    a run stopped early (``stop_after_updates``) gives its best sampled step time."""
    final = summary.get("final_evaluation")
    if final is None:
        return float(summary["best_step_time"])
    return math.inf if final["oom"] else float(final["step_time"])


def _logger_options(cfg: DictConfig) -> dict:
    options = OmegaConf.to_container(cfg.logger.options, resolve=True)
    if cfg.logger.name == "wandb" and options.get("config") is None:
        options["config"] = OmegaConf.to_container(cfg, resolve=True)
    return options


@hydra.main(version_base="1.3", config_path="pkg://rlplace.conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> float:
    with user_errors(PROG):
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        if not cfg.resume:
            refuse_to_overwrite(out_dir, "results.json", "checkpoint.pt",
                                hint="resume=true continues it; or give another hydra.run.dir")
        return best_step_time(train_from_config(cfg, out_dir))


def main() -> None:
    run_app(_hydra_main, PROG)


if __name__ == "__main__":
    main()
