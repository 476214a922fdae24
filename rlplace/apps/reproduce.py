"""rlplace-reproduce: reproduce one table of one of the four papers and write it beside the
paper's numbers, with the claims' verdicts.

    rlplace-reproduce table=baechi_table3                 # full mode, paper sizes
    rlplace-reproduce table=baechi_table3 mode=smoke      # tiny graphs, seconds
    rlplace-reproduce table=hp_table1 budget=200          # learned tables: placements per run
    rlplace-reproduce table=mars_table1 budget_seconds=240    # ... or seconds of training, whichever first
    rlplace-reproduce table=mars_table2 +table.agent_overrides.mars.policy.placer_hidden=128
    rlplace-reproduce table=mars_table2 hydra.run.dir=<old run>   # continue it: finished runs read back
    rlplace-reproduce table=celeritas_table3 record=true  # also copy to experiments/results/tables/
    rlplace-reproduce table=baechi_table3 why_only=true   # recorded run: refresh its `why` notes (why.yaml beside it)

Tables are configs in ``rlplace/conf/table/``; their code lives in ``rlplace/apps/tables/`` (one module per
paper), installed with rlplace. Writes ``<table>.md``, ``results.json`` and the figures into the
Hydra run directory; ``record`` and ``why_only`` work on the recorded runs under
``experiments/results/tables/`` and so need a source checkout. Progress: a bar per table row and
per learned run on stderr, when it is a terminal.

The ``@hydra.main`` function returns the number of the table's claims that hold (``why_only``: in
the recorded run), the objective a Hydra sweeper such as Optuna maximizes (``hydra/sweeper=optuna
hydra.sweeper.direction=maximize``).
"""

from __future__ import annotations

import json
import logging
import shutil
from importlib import import_module
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import rlplace
from rlplace.apps.common import run_app, user_errors
from rlplace.errors import ConfigError
from rlplace.extras import missing_extra
from rlplace.options import check_ranges
from rlplace.apps.tables.common import Context, TableOutput, update_why

PROG = "rlplace-reproduce"
log = logging.getLogger(__name__)
MODES = ("full", "smoke")


def recorded_dir(name: str, option: str) -> Path:
    """``experiments/results/tables/<name>`` of the source checkout rlplace runs from (``option``,
    record or why_only, needs one)."""
    root = Path(rlplace.__file__).resolve().parents[1]
    if not (root / "experiments" / "results").is_dir():
        raise ConfigError(f"{option}: needs a source checkout (no experiments/results beside {root / 'rlplace'})")
    return root / "experiments" / "results" / "tables" / name


def table_config(cfg: DictConfig) -> dict:
    """The table config as a dict, with its ``smoke`` section merged in when mode=smoke."""
    if cfg.mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    table = OmegaConf.create(OmegaConf.to_container(cfg.table, resolve=True))
    smoke = table.pop("smoke", None)
    if cfg.mode == "smoke" and smoke is not None:
        table = OmegaConf.merge(table, smoke)
    table = OmegaConf.to_container(table)
    for key in ("name", "run", "title"):
        if key not in table:
            raise ConfigError(f"table.{key} is missing")
    return with_agent_overrides(table)


def with_agent_overrides(table: dict) -> dict:
    """``table.agent_overrides.<agent name>`` merged into every learned column of that agent
    (``table.agent`` and ``table.agents.*``), e.g. ``+table.agent_overrides.mars.policy.placer_hidden=128``."""
    overrides = table.get("agent_overrides") or {}
    unknown = set(overrides) - {a["name"] for a in [table.get("agent", {}), *table.get("agents", {}).values()] if a}
    if unknown:
        raise ConfigError(f"table.agent_overrides: no learned column of agent {', '.join(sorted(unknown))} in {table['name']}")

    def merged(agent: dict) -> dict:
        return OmegaConf.to_container(OmegaConf.merge(agent, overrides.get(agent["name"], {})))

    if table.get("agent"):
        table["agent"] = merged(table["agent"])
    if table.get("agents"):
        table["agents"] = {label: merged(agent) for label, agent in table["agents"].items()}
    return table


def reproduce(cfg: DictConfig, out_dir: Path) -> TableOutput | None:
    """Run the table (None with ``why_only``, which rewrites the recorded run's notes)."""
    check_ranges(cfg)
    table = table_config(cfg)
    if cfg.why_only:
        recorded = recorded_dir(table["name"], "why_only")
        if not (recorded / "results.json").is_file():
            raise ConfigError(f"why_only: no recorded run in {recorded}")
        log.info(update_why(recorded, table["name"]))
        return None
    dest = recorded_dir(table["name"], "record") if cfg.record else None  # before any work
    module, _, func = table["run"].partition(":")
    try:
        fn = getattr(import_module(module), func)
    except (ImportError, AttributeError) as exc:
        if isinstance(exc, ModuleNotFoundError) and (missing := missing_extra(exc, f"table {table['name']}")):
            raise missing from None
        raise ConfigError(f"table.run: cannot load {table['run']!r} ({exc})") from None
    ctx = Context(mode=cfg.mode, seed=cfg.seed, out_dir=out_dir, budget=cfg.budget,
                  budget_seconds=cfg.budget_seconds, plots=cfg.plots, beside_seconds=cfg.beside_seconds)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = fn(table, ctx)
    output.write(out_dir)
    log.info(output.markdown())
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        for name in [f"{table['name']}.md", "results.json", *output.figures]:
            shutil.copy(out_dir / name, dest / name)
        update_why(dest, table["name"])
        log.info(f"recorded in {dest}")
    log.info(f"results in {out_dir}")
    return output


def claims_holding(results: Path) -> float:
    """The number of claims that hold in a table's ``results.json``: the app's objective."""
    return float(sum(claim["holds"] is True for claim in json.loads(results.read_text())["claims"]))


@hydra.main(version_base="1.3", config_path="pkg://rlplace.conf", config_name="reproduce")
def _hydra_main(cfg: DictConfig) -> float:
    with user_errors(PROG):
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        if reproduce(cfg, out_dir) is None:
            out_dir = recorded_dir(cfg.table.name, "why_only")
        return claims_holding(out_dir / "results.json")


def main() -> None:
    run_app(_hydra_main, PROG)


if __name__ == "__main__":
    main()
