"""rlplace-calibrate: measure a design of placements of one model on the real backend, fit the
simulator's parameters to the measured step times and write what the other commands load
(issue 19; ``rlplace.calibration``).

    rlplace-calibrate model=gnmt                                   # a zoo model, CPU size
    rlplace-calibrate model=keras model.name=keras.applications:MobileNetV2 \\
        '+model.args={weights: null, input_shape: [32, 32, 3], classes: 10}' model.batch_size=2
    rlplace-calibrate from_run=outputs/<run>                       # refit, measure nothing

A run writes into its Hydra run directory ``measurements.json`` (every round of every placement,
written before the fit), ``graph.json.gz`` (the graph measured against) and
``measured_cluster.yaml``, ``cluster.yaml`` (the calibrated preset: ``cluster=file
cluster.path=<run>/cluster.yaml``), ``calibrated_graph.json.gz`` (``graph=file
graph.path=...``), ``calibration.json``, ``report.md`` and ``scatter.png``.

The ``@hydra.main`` function returns the held-out Spearman correlation of the calibrated
simulator with the measurements (higher is better), for a sweeper over the fit's options.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rlplace.apps.common import refuse_to_overwrite, run_app, user_errors
from rlplace.errors import ConfigError
from rlplace.graph import OpGraph
from rlplace.options import check_ranges
from rlplace.cluster import load_cluster_file
from rlplace.presets import instantiate_node

PROG = "rlplace-calibrate"
OUTPUTS = ("measurements.json", "report.md", "cluster.yaml")
log = logging.getLogger(__name__)


def calibrate(cfg: DictConfig, out_dir: Path) -> dict:
    from rlplace.calibration.design import check_heuristics
    from rlplace.calibration.files import write_graph, write_preset
    from rlplace.calibration.report import markdown, scatter
    from rlplace.calibration.study import study

    check_ranges(cfg)
    check_heuristics(list(cfg.heuristics))
    refuse_to_overwrite(out_dir, *OUTPUTS)
    if cfg.from_run is not None:
        graph, cluster, measurements, source = _earlier_run(Path(cfg.from_run))
    else:
        graph, cluster, measurements = _measure(cfg, out_dir)
        source = f"measured by this run ({cfg.backend.name} backend)"
    result = study(graph, cluster, measurements, held_out=cfg.held_out, cv_folds=cfg.cv_folds,
                   op_type_groups=cfg.op_type_groups, fit_speeds=cfg.fit_speeds,
                   max_evaluations=cfg.max_evaluations, seed=cfg.seed)
    summary = result.summary()
    name = f"{cluster.name or 'cluster'}_calibrated"
    calibrated_graph, calibrated = result.fit.apply(graph, cluster, name)
    after, ceiling = summary["held_out_after"], summary["noise_ceiling"]["held_out"]
    notes = [f"Graph {graph.name} ({graph.num_ops} ops), cluster {cluster.name or '?'} ({cluster.num_devices} "
             f"devices); measurements {source}. Written by `{PROG}`."]
    write_preset(out_dir / "cluster.yaml", calibrated, [
        f"{name}: calibrated by {PROG} on {graph.name} ({summary['fit_on']} placements); use with the "
        f"cost-corrected graph calibrated_graph.json.gz",
        f"held-out Spearman {after['spearman']:.3f} over {after['placements']} placements"
        + (f" (noise ceiling {ceiling['ceiling']:.3f})" if ceiling else "") + f"; R^2 {summary['fit']['r2']:.3f}"])
    write_graph(out_dir / "calibrated_graph.json.gz", calibrated_graph)
    (out_dir / "calibration.json").write_text(json.dumps({**summary, "rows": result.rows()}, indent=1))
    (out_dir / "report.md").write_text(markdown(f"Calibration of the simulator: {graph.name}", result, notes))
    if cfg.plots:
        scatter(result, out_dir / "scatter.png", graph.name)
    log.info(f"{graph.name}: fitted on {summary['fit_on']} placements, {result.fit.params.mode} transfers, "
             f"latency {result.fit.params.latency * 1e6:.1f} µs, R² {summary['fit']['r2']:.3f}; held-out "
             f"Spearman {summary['held_out_before']['spearman']:.3f} before, {after['spearman']:.3f} calibrated"
             + (f" (noise ceiling {ceiling['ceiling']:.3f})" if ceiling else "") + f"; results in {out_dir}")
    return summary


def _measure(cfg: DictConfig, out_dir: Path):
    from rlplace.backends import make_backend
    from rlplace.calibration.design import design
    from rlplace.calibration.files import write_graph, write_preset
    from rlplace.calibration.protocol import measure
    from rlplace.cluster import Cluster

    backend = make_backend(cfg.backend.name, **OmegaConf.to_container(cfg.backend.options, resolve=True))
    if backend.simulated:
        raise ConfigError(f"backend={cfg.backend.name}: {PROG} measures on a real backend (backend=tf)")
    graph = instantiate_node(cfg, "graph")
    cluster = instantiate_node(cfg, "cluster")
    if not isinstance(graph, OpGraph) or not isinstance(cluster, Cluster):
        raise ConfigError("graph must build an OpGraph and cluster a Cluster (check their _target_)")
    plan = design(graph, cluster, cuts=list(cfg.cuts), mixing_rates=list(cfg.mixing_rates),
                  mixing_seeds=cfg.mixing_seeds, heuristics=list(cfg.heuristics), seed=cfg.seed)
    log.info(f"{graph.name}: {graph.num_ops} ops; measuring {len(plan)} placements x {cfg.rounds} rounds")
    write_graph(out_dir / "graph.json.gz", graph)
    write_preset(out_dir / "measured_cluster.yaml", cluster, [f"the cluster {PROG} measured on"])
    try:
        measurements = measure(backend, graph, cluster, plan, rounds=cfg.rounds, warmup=cfg.warmup, seed=cfg.seed)
    finally:
        backend.close()
    (out_dir / "measurements.json").write_text(json.dumps(measurements.as_dict()))
    return graph, cluster, measurements


def _earlier_run(run: Path):
    from rlplace.calibration.protocol import Measurements

    missing = [name for name in ("measurements.json", "graph.json.gz", "measured_cluster.yaml")
               if not (run / name).is_file()]
    if missing:
        raise ConfigError(f"from_run: {run} has no {', '.join(missing)} (not a {PROG} run directory)")
    graph = OpGraph.load(run / "graph.json.gz")
    cluster = load_cluster_file(str(run / "measured_cluster.yaml"))
    try:
        data = json.loads((run / "measurements.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"from_run: {run / 'measurements.json'} is not JSON ({exc})") from None
    measurements = Measurements.from_dict(data, graph.num_ops, where=str(run / "measurements.json"))
    if measurements.placements.size and measurements.placements.max() >= cluster.num_devices:
        raise ConfigError(f"from_run: {run / 'measurements.json'} places ops on device "
                          f"{int(measurements.placements.max())}, the cluster has {cluster.num_devices}")
    return graph, cluster, measurements, f"from {run}"


def objective(summary: dict) -> float:
    """Held-out Spearman of the calibrated simulator (nan with fewer than 3 held out: -inf)."""
    rho = summary["held_out_after"]["spearman"]
    return -math.inf if math.isnan(rho) else float(rho)


@hydra.main(version_base="1.3", config_path="pkg://rlplace.conf", config_name="calibrate")
def _hydra_main(cfg: DictConfig) -> float:
    with user_errors(PROG):
        return objective(calibrate(cfg, Path(HydraConfig.get().runtime.output_dir)))


def main() -> None:
    run_app(_hydra_main, PROG)


if __name__ == "__main__":
    main()
