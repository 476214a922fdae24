"""Mars (ICPP'21) §3-4: Table 1 (placer architectures), Table 2 (vs expert, single GPU and the
other learned placers) and Table 3 (generalization by fine-tuning). Every learned column is an
``agent`` spec (``agent=<name>``, defaults in ``rlplace.learn.configs``, plus overrides)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rlplace.errors import ConfigError
from rlplace.apps.tables import claims as C
from rlplace.apps.tables.common import (Context, TableOutput, build_setting, cell, cluster_of, fmt_step,
                                   paper_value, plot_step_times, run_placers, setting_lines, settings)
from rlplace.apps.tables.learned import (beside_notes, beside_records, budget_words, lower_bounds, plot_curves,
                                        train_record)


def _budget(table: Mapping, ctx: Context) -> int:
    return int(ctx.budget or table["budget"])


def _evaluated_note(learned: list[dict]) -> str:
    return "Placements evaluated per run: " + "; ".join(f"{r['model']} {r['placer']} {r['evaluated']}" for r in learned) + "."


def _skipped(table: Mapping, sets) -> set[str]:
    """``table.skip``: "<model>:<column>" cells not trained (e.g. too large for this machine)."""
    skip = set(table.get("skip") or [])
    known = {f"{s.key}:{label}" for s in sets for label in table["agents"]}
    if skip - known:
        raise ConfigError(f"table.skip: no cell {', '.join(sorted(skip - known))} (give <model>:<column>)")
    return skip


def _learned(table: Mapping, ctx: Context, sets) -> list[dict]:
    """One training run per (setting, learned column), but the skipped cells."""
    skip = _skipped(table, sets)
    return [train_record(s, table["cluster"], agent, ctx, placer=label, budget=_budget(table, ctx))
            for label, agent in table["agents"].items() for s in sets if f"{s.key}:{label}" not in skip]


def _table(table: Mapping, ctx: Context, sets, heuristics: list[dict], learned: list[dict],
           claims, extra=()) -> TableOutput:
    columns = [*table.get("placers", []), *table["agents"]]
    records = heuristics + learned
    beside = beside_records(learned, ctx)
    rows = [[s.label, *(cell(fmt_step(C.find(records, s.key, p)), paper_value(table, s.key, p)) for p in columns)]
            for s in sets]
    labels = {s.key: s.label for s in sets}
    out = TableOutput(table["name"], table["title"],
                      setting_lines(table, sets, cluster_of(table), ctx,
                                    [f"learned: {budget_words(_budget(table, ctx), ctx)}", *extra,
                                     *([f"not trained (table.skip): {', '.join(table['skip'])}"] if table.get("skip") else [])]),
                      ["model", *columns], rows, records + beside, C.verdicts(claims, records),
                      ["Cells: ours (paper), seconds.", *([_evaluated_note(learned)] if learned else []),
                       *beside_notes(learned, beside, ctx)])
    if ctx.plots and records:
        plot_step_times(records, labels, ctx.out_dir / "step_times.png", table["title"], columns)
        out.figures.append("step_times.png")
        if learned:
            plot_curves(learned + beside, heuristics, labels, lower_bounds(table, sets), ctx.out_dir / "curves.png",
                        f"{table['title']}: training curves and the search beside them")
            out.figures.append("curves.png")
    return out


def table1(table: Mapping, ctx: Context) -> TableOutput:
    """Placer architectures behind the same graph encoder: seq2seq, Transformer-XL, segment-level seq2seq."""
    sets = settings(table)
    learned = _learned(table, ctx, sets)
    keys = [s.key for s in sets]
    skip = _skipped(table, sets)
    claims = [
        C.no_slower("segment_le_seq2seq", "the segment-level placer is no slower than seq2seq on every model "
                    "(every model trained)", [k for k in keys if f"{k}:seq2seq" not in skip], [("seq2seq (segment)", "seq2seq")]),
        C.no_slower("segment_le_trfxl_bert", "the segment-level placer is no slower than Transformer-XL on BERT "
                    "(paper: 9.821 vs 11.363 s)", [k for k in keys if k == "bert"], [("seq2seq (segment)", "trf-xl")]),
    ]
    return _table(table, ctx, sets, [], learned, claims)


def table2(table: Mapping, ctx: Context) -> TableOutput:
    """Best placements of expert, single GPU, grouper-placer, encoder-placer, Mars and Mars without pre-training."""
    sets = settings(table)
    heuristics = [r for s in sets for r in run_placers(s, cluster_of(table), table["placers"], table)]
    learned = _learned(table, ctx, sets)
    big = [s.key for s in sets if s.key in ("gnmt4", "bert")]
    claims = [
        C.no_slower("mars_le_rivals", "Mars is no slower than grouper-placer and encoder-placer on GNMT-4 and BERT",
                    big, [("mars", "grouper-placer"), ("mars", "encoder-placer")]),
        C.no_slower("pretraining_helps", "Mars is no slower than Mars without pre-training",
                    [s.key for s in sets], [("mars", "mars (no pre-training)")]),
        C.faster("learned_beat_expert_gnmt", "all learned placers beat the expert on GNMT-4 (paper: 13.4–17.0%)",
                 [k for k in big if k == "gnmt4"], [(p, "expert") for p in table["agents"]]),
    ]
    return _table(table, ctx, sets, heuristics, learned, claims)


def table3(table: Mapping, ctx: Context) -> TableOutput:
    """Generalization: train on a source workload, fine-tune ``finetune`` placements on the
    unseen one; against training directly on it with the same total number of placements."""
    if ctx.budget_seconds:
        raise ConfigError("mars_table3 compares runs of equal placement totals; give budget=N, not budget_seconds")
    sets = settings(table)
    device = table.get("cost", {}).get("device")
    agent = table["agent"]
    budget = _budget(table, ctx)
    finetune = min(int(table["finetune"]), budget)
    learned = []
    for s in sets:
        learned.append(train_record(s, table["cluster"], agent, ctx, placer="direct", budget=budget + finetune))
        for kind in ("similar", "different"):
            source = build_setting(s.spec[kind], device)
            src = train_record(source, table["cluster"], agent, ctx, placer=f"source for {s.key}", budget=budget,
                               run_name=f"{source.key}_source_s{ctx.seed}")  # one run serves every target
            tuned = train_record(s, table["cluster"], agent, ctx, placer=kind, budget=finetune,
                                 init_checkpoint=str(Path(src["run_dir"]) / "checkpoint.pt"), source=source.key)
            tuned["curve"] = [[x + src["evaluated"], y] for x, y in tuned["curve"]]  # totals, as the table compares
            learned.append(tuned)
    keys = [s.key for s in sets]
    claims = [
        C.no_slower("direct_best", "training directly is no slower than generalizing", keys,
                    [("direct", "similar"), ("direct", "different")]),
        C.no_slower("similar_le_different", "generalizing from a similar workload is no slower than from a different one",
                    keys, [("similar", "different")]),
    ]
    shown = dict(table, agents={"direct": agent, "similar": agent, "different": agent})
    return _table(shown, ctx, sets, [], learned, claims,
                  [f"generalized: {budget} placements on the source, then {finetune} on the target "
                   "(the curves count both; the search beside a generalized run counts the target's only)"])
