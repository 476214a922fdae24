"""rlplace-compare: run placers on one graph and cluster, evaluate each placement with one
backend, print a table and write ``results.json`` and plots into the Hydra run directory.

    rlplace-compare graph=baechi_gnmt cluster=baechi_2080 placers=[single,round_robin,random]
    rlplace-compare ... placers=[m_etf,mars:outputs/run/checkpoint.pt]    # a policy from rlplace-train
    rlplace-compare ... placers=[metis,local_search] +placer_options.local_search.start=metis

A search placer (local_search, annealing) evaluates its candidates on the compare backend; its
curve (best step time against placements evaluated) goes into results.json and curves.png.
Every record carries the graph's lower bounds on any placement's step time (``lower_bound``,
compute only, and ``communication_bound``, which counts transfers: ``rlplace.bounds``); the
table shows each step time over the communication bound.
A trained policy placing the graph and cluster it was trained on brings its training curve, and
a local search beside it (``rlplace.apps.beside``: from its first training placement, at its
evaluations and at its training time capped at ``beside_seconds``) joins the placers.

The ``@hydra.main`` function returns the best step time (s) among the placers that placed and fit
in memory (inf if none fits), the objective a Hydra sweeper such as Optuna minimizes:

    rlplace-compare --multirun hydra/sweeper=tune_local_search placers=[local_search]
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from tqdm import tqdm

from rlplace.apps.beside import beside_placers
from rlplace.apps.common import refuse_to_overwrite, run_app, user_errors, verifying
from rlplace.apps.schema import COMPARE_PLACERS
from rlplace.atomic import write_whole
from rlplace.backends import make_backend
from rlplace.bounds import communication_bound
from rlplace.cluster import Cluster
from rlplace.errors import ConfigError, PlacementError
from rlplace.graph import OpGraph
from rlplace.options import check_ranges
from rlplace.placers.run import run_placer
from rlplace.placers import available_placers, make_placer
from rlplace.placers.search import SEARCH_PLACERS
from rlplace.presets import instantiate_node
from rlplace.report import format_table, plot_curves, plot_memory, plot_schedule
from rlplace.sim import lower_bound, simulate

PROG = "rlplace-compare"
log = logging.getLogger(__name__)


def compare(cfg: DictConfig, out_dir: Path) -> list[dict]:
    check_ranges(cfg)
    names = placer_names(cfg.placers)
    graph = instantiate_node(cfg, "graph")
    cluster = instantiate_node(cfg, "cluster")
    if not isinstance(graph, OpGraph) or not isinstance(cluster, Cluster):
        raise ConfigError("graph must build an OpGraph and cluster a Cluster (check their _target_)")
    backend = make_backend(cfg.backend.name, **OmegaConf.to_container(cfg.backend.options, resolve=True))
    names = defaults_that_finish(names, cfg, backend)
    stats = graph.stats(cluster.comm)
    log.info(f"graph {graph.name}: {stats.num_ops} ops, {stats.num_edges} edges, compute "
             f"{stats.total_compute * 1e3:.3f} ms, critical path {stats.critical_path * 1e3:.3f} ms, "
             f"CCR {stats.ccr:.3f}; cluster {cluster.name or ''}: {cluster.num_devices} devices, "
             f"{cluster.comm.mode} transfers")

    placer_options = OmegaConf.to_container(cfg.placer_options)
    for name, options in placer_options.items():
        if name not in names:   # a warning, not an error: a sweep over placers may give options for each
            log.warning(f"placer_options.{name}: {name} is not among placers={list(names)}, so its options "
                        "are not used (a typo?)")
        if not isinstance(options, dict):
            raise ConfigError(f"placer_options.{name}: options by name, e.g. +placer_options.{name}.seed=1, "
                              f"got {options!r}")
    bounds = {"lower_bound": lower_bound(graph, cluster), "communication_bound": communication_bound(graph, cluster)}
    placers = [(name, _placer(name, cfg.seed, placer_options.get(name, {}), verifying(backend, cfg)))
               for name in names]  # every name is checked before any work starts
    placers += beside_placers(placers, graph, cluster, cfg.seed, backend, cfg.beside_seconds)
    records, placements = [], {}
    failures: list[str] = []  # when no placer places, the first failure is the run's one-line error
    for name, placer in tqdm(placers, desc="placers", unit="placer", leave=False, disable=None):  # a bar on a terminal
        start = time.perf_counter()
        try:
            run = run_placer(name, placer, graph, cluster, backend)
        except Exception as exc:  # noqa: BLE001 - one placer's failure must not cost the others
            error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            failures.append(f"{PROG}: placer {name} failed: {error}")
            records.append({"placer": name, "error": error, "placement_time": time.perf_counter() - start, **bounds})
        else:
            records.append({**run.record(graph), **bounds})
            placements[name] = run.placement
        if placements:  # once one placer has placed, failures are said as they come (above the bar)
            for line in failures:
                tqdm.write(line, file=sys.stderr)
            failures.clear()
        write_whole(out_dir / "results.json", lambda f: f.write(json.dumps(records, indent=1).encode()))  # keep what is done

    log.info(format_table(records, cluster))
    placed = [r for r in records if "error" not in r]
    if not placed:
        first = records[0]
        more = f"; {len(records) - 1} more in {out_dir / 'results.json'}" if len(records) > 1 else ""
        raise PlacementError(f"every placer failed: {first['placer']}: {first['error']}{more}")
    best = min(placed, key=lambda r: (r["oom"], r["step_time"]))
    placements[best["placer"]].save(out_dir / "best_placement.json", graph, cluster)
    if cfg.plots:
        trace = simulate(graph, cluster, placements[best["placer"]], trace=True).schedule
        plot_schedule(graph, cluster, trace, out_dir / "schedule.png",
                      title=f"{graph.name}: simulated schedule of {best['placer']} "
                            f"({best['step_time'] * 1e3:.3f} ms)")
        plot_memory(placed, cluster, out_dir / "memory.png")
        if any("curve" in r for r in placed):
            plot_curves(placed, bounds["communication_bound"], out_dir / "curves.png",
                        title=f"{graph.name}: best step time against placements evaluated")
    if best["oom"]:
        log.warning(f"nothing fits: every placement runs out of memory on {cluster.name or 'this cluster'}; "
                    f"best_placement.json is {best['placer']}'s, the fastest of them; results in {out_dir}")
    else:
        log.info(f"best: {best['placer']}; results in {out_dir}")
    return records


def defaults_that_finish(names: list[str], cfg: DictConfig, backend) -> list[str]:
    """The default placer list without the search placers when the backend measures each placement
    and nothing verifies on the simulator (``verify_top_k``): their 2,000 evaluations would be
    2,000 real training steps (an hour and more on TensorFlow). Named in ``placers=``, they run."""
    if backend.simulated or cfg.get("verify_top_k") is not None or names != COMPARE_PLACERS:
        return names
    searches = [n for n in names if n in SEARCH_PLACERS]
    log.warning(f"{', '.join(searches)} left out of the default placers: on backend={cfg.backend.name} each of "
                "its evaluations is a measured step; name it in placers= to run it, or set verify_top_k=K to "
                "search on the simulator and measure its K best")
    return [n for n in names if n not in SEARCH_PLACERS]


def best_step_time(records: list[dict]) -> float:
    """The app's objective: the lowest step time (s) of a placement that fits, inf if none does."""
    return min((r["step_time"] for r in records if "error" not in r and not r["oom"]), default=math.inf)


def placer_names(value) -> list[str]:
    """``placers`` as a list of names. One bare name (``placers=single``, which Hydra reads as a
    string) is the list of that one placer: what a user who types it means."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, ListConfig)) or not names or not all(
            isinstance(n, str) and n for n in names):
        raise ConfigError(f"placers must be a non-empty list of placer names, e.g. placers=[single,heft], "
                          f"got {value!r} (known: {', '.join(available_placers())}, or agent:checkpoint.pt)")
    return list(names)


def _placer(name: str, seed: int, options: dict, backend):
    """A registered placer (a search placer evaluates its candidates on ``backend``), or
    ``agent:checkpoint`` for a policy trained with rlplace-train."""
    if ":" in name:
        from rlplace.learn.placer import PolicyPlacer

        return PolicyPlacer.from_spec(name)
    return make_placer(name, **{"seed": seed, "backend": backend, **options})  # placer_options.<name>.seed wins


@hydra.main(version_base="1.3", config_path="pkg://rlplace.conf", config_name="compare")
def _hydra_main(cfg: DictConfig) -> float:
    with user_errors(PROG):
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        refuse_to_overwrite(out_dir, "results.json")
        return best_step_time(compare(cfg, out_dir))


def main() -> None:
    run_app(_hydra_main, PROG)


if __name__ == "__main__":
    main()
