"""The READMEs' quoted numbers, written from the recorded results so that they cannot go stale.

    .venv/bin/python experiments/readme_numbers.py            # rewrite the generated spans
    .venv/bin/python experiments/readme_numbers.py --check    # exit 1 if a README is not what they give

The READMEs are README.md, experiments/README.md and every page under docs/ (``docs/*.md``, sorted;
``--readme`` names others): a span moves with its section from README.md to a docs page.

A generated span is everything between ``<!-- generated: NAME -->`` and ``<!-- /generated -->``
(each on a line of its own); NAME is one of ``GENERATORS``:

- ``make_run``: the table ``make run`` prints, from experiments/results/make_run.json
  (recorded by experiments/record_make_run.py);
- ``install``: what the core install costs, from experiments/results/install.json
  (experiments/bench_install.py);
- ``command_times``: each command of README.md and the docs pages with the document it is in and
  its recorded time, from experiments/results/readme_commands.json (experiments/readme_commands.py,
  whose ``DOCUMENTS`` give the documents);
- ``search``: the search placers on the GNMT profile, medians over seeds at 2,000 evaluations,
  from experiments/results/bench_search.json (experiments/bench_search.py);
- ``fidelity``: the calibrated simulator's held-out fidelity and the noise ceiling, from
  experiments/results/fidelity.json (experiments/fidelity.py);
- ``sb3``: SB3 PPO and MaskablePPO's greedy policies against random and m-ETF, from
  experiments/results/sb3_ppo.json (experiments/sb3_ppo.py);
- ``equal_evaluations``: each learned placer's gain over the local search at 500 and 2,000
  evaluations and its verdict, per graph and start, from experiments/results/equal_evaluations.json
  (experiments/equal_evaluations.py, whose verdicts it uses; the ``learned`` placer's cells from
  experiments/results/learned_equal_evaluations.json); ``learned_vs_search``: the cells
  that meet their target, in a sentence, from the same json;
- ``exact_reference``: the exact placer's proofs and gaps and m-ETF's and the local search's ratio to
  the best known placement, from experiments/results/exact_reference.json
  (experiments/exact_reference.py);
- ``learned_listsched``: the pretrained ``learned`` placer on the held-out test family, from
  experiments/results/learned_listsched.json (experiments/learned_listsched.py);
  ``learned_equal_evaluations``: its gain over a local search at 500 and 2,000 evaluations on
  ``equal_evaluations.py``'s graphs, beside its zero-weight control, from
  experiments/results/learned_equal_evaluations.json (experiments/learned_equal_evaluations.py);
- ``learned_baechi_gnmt``, ``learned_gnmt4_p100``: the learned runs of experiments/learned_targets.py
  on one setting against the best heuristic and the local search beside each run, from
  experiments/results/learned/<setting>/learned_targets.json.
"""

from __future__ import annotations

import json
import re
import sys
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # experiments.* (equal_evaluations' verdicts)

from rlplace.errors import ArgumentParser, run_script  # noqa: E402
from rlplace.cluster import Cluster, CommModel, Device  # noqa: E402
from rlplace.report import format_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", ROOT / "experiments" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"(?P<open><!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<close><!-- /generated -->)", re.S)


def make_run(results: Path) -> str:
    recorded = json.loads((results / "make_run.json").read_text())
    c = recorded["cluster"]
    cluster = Cluster(tuple(Device(**d) for d in c["devices"]), CommModel(**c["comm"]), c["name"])
    return f"```\n{format_table(recorded['results'], cluster)}\n```\n"


def install(results: Path) -> str:
    recorded = json.loads((results / "install.json").read_text())
    core, full, runs = recorded["core"], recorded["make_test_env"], recorded["core"]["compare_200_ops_seconds"]
    return (f"The core installs in {core['seconds']:.0f} s ({recorded['pip_cache']} pip cache) and takes "
            f"{core['bytes'] / 2**20:,.0f} MiB ({core['distributions']} distributions), against "
            f"{full['bytes'] / 2**30:.1f} GiB ({full['distributions']}) for `make test`'s environment. Its first "
            f"`rlplace-compare` on a 200-op graph takes {runs['first']:.0f} s, most of it numba compiling the "
            f"simulator's and placers' kernels into its cache; later runs {runs['again']:.1f} s "
            f"(`experiments/bench_install.py`).\n")


def command_times(results: Path) -> str:
    recorded = json.loads((results / "readme_commands.json").read_text())

    def took(r: dict) -> str:
        if r["status"] is None:
            return f"did not finish in {r['seconds'] / 60:.0f} min"
        text = f"{r['seconds']:.0f} s" if r["seconds"] < 90 else f"{r['seconds'] / 60:.0f} min"
        return text if r["status"] == 0 else f"{text}, exit status {r['status']}"

    from experiments.readme_commands import commands_by_document

    where = {}
    for document, command in commands_by_document(ROOT):
        where.setdefault(command, f"`{document}`")
    rows = [f"| `{r['command'].removeprefix('.venv/bin/')}` | {where.get(r['command'], '(in no document)')} | {took(r)} |"
            for r in recorded["commands"]]
    return "\n".join([f"| command | document | time ({recorded['machine']}) |", "|---|---|---|", *rows]) + "\n"


def search(results: Path, key: str = "gnmt_profile_mars_p100", budget: int = 2000) -> str:
    bench = json.loads((results / "bench_search.json").read_text())
    runs = next(g for g in bench["graphs"] if g["key"] == key)["runs"]

    def median_ms(start: str, placer: str) -> str:
        times = [r["step_time"] for r in runs if (r["start"], r["placer"], r["budget"]) == (start, placer, budget)]
        return f"{np.median(times) * 1e3:.1f}"

    return (f"On the GNMT profile (mars_p100), {budget:,} evaluations from `single` reach "
            f"{median_ms('single', 'local_search')} ms (local search)\nand {median_ms('single', 'annealing')} ms "
            f"(annealing), from METIS {median_ms('metis', 'local_search')} / {median_ms('metis', 'annealing')} ms, "
            f"medians of {len(bench['seeds'])} seeds\n(`experiments/results/bench_search.md`).\n")


def fidelity(results: Path) -> str:
    recorded = json.loads((results / "fidelity.json").read_text())
    lines = ["| model | placements (fit / held out) | held-out Spearman, before → calibrated | Kendall τ | "
             "median relative error, before → calibrated | noise ceiling (held out) |", "|---|---|---|---|---|---|"]
    for r in recorded["results"]:
        b, a, ceiling = r["held_out_before"], r["held_out_after"], r["noise_ceiling"]["held_out"]
        lines.append(f"| {r['model']} | {r['placements']} ({r['fit_on']} / {r['held_out']}) | {b['spearman']:.2f} → "
                     f"**{a['spearman']:.2f}** | {a['kendall_tau']:.2f} | {b['median_relative_error']:.0%} → "
                     f"{a['median_relative_error']:.0%} | {ceiling['ceiling']:.2f} |")
    return "\n".join(lines) + "\n"


def sb3(results: Path) -> str:
    recorded = json.loads((results / "sb3_ppo.json").read_text())

    def one(problem: dict) -> str:
        base, runs = problem["baselines"], problem["runs"]
        policies = " and ".join(f"{name} {run['final_greedy'] * 1e3:.1f} ms (best {run['best_greedy'] * 1e3:.1f})"
                                for name, run in runs.items())
        return (f"- {problem['num_ops']:,} ops, {problem['steps']:,} steps {problem['start']}: greedy policies after "
                f"training (best evaluated) "
                f"{policies}; random {base['random_mean'] * 1e3:.1f} ms (mean), m-ETF {base['m_etf'] * 1e3:.1f} ms")

    return "\n".join(one(p) for p in recorded["problems"]) + "\n\n(`experiments/results/sb3_ppo.md`)\n"


def equal_evaluation_rows(results: Path, retired: bool = True) -> tuple[list[dict], list[dict], tuple[int, ...]]:
    """``equal_evaluations.py``'s rows of every cell (the pretrained ``learned`` placer's from
    ``learned_equal_evaluations.json``), those with a verdict (a target and all 3 seeds), and
    the budgets; ``retired``: with the cells of variants since removed."""
    from experiments import equal_evaluations as E   # imports torch and Hydra: only for these spans

    summary = json.loads((results / "equal_evaluations.json").read_text())
    agents = list(E.AGENTS) + (list(E.RETIRED) if retired else [])
    rows = E.cell_rows(summary, list(E.GRAPHS), agents, list(E.STARTS), E.BUDGETS, (0, 1, 2))
    learned = results / "learned_equal_evaluations.json"   # the pretrained placer's cells
    if learned.is_file():
        rows += E.learned_rows(json.loads(learned.read_text()), summary, list(E.GRAPHS))
    judged = [r for r in rows if r.get("met") is not None]
    return rows, judged, tuple(E.BUDGETS)


def equal_evaluations(results: Path) -> str:
    rows, judged, budgets = equal_evaluation_rows(results)
    cells: dict[tuple[str, str, str], dict[int, dict]] = {}
    for row in rows:
        cells.setdefault((row["graph"], row["agent"], row["start"]), {})[row["budget"]] = row

    def shown(row: dict) -> str:
        if "learned" not in row:
            return "not run"
        verdict = "**met**" if row["met"] else row["verdict"].split(" (seeds from")[0]
        return f"{row['gain']} {verdict}"

    lines = [f"| graph | agent | start | {' | '.join(f'@{b:,}' for b in budgets)} |",
             "|---|---|---|" + "---|" * len(budgets)]
    lines += [f"| {g} | {a} | {s} | {' | '.join(shown(by[b]) for b in budgets)} |" for (g, a, s), by in cells.items()]
    met = sum(r["met"] for r in judged)
    return ("\n".join(lines) + f"\n\nMet in {met} of the {len(judged)} cells with a target and all 3 seeds "
            "(gain = 1 − median(learned) / median(search); `experiments/results/equal_evaluations.md`).\n")


def learned_vs_search(results: Path) -> str:
    _, judged, _ = equal_evaluation_rows(results, retired=False)   # the library's agents
    met = [r for r in judged if r["met"]]
    listed = "; ".join(f"{r['agent']} {r['start']} on {r['graph']} at {r['budget']:,} ({r['gain']})" for r in met)
    return (f"Against a local search from the same start with the same number of evaluated placements (simulator,\n"
            f"`mars_p100`, 3 seeds, medians), the learned placers meet issue 16's targets (warm: 3% faster at 500\n"
            f"and 2,000; cold: faster at 2,000) in {len(met)} of the {len(judged)} cells run: {listed}.\n")


def learned_targets(results: Path, setting: str) -> str:
    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.2f}"

    def bold(seconds: float, faster: bool) -> str:
        return f"**{ms(seconds)}**" if faster else ms(seconds)

    recorded = json.loads((results / "learned" / setting / "learned_targets.json").read_text())
    heuristics = sorted(recorded["heuristics"].items(), key=lambda kv: (kv[1]["oom"], kv[1]["step_time"]))
    best = recorded["best_heuristic"]
    others = ", ".join(f"{name} {'OOM' if h['oom'] else ms(h['step_time'])}" for name, h in heuristics if name != best)
    lines = [f"Best algorithmic placer: **{best}** {ms(recorded['heuristics'][best]['step_time'])} ms ({others}). "
             f"Warm runs start from it (`warm_start.placer=best`). Lower bound {ms(recorded['communication_bound'])} ms "
             f"with communication, {ms(recorded['lower_bound'])} ms without (`rlplace.bounds`).", "",
             f"| run | placements | best (ms) | vs {best} | best of first 50 → best | local search, same start, "
             f"equal evaluations | local search, equal wall time (≤ {recorded['beside_seconds']:.0f} s) |",
             "|---|---|---|---|---|---|---|"]
    for run in recorded["runs"]:
        beside = {b["budget"]: b for b in run["beside"]}
        learned, searched = run["best_step_time"], beside["equal evaluations"]["step_time"]
        wall = beside["equal wall time"]
        first = ("—" if run.get("warm_start_placer") else
                 f"{run['best_of_first_50'] * 1e3:.1f} → {learned * 1e3:.1f} ({run['improvement_over_first_50']:.1%} better)")
        lines.append(f"| {run['run']} | {run['evaluated']:,} | {bold(learned, learned < searched)} | "
                     f"{run['vs_best_heuristic']:+.2%} | {first} | {bold(searched, searched < learned)} | "
                     f"{ms(wall['step_time'])} ({wall['search']['evaluations']:,} evaluations) |")
    return "\n".join(lines) + (f"\n\nvs: 1 − best / the heuristic's (positive: faster); bold: the faster of the learned "
                               f"run and the search at equal evaluations (`results/learned/{setting}/`).\n")


def learned_listsched(results: Path) -> str:
    recorded = json.loads((results / "learned_listsched.json").read_text())
    seeds, summary = recorded["seeds"], recorded["summary"]

    def spread(key: str, fmt: str = "{:.2f}") -> str:
        vals = [summary[seed][key] for seed in seeds]
        return f"{fmt.format(float(np.median(vals)))} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"

    slower = [summary[seed]["slower_than_single_where_it_fits"] for seed in seeds]
    oom = [f"{seed} on {g['graph']} ({g['cluster']})" for g in recorded["graphs"] for seed in seeds
           if g["seeds"][seed]["zero_shot"] == float("inf")]
    oom_note = f" (inf: out of memory where the heuristics fit: {', '.join(oom)})" if oom else ""
    return (f"- zero-shot, one placement: {spread('zero_shot_gmean', '{:.4f}')}x the best heuristic of each graph "
            f"(geometric mean; median over {len(seeds)} training seeds, range), at worst "
            f"{spread('zero_shot_max', '{:.4f}')}x; the greedy pass alone (without the hint beside it) "
            f"{spread('policy_gmean', '{:.4f}')}x; slower than `single` where `single` fits: {max(slower)} graphs "
            f"of {len(recorded['graphs'])}{oom_note}\n"
            f"- with 50 evaluations: {spread('tuned_over_search_gmean', '{:.4f}')}x a 50-evaluation local search "
            f"from the best heuristic (faster on {spread('tuned_faster', '{:.0f}')} of {len(recorded['graphs'])} "
            f"graphs, slower on {spread('tuned_slower', '{:.0f}')}), {spread('tuned_over_best_gmean', '{:.4f}')}x "
            f"the best heuristic; the same search with every weight 0 (its network-ranked moves drawn at random) "
            f"{spread('control_over_search_gmean', '{:.4f}')}x\n"
            f"- placement time at {recorded['timing']['ops']:,} ops: {recorded['timing']['median_seconds']:.2f} s "
            f"(this CPU; most of it the heuristics that give the hint)\n\n(`experiments/results/learned_listsched.md`)\n")


def learned_equal_evaluations(results: Path) -> str:
    recorded = json.loads((results / "learned_equal_evaluations.json").read_text())

    def gain(values: dict, search: dict) -> str:
        return f"{100 * (1 - float(np.median(list(values.values()))) / float(np.median(list(search.values())))):+.2f}%"

    cells = [f"{g['graph']} at {int(b):,}: {gain(c['learned'], c['local_search'])} "
             f"(weights 0: {gain(c['no_network'], c['local_search'])})"
             for g in recorded["graphs"] for b, c in g["budgets"].items()]
    met = sum(c["met"] for g in recorded["graphs"] for c in g["budgets"].values())
    return (f"At equal evaluations on `equal_evaluations.py`'s four graphs, against a local search of as many "
            f"from the same best heuristic (gain = 1 - median / median over {len(recorded['seeds'])} seeds; "
            f"target +3%, met in {met} of {len(cells)}): " + "; ".join(cells)
            + " (`experiments/results/learned_equal_evaluations.md`).\n")


def exact_reference(results: Path) -> str:
    runs = json.loads((results / "exact_reference.json").read_text())["runs"]
    small = [r for r in runs if r["ops"] <= 200]

    def median_gap(ops: int) -> str:
        return f"{100 * float(np.median([r['gap'] for r in runs if r['ops'] == ops])):.2f}%"

    def proved(link: str) -> str:
        at = [r for r in small if r["link"] == link]
        within = sum(r["gap"] <= 0.02 for r in at)
        return f"{sum(r['optimal'] for r in at)} of {len(at)} proved optimal, {within} within 2%"

    largest = max(r["ops"] for r in small if r["optimal"])
    wide = [r for r in runs if r["ops"] > 200]
    etf = [r["steps"]["m_etf"] / r["best_known"] for r in small]
    search = [r["steps"]["local_search"] / r["best_known"] for r in small]
    return (f"Within 60 s on 2 cores, on layered DAGs and training steps of 20-200 ops: with parallel links "
            f"{proved('parallel')}; with sequential links {proved('sequential')} (the model lets channels serve "
            f"in any order, so its bound is loose there). The largest graph proved optimal where the schedule "
            f"decides has {largest} ops; the gap, median over graphs and links, is {median_gap(200)} at 200 ops, "
            f"{median_gap(500)} at 500 and {median_gap(2000)} at 2,000 (layered DAGs {wide[0]['ops'] // 10}-"
            f"{wide[-1]['ops'] // 10} ops wide, where total compute / 4 binds and a balanced placement reaches it). "
            f"Up to 200 ops m-ETF is {float(np.median(etf)):.3f}x the best placement known (median; up to "
            f"{max(etf):.3f}x), a 2,000-evaluation local search {float(np.median(search)):.3f}x "
            f"(`experiments/results/exact_reference.md`).\n")


GENERATORS: dict[str, Callable[[Path], str]] = {"make_run": make_run, "install": install, "command_times": command_times, "learned_listsched": learned_listsched,
                                               "learned_equal_evaluations": learned_equal_evaluations, "search": search, "fidelity": fidelity,
                                               "exact_reference": exact_reference,
                                               "sb3": sb3, "equal_evaluations": equal_evaluations,
                                               "learned_vs_search": learned_vs_search,
                                               "learned_baechi_gnmt": partial(learned_targets, setting="baechi_gnmt"),
                                               "learned_gnmt4_p100": partial(learned_targets, setting="gnmt4_p100")}


def render(text: str, results: Path) -> str:
    """``text`` with every generated span rewritten; an unknown span name is an error."""
    def one(match: re.Match) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise SystemExit(f"readme_numbers: unknown generated span {name!r} (known: {', '.join(GENERATORS)})")
        return match["open"] + GENERATORS[name](results) + match["close"]

    return SPAN.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a README differs from the results")
    parser.add_argument("--readme", type=Path, nargs="+", default=READMES)
    parser.add_argument("--results", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args(argv)
    stale = []
    for readme in args.readme:
        text = readme.read_text()
        new = render(text, args.results)
        if args.check:
            stale += [readme] if new != text else []
        else:
            readme.write_text(new)
    for readme in stale:
        print(f"{readme} differs from what {args.results} gives: run experiments/readme_numbers.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    run_script(main)
