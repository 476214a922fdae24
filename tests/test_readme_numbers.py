"""The READMEs' generated spans (README.md, experiments/README.md and the pages under docs/) are
what the recorded results give (experiments/readme_numbers.py in check mode), and the check catches
a number edited by hand."""

import json
import re
import subprocess
import sys

import pytest

from experiments.readme_numbers import GENERATORS, READMES, ROOT, main, render

README = ROOT / "README.md"
RESULTS = ROOT / "experiments" / "results"


def test_readme_is_what_the_recorded_results_give():
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "readme_numbers.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_readme_has_every_generated_span():
    text = "".join(r.read_text() for r in READMES)
    for name in GENERATORS:
        assert f"<!-- generated: {name} -->" in text, name
    search = next(r for r in json.loads((RESULTS / "make_run.json").read_text())["results"]
                  if r["placer"] == "local_search")
    assert re.search(rf"\nlocal_search +{search['step_time'] * 1e3:.3f} ", text)  # the make run table, from make_run.json


def test_every_readme_command_has_a_recorded_time():
    """README states how long each command of README.md and the docs pages takes
    (experiments/readme_commands.py); a command added or changed without running it again has no
    time."""
    from experiments.readme_commands import readme_commands

    recorded = [r["command"] for r in json.loads((RESULTS / "readme_commands.json").read_text())["commands"]]
    assert recorded == readme_commands()


def test_the_timed_documents_are_readme_and_every_docs_page():
    """A new page under docs/ is timed too: it is one of readme_commands' DOCUMENTS."""
    from experiments.readme_commands import DOCUMENTS

    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert DOCUMENTS[0] == "README.md" and set(DOCUMENTS[1:]) == pages and len(set(DOCUMENTS)) == len(DOCUMENTS)


def test_check_fails_on_a_hand_edited_number_and_rewriting_restores_it(tmp_path):
    readme = tmp_path / "README.md"
    good = README.read_text()
    readme.write_text(good.replace("1941.504", "1941.505", 1))
    assert main(["--check", "--readme", str(readme), "--results", str(RESULTS)]) == 1
    assert main(["--readme", str(readme), "--results", str(RESULTS)]) == 0
    assert readme.read_text() == good


def test_unknown_span_is_an_error():
    with pytest.raises(SystemExit, match="unknown generated span 'nope'"):
        render("<!-- generated: nope -->\nx\n<!-- /generated -->\n", RESULTS)


def test_the_equal_evaluations_verdicts_follow_the_json(tmp_path):
    """A learned run made 10x slower turns its cell's verdict from met to not met."""
    summary = json.loads((RESULTS / "equal_evaluations.json").read_text())
    span = "<!-- generated: equal_evaluations -->\n<!-- /generated -->\n"
    row = "| gnmt_profile | mars_sil | warm | "
    before = next(line for line in render(span, RESULTS).splitlines() if line.startswith(row))
    assert before.count("**met**") == 2, before
    for seed in summary["cells"]["gnmt_profile/mars_sil/warm"].values():
        seed["budgets"]["500"]["learned"] *= 10
    (tmp_path / "equal_evaluations.json").write_text(json.dumps(summary))
    after = next(line for line in render(span, tmp_path).splitlines() if line.startswith(row))
    assert after.split(" | ")[3].endswith("not met") and after.count("**met**") == 1, after


def test_the_learned_vs_search_sentence_lists_exactly_the_met_cells():
    from experiments.readme_numbers import equal_evaluation_rows, learned_vs_search

    _, judged, _ = equal_evaluation_rows(RESULTS, retired=False)
    sentence = learned_vs_search(RESULTS)
    met = [r for r in judged if r["verdict"].startswith("met")]
    assert f"in {len(met)} of the {len(judged)} cells run" in sentence
    for r in judged:
        cell = f"{r['agent']} {r['start']} on {r['graph']} at {r['budget']:,} ("
        assert (cell in sentence) == (r in met), cell


def test_the_learned_targets_table_follows_the_json(tmp_path):
    """Mars warm on the GNMT profile made slower than the search beside it loses its bold cell
    to the search's, and its gain over the best heuristic turns negative."""
    recorded = json.loads((RESULTS / "learned" / "baechi_gnmt" / "learned_targets.json").read_text())
    span = "<!-- generated: learned_baechi_gnmt -->\n<!-- /generated -->\n"

    def mars_warm(results):
        return next(line for line in render(span, results).splitlines() if line.startswith("| mars_warm |"))

    run = next(r for r in recorded["runs"] if r["run"] == "mars_warm")
    searched = next(b for b in run["beside"] if b["budget"] == "equal evaluations")["step_time"]
    assert run["best_step_time"] < searched
    cells = mars_warm(RESULTS).split(" | ")
    assert cells[2].startswith("**") and not cells[5].startswith("**") and cells[3].startswith("+")
    run["best_step_time"] = searched * 1.1
    run["vs_best_heuristic"] = 1 - run["best_step_time"] / recorded["heuristics"][recorded["best_heuristic"]]["step_time"]
    (tmp_path / "learned" / "baechi_gnmt").mkdir(parents=True)
    (tmp_path / "learned" / "baechi_gnmt" / "learned_targets.json").write_text(json.dumps(recorded))
    cells = mars_warm(tmp_path).split(" | ")
    assert not cells[2].startswith("**") and cells[5].startswith("**") and cells[3].startswith("-"), cells
