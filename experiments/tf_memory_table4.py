"""Baechi Table 4 (insufficient memory, §5.4) under both memory models (issue 19, item 3):
``rlplace-reproduce table=baechi_table4`` with the cluster's ``memory_model`` ``default`` and
``tf_reuse`` (TensorFlow's shared buffers, ``rlplace.schedule.aliases``), side by side: step
time, OOM and the largest device's peak for every model, placer and memory fraction.

    .venv/bin/python experiments/tf_memory_table4.py [--runs DIR] [--reuse]

Both runs go in parallel, each in its own process (~15-20 min on this machine);
``--reuse`` reads runs already in ``--runs``. Writes
experiments/results/tf_memory_table4.{json,md}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rlplace.errors import ArgumentParser, run_script

RESULTS = Path(__file__).parent / "results"
MODELS = ("default", "tf_reuse")
GIB = 2**30


def run_tables(runs: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-m", "rlplace.apps.reproduce", "table=baechi_table4",
                               f"+table.cluster_options.memory_model={mm}", f"hydra.run.dir={runs / mm}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for mm in MODELS]
    for mm, p in zip(MODELS, procs):
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"rlplace-reproduce with memory_model={mm} failed:\n{err[-2000:]}")


def cell(r: dict) -> str:
    peak = max(r["peak_memory"]) / GIB
    return ("OOM" if r["oom"] else f"{r['step_time']:.4f} s") + f", {peak:.2f} GiB"


def report(tables: dict, rows: list[dict]) -> str:
    lines = ["# Baechi Table 4 under both memory models", "",
             f"`experiments/tf_memory_table4.py`, {time.strftime('%Y-%m-%d')}: `rlplace-reproduce "
             "table=baechi_table4` with `+table.cluster_options.memory_model=default` and `=tf_reuse` "
             "(baechi_2080, 4 devices; every placement judged by the simulator with that memory model). "
             "Cells: step time or OOM, and the largest device's peak.", "",
             "| model | placer | memory | default | tf_reuse |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['placer']} | {r['memory']:.0%} | {cell(r['default'])} | {cell(r['tf_reuse'])} |")
    lines += ["", "## Claims", ""]
    for mm in MODELS:
        for c in tables[mm]["claims"]:
            verdict = {True: "holds", False: "does not hold"}.get(c["holds"], "not checked")
            lines.append(f"- {mm}: **{verdict}** — {c['claim']}: {c['numbers']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("/tmp/tf_memory_table4"))
    parser.add_argument("--reuse", action="store_true", help="read the runs already in --runs")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    start = time.perf_counter()
    if not args.reuse:
        run_tables(args.runs)
    tables = {mm: json.loads((args.runs / mm / "results.json").read_text()) for mm in MODELS}
    keyed = {mm: {(r["model"], r["placer"], r["memory"]): r for r in tables[mm]["records"]} for mm in MODELS}
    rows = [{"model": m, "placer": p, "memory": f, **{mm: keyed[mm][m, p, f] for mm in MODELS}}
            for (m, p, f) in keyed["default"]]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "tf_memory_table4.json").write_text(json.dumps(
        {"rows": rows, "claims": {mm: tables[mm]["claims"] for mm in MODELS},
         "seconds": time.perf_counter() - start}, indent=1))
    (args.output / "tf_memory_table4.md").write_text(report(tables, rows))


if __name__ == "__main__":
    run_script(main)
