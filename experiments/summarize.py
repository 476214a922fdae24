"""Gather a Hydra multirun directory of ``rlplace-compare`` or ``rlplace-train`` runs into one
table: runs that differ only in ``seed`` are one row, with mean ± std over the seeds.

    .venv/bin/python experiments/summarize.py multirun/2026-11-22/10-00-00 [--out summary.md]

Each job directory holds ``.hydra/overrides.yaml`` and ``results.json`` (a list of per-placer
records from rlplace-compare, or rlplace-train's summary). Writes ``summary.md`` and
``summary.json`` into the multirun directory and prints the table.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import yaml

from rlplace.errors import ArgumentParser, run_script

IGNORED = ("seed", "hydra.", "plots", "progress")


def jobs(root: Path) -> list[tuple[dict[str, str], object]]:
    """(overrides, results) of every finished job under ``root``."""
    found = []
    for overrides in sorted(root.rglob(".hydra/overrides.yaml")):
        job = overrides.parent.parent
        results = job / "results.json"
        if results.is_file():
            pairs = dict(o.split("=", 1) for o in yaml.safe_load(overrides.read_text()) or [] if "=" in o)
            found.append((pairs, json.loads(results.read_text())))
    return found


def rows_of(overrides: dict[str, str], results) -> list[dict]:
    """One row per placer (rlplace-compare) or one for the trained agent (rlplace-train)."""
    setting = {k: v for k, v in overrides.items() if not k.lstrip("+~").startswith(IGNORED)}
    seed = overrides.get("seed", "0")
    if isinstance(results, list):
        return [{"setting": setting, "seed": seed, "placer": r["placer"], "step_time": r["step_time"],
                 "oom": r["oom"], "placement_time": r.get("placement_time")} for r in results]
    final = results.get("final_evaluation") or {}
    return [{"setting": setting, "seed": seed, "placer": setting.get("agent", "agent"),
             "step_time": final.get("step_time", math.inf), "oom": final.get("oom", True),
             "placement_time": results.get("seconds"), "evaluated": results.get("evaluated")}]


def summarize(root: Path) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for overrides, results in jobs(root):
        for row in rows_of(overrides, results):
            key = (json.dumps(row["setting"], sort_keys=True), row["placer"])
            groups.setdefault(key, []).append(row)
    out = []
    for (setting, placer), rows in groups.items():
        times = np.array([r["step_time"] for r in rows if not r["oom"]], dtype=float)
        placing = np.array([r["placement_time"] for r in rows if r.get("placement_time") is not None], dtype=float)
        out.append({"setting": json.loads(setting), "placer": placer, "seeds": sorted(r["seed"] for r in rows),
                    "runs": len(rows), "oom_runs": sum(r["oom"] for r in rows),
                    "step_time_mean": float(times.mean()) if len(times) else None,
                    "step_time_std": float(times.std(ddof=1)) if len(times) > 1 else 0.0 if len(times) else None,
                    "placement_time_mean": float(placing.mean()) if len(placing) else None})
    return out


def markdown(summary: list[dict]) -> str:
    lines = ["| setting | placer | runs (seeds) | step time (ms), mean ± std | OOM runs | placement / training time (s) |",
             "|---|---|---|---:|---:|---:|"]
    for s in summary:
        setting = ", ".join(f"{k}={v}" for k, v in s["setting"].items()) or "-"
        step = (f"{s['step_time_mean'] * 1e3:.3f} ± {s['step_time_std'] * 1e3:.3f}"
                if s["step_time_mean"] is not None else "all OOM")
        placing = f"{s['placement_time_mean']:.3g}" if s["placement_time_mean"] is not None else "-"
        lines.append(f"| {setting} | {s['placer']} | {s['runs']} ({','.join(s['seeds'])}) | {step} | "
                     f"{s['oom_runs']} | {placing} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("multirun_dir", type=Path)
    args = parser.parse_args(argv)
    if not args.multirun_dir.is_dir():
        parser.error(f"{args.multirun_dir} is not a directory")
    summary = summarize(args.multirun_dir)
    if not summary:
        parser.error(f"no finished runs (results.json beside .hydra/overrides.yaml) under {args.multirun_dir}")
    text = markdown(summary)
    (args.multirun_dir / "summary.md").write_text(text)
    (args.multirun_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    run_script(main)
