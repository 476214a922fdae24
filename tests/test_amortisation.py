"""experiments/amortisation.py at a tiny budget: the table's structure, the cell cache, cells not
run for time, and the verdicts."""

import json
from dataclasses import replace

import pytest

from experiments import amortisation as A


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out, work = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("work")
    return out, work, A.run(A.SMOKE, out, work, max_minutes=None)


def test_every_cell_is_computed_and_tabled(smoke):
    out, _, record = smoke
    setup, cells = A.SMOKE, record["cells"]
    assert set(cells) == {"reference/T28w4", *(f"family/s{s}" for s in setup.seeds),
                          *(f"{kind}/T28w4/s{s}" for s in setup.seeds for kind in ("target", "direct", "warm"))}
    ref = cells["reference/T28w4"]
    assert ref["lower_bound"] <= ref["best_heuristic_step_time"] <= ref["single"]
    for seed in setup.seeds:
        family = cells[f"family/s{seed}"]
        assert set(family["graphs"]) == set(setup.family) and family["evaluated"] >= setup.family_budget
        target = cells[f"target/T28w4/s{seed}"]
        assert target["fine_tune_evaluations"] == setup.finetune and target["search_evaluations"] == setup.search
        assert target["local_search"] <= ref["best_heuristic_step_time"]
        direct = cells[f"direct/T28w4/s{seed}"]
        learned = (target["zero_shot"], target["fine_tuned"], direct["direct"], direct["untrained_greedy"])
        warm = cells[f"warm/T28w4/s{seed}"]
        assert min(learned) >= ref["lower_bound"]
        assert warm["fine_tuned_warm"] <= ref["best_heuristic_step_time"] >= warm["direct_warm"]   # its first sample
    assert json.loads((out / "amortisation.json").read_text()) == json.loads(json.dumps(record))
    row = next(line for line in (out / "amortisation.md").read_text().splitlines() if line.startswith("| `T28w4`"))
    assert row.count("|") == 16 and row.count("met (") == 3 and A.NOT_RUN not in row


def test_a_rerun_computes_nothing_and_a_deadline_marks_cells_not_run(smoke, monkeypatch, tmp_path):
    out, work, record = smoke
    for name in ("family_cell", "target_cell", "reference_cell", "direct_cell", "warm_cell"):
        monkeypatch.setattr(A, name, lambda *a, **k: pytest.fail("a cached cell was computed again"))
    assert A.run(A.SMOKE, out, work, max_minutes=None) == json.loads(json.dumps(record))
    late = A.run(A.SMOKE, tmp_path, work, max_minutes=0)
    assert set(late["cells"].values()) == {A.NOT_RUN}
    assert "Not run (time): direct/T28w4/s0, direct/T28w4/s1, family/s0" in (tmp_path / "amortisation.md").read_text()
    other = replace(A.SMOKE, search=A.SMOKE.search + 1)   # another setup: the json is not reused
    assert set(A.run(other, out, work, max_minutes=0)["cells"].values()) == {A.NOT_RUN}


@pytest.mark.parametrize("zero, tuned, search, met", [
    (1.05, 0.9, 1.0, (True, True)), (1.06, 0.9, 1.0, (False, True)), (1.0, 1.0, 1.0, (True, False))])
def test_verdicts_take_the_medians(zero, tuned, search, met):
    runs = [{"zero_shot": zero * f, "fine_tuned": tuned * f, "local_search": search * f} for f in (0.5, 1.0, 9.0)]
    record = {"setup": {"seeds": [0, 1, 2]},
              "cells": {"reference/g": {"best_heuristic_step_time": 1.0},
                        **{f"target/g/s{s}": r for s, r in enumerate(runs)}}}
    v = A.verdicts(record, "g")
    assert (v["zero_shot_met"], v["fine_tune_met"]) == met


def test_merge_joins_runs_of_other_seeds_and_refuses_other_setups(smoke):
    _, _, record = smoke
    halves = [{"setup": {**record["setup"], "seeds": [s]},
               "cells": {k: c for k, c in record["cells"].items() if not k.endswith(f"/s{1 - s}")}} for s in (0, 1)]
    assert A.merge(halves) == json.loads(json.dumps(record))
    with pytest.raises(ValueError, match="more than their seeds"):
        A.merge([halves[0], {**halves[1], "setup": {**halves[1]["setup"], "search": 99}}])
    clash = {**halves[1], "cells": {**halves[1]["cells"], "reference/T28w4": {"single": 0.0}}}
    with pytest.raises(ValueError, match="reference/T28w4 differs"):
        A.merge([halves[0], clash])
