"""rlplace-reproduce: every table config in smoke mode, the claim checker on fabricated records,
and Hydra sweeps (a two-job joblib multirun gathered by experiments/summarize.py)."""

import dataclasses
import io
import json
import subprocess
import sys
from importlib.resources import files

import pytest
import yaml
from hydra import compose, initialize_config_module

from conftest import REPO

sys.path.insert(0, str(REPO))

from experiments import summarize  # noqa: E402
from rlplace.apps.tables import claims as C  # noqa: E402
from rlplace.apps.tables.baechi import _balance, _slowdown  # noqa: E402
from rlplace.apps.reproduce import reproduce, table_config  # noqa: E402
from rlplace.errors import ConfigError  # noqa: E402

TABLES = sorted(p.name.removesuffix(".yaml") for p in files("rlplace.conf").joinpath("table").iterdir()
                if p.name.endswith(".yaml"))


def rec(model, placer, step_time, oom=False, **extra):
    return {"model": model, "placer": placer, "step_time": step_time, "oom": oom, **extra}


# ----------------------------------------------------------------------------- claims
RECORDS = [rec("g", "single", 0.250), rec("g", "expert", 0.214), rec("g", "m_etf", 0.224),
           rec("g", "m_sct", 0.212), rec("g", "m_topo", 0.265), rec("g", "big", 1.0, oom=True),
           rec("h", "single", 0.1, oom=True), rec("h", "m_sct", 0.3)]


def test_faster_and_slower_follow_the_step_times():
    assert C.faster("a", "", ["g"], [("m_etf", "single"), ("m_sct", "single")]).verdict(RECORDS).holds is True
    assert C.faster("a", "", ["g"], [("m_etf", "single")], margin=0.2).verdict(RECORDS).holds is False  # 10.4% only
    assert C.faster("a", "", ["g"], [("m_etf", "expert")]).verdict(RECORDS).holds is False
    assert C.slower("a", "", ["g"], [("m_topo", "m_etf"), ("m_topo", "m_sct")]).verdict(RECORDS).holds is True
    assert C.slower("a", "", ["g"], [("m_etf", "m_topo")]).verdict(RECORDS).holds is False


def test_within_uses_a_two_sided_tolerance():
    v = C.within("a", "", ["g"], [("m_etf", "expert"), ("m_sct", "expert")], 0.07).verdict(RECORDS)
    assert v.holds is True and "+4.7%" in v.numbers and "-0.9%" in v.numbers
    assert C.within("a", "", ["g"], [("m_etf", "expert")], 0.04).verdict(RECORDS).holds is False
    assert C.within("a", "", ["g"], [("m_sct", "expert")], 0.04).verdict(RECORDS).holds is True


def test_an_oom_counts_as_infinitely_slow():
    assert C.faster("a", "", ["h"], [("m_sct", "single")]).verdict(RECORDS).holds is True
    assert C.faster("a", "", ["h"], [("single", "m_sct")]).verdict(RECORDS).holds is False
    assert C.no_slower("a", "", ["g"], [("big", "single")]).verdict(RECORDS).holds is False
    assert C.within("a", "", ["g"], [("big", "big")], 0.5).verdict(RECORDS).holds is False  # inf / inf


def test_oom_and_value_claims():
    assert C.oom("a", "", [("h", "single"), ("g", "big")]).verdict(RECORDS).holds is True
    assert C.oom("a", "", [("h", "single"), ("g", "single")]).verdict(RECORDS).holds is False
    assert C.oom("a", "", [("g", "m_sct"), ("h", "m_sct")], expected=False).verdict(RECORDS).holds is True
    v = C.value_between("a", "", [("g", "m_sct")], lambda r: r["step_time"], low=0.2, high=0.22).verdict(RECORDS)
    assert v.holds is True
    assert C.value_between("a", "", [("g", "m_topo")], lambda r: r["step_time"], high=0.22).verdict(RECORDS).holds is False


def test_missing_records_and_empty_settings_are_not_checked():
    assert C.faster("a", "", ["g"], [("hrl", "single")]).verdict(RECORDS).holds is None
    assert C.faster("a", "", [], [("m_sct", "single")]).verdict(RECORDS).holds is None
    assert C.oom("a", "", []).verdict(RECORDS).holds is None


def test_verdict_lines_carry_the_status_the_numbers_and_why():
    claim = C.faster("x", "m-ETF beats expert", ["g"], [("m_etf", "expert")])
    v = dataclasses.replace(claim.verdict(RECORDS), why="transfers dominate")
    assert v.line().startswith("- **does not hold** — m-ETF beats expert: g: m_etf 0.224 s vs expert 0.214 s")
    assert v.line().endswith("Why: transfers dominate")
    ok = dataclasses.replace(C.faster("y", "m-SCT beats expert", ["g"], [("m_sct", "expert")]).verdict(RECORDS),
                             why="unused")
    assert ok.line().startswith("- **holds**") and "Why" not in ok.line()


def test_baechi_table4_slowdown_and_fig9_balance_checks():
    records = [rec("i", "m_sct", 0.30, memory=0.3), rec("i", "m_sct", 0.27, memory=1.0),
               rec("g", "m_sct", 0.20, memory=0.3), rec("g", "m_sct", 0.20, memory=1.0)]
    assert _slowdown(["i", "g"], ["m_sct"], 0.3, 0.14)(records)[0] is True   # +11.1%, +0%
    assert _slowdown(["i", "g"], ["m_sct"], 0.3, 0.10)(records)[0] is False
    records[0]["oom"] = True
    assert _slowdown(["i"], ["m_sct"], 0.3, 0.14)(records)[0] is False
    balance = [rec("i", "m_sct", 1, peak_fraction=[0.9, 0.8, 0.05, 0.05]),
               rec("g", "m_sct", 1, peak_fraction=[0.5, 0.6, 0.5, 0.55])]
    assert _balance(["i"], ["g"])(balance)[0] is True
    assert _balance(["g"], ["i"])(balance)[0] is False


# ----------------------------------------------------------------------------- tables, smoke mode
@pytest.fixture(scope="module")
def graph_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("graphs")


@pytest.mark.slow
@pytest.mark.parametrize("table", TABLES)
def test_every_table_runs_in_smoke_mode(table, tmp_path, graph_cache, monkeypatch):
    monkeypatch.setenv("RLPLACE_CACHE", str(graph_cache))
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        cfg = compose("reproduce", overrides=[f"table={table}", "mode=smoke"])
    out = reproduce(cfg, tmp_path)
    text = (tmp_path / f"{table}.md").read_text()
    assert "## Claims" in text and "- mode: smoke" in text
    assert ("backend: sim" in text) == (table != "celeritas_table5")  # Table 5 profiles TensorFlow instead
    assert len(out.verdicts) >= 1
    for v in out.verdicts:
        assert v.line() in text
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["table"] == table and len(results["claims"]) == len(out.verdicts)
    for figure in out.figures:
        assert (tmp_path / figure).stat().st_size > 0
    learned = [r for r in results["records"] if "run_dir" in r]
    beside = [r for r in results["records"] if r.get("beside")]
    if table in ("hp_table2",):  # the search goes beside the learned grouping only
        learned = [r for r in learned if r["placer"] == "hierarchical"]
    assert len(beside) == 2 * len(learned)  # a local search at equal evaluations and at equal wall time
    for r in learned:
        evals = next(b for b in beside if b["beside"] == r["placer"] and b["model"] == r["model"]
                     and b["budget"] == "equal evaluations")
        assert evals["search"]["evaluations"] == r["evaluated"]
    assert ("Local search beside each learned run" in text) == bool(learned)


def test_learned_runs_are_read_back_when_finished_and_continued_when_the_budget_grows(tmp_path, monkeypatch):
    import rlplace.apps.train as train_app
    from rlplace.apps.tables import learned
    from rlplace.apps.tables.common import Context, Setting
    from rlplace.presets import load_preset

    setting = Setting("tiny", "tiny", load_preset("graph", "layered", num_ops=40, seed=1), "synthetic")
    agent = {"name": "hierarchical", "policy": {"num_groups": 4, "placer_hidden": 8, "grouper_hidden": 8}}
    ctx = Context(mode="smoke", seed=0, out_dir=tmp_path, plots=False)
    first = learned.train_record(setting, "baechi_2080", agent, ctx, "hp", budget=8)
    run_dir = tmp_path / "runs" / "tiny_hp_s0"
    steps_before = (run_dir / "metrics.csv").read_text()

    def no_training(cfg, out_dir):
        raise AssertionError("a finished run with the same config was trained again")

    monkeypatch.setattr(train_app, "train_from_config", no_training)
    again = learned.train_record(setting, "baechi_2080", agent, ctx, "hp", budget=8)
    assert again["step_time"] == first["step_time"] and again["evaluated"] == 8
    monkeypatch.undo()
    real_train, resumed = train_app.train_from_config, []
    monkeypatch.setattr(train_app, "train_from_config", lambda cfg, out: resumed.append(cfg.resume) or real_train(cfg, out))
    longer = learned.train_record(setting, "baechi_2080", agent, ctx, "hp", budget=16)
    assert resumed == [True] and longer["evaluated"] == 16 and longer["step_time"] <= first["step_time"]
    assert (run_dir / "metrics.csv").read_text().startswith(steps_before)
    assert [s for s, _ in longer["curve"]] == [4, 8, 12, 16]
    other = learned.train_record(setting, "baechi_2080", {**agent, "samples": 2}, ctx, "hp", budget=8)
    assert resumed == [True, False] and [s for s, _ in other["curve"]] == [2, 4, 6, 8]  # new config: afresh


def test_budget_seconds_ends_learned_runs_early_but_not_the_generalization_table(tmp_path):
    from rlplace.apps.tables import learned, mars
    from rlplace.apps.tables.common import Context, Setting
    from rlplace.presets import load_preset

    setting = Setting("tiny", "tiny", load_preset("graph", "layered", num_ops=40, seed=1), "synthetic")
    agent = {"name": "hierarchical", "policy": {"num_groups": 4, "placer_hidden": 8, "grouper_hidden": 8}}
    ctx = Context(mode="smoke", seed=0, out_dir=tmp_path, plots=False, budget_seconds=1e-9)
    record = learned.train_record(setting, "baechi_2080", agent, ctx, "hp", budget=400)
    assert record["evaluated"] == 4  # one update of 4 samples, then the seconds are spent
    assert "or 1e-09 s of training" in learned.budget_words(400, ctx)
    with pytest.raises(ConfigError, match="budget_seconds"):
        mars.table3({"agent": agent, "models": []}, ctx)


def test_smoke_mode_merges_the_smoke_section_and_bad_modes_are_config_errors():
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        full = table_config(compose("reproduce", overrides=["table=baechi_table3"]))
        smoke = table_config(compose("reproduce", overrides=["table=baechi_table3", "mode=smoke"]))
        bad = compose("reproduce", overrides=["table=baechi_table3", "mode=fast"])
    assert "smoke" not in full and len(full["models"]) == 7
    assert [m["knobs"]["batch_size"] for m in smoke["models"]] == [2, 4]
    assert smoke["paper"] == full["paper"]
    with pytest.raises(ConfigError, match="mode"):
        table_config(bad)


def test_agent_overrides_reach_every_learned_column_of_that_agent_only():
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        table = table_config(compose("reproduce", overrides=[
            "table=mars_table2", "+table.agent_overrides.mars.policy.placer_hidden=128"]))
        wrong = compose("reproduce", overrides=["table=mars_table1", "+table.agent_overrides.hierarchical.samples=2"])
    agents = table["agents"]
    assert [a["policy"]["placer_hidden"] for a in (agents["mars"], agents["mars (no pre-training)"], agents["encoder-placer"])] == [128] * 3
    assert agents["encoder-placer"]["policy"]["encoder"] == "sage"  # the column's own options stay
    assert "policy" not in agents["grouper-placer"]
    with pytest.raises(ConfigError, match="agent_overrides.*hierarchical"):
        table_config(wrong)


def test_skipped_cells_are_not_trained_and_their_claims_not_checked(tmp_path, graph_cache, monkeypatch):
    monkeypatch.setenv("RLPLACE_CACHE", str(graph_cache))
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        cfg = compose("reproduce", overrides=["table=mars_table1", "mode=smoke", "+table.skip=[gnmt4:seq2seq]"])
        bad = compose("reproduce", overrides=["table=mars_table1", "mode=smoke", "+table.skip=[gnmt4:nope]"])
    out = reproduce(cfg, tmp_path)
    trained = sorted(r["placer"] for r in out.records if "beside" not in r)
    assert trained == ["seq2seq (segment)", "trf-xl"]
    assert sorted({r["beside"] for r in out.records if "beside" in r}) == trained  # no search beside a skipped cell
    assert out.verdicts[0].holds is None  # segment vs seq2seq: its only model was skipped: no such setting
    assert "not trained (table.skip): gnmt4:seq2seq" in (tmp_path / "mars_table1.md").read_text()
    with pytest.raises(ConfigError, match="gnmt4:nope"):
        reproduce(bad, tmp_path / "bad")


@pytest.mark.parametrize("readme", ["docs/reproduce.md", "experiments/README.md"])
def test_readmes_list_every_table_with_its_command(readme):
    text = (REPO / readme).read_text()
    assert [t for t in TABLES if f"`rlplace-reproduce table={t}" not in text] == []


def test_cli_unknown_table_exits_2(tmp_path, rlplace_cli):
    result = subprocess.run([*rlplace_cli("reproduce"), "table=nope", f"hydra.run.dir={tmp_path}"],
                            capture_output=True, text=True)
    assert result.returncode == 2


# ----------------------------------------------------------------------------- sweeps
@pytest.mark.slow
def test_joblib_multirun_of_two_jobs_is_gathered_by_the_summary(tmp_path, rlplace_cli):
    sweep = tmp_path / "multirun"
    result = subprocess.run([*rlplace_cli("compare"), "--multirun", "graph=layered", "graph.num_ops=60", "seed=0,1",
                             "placers=[single,round_robin]", "plots=false", "hydra/launcher=local",
                             f"hydra.sweep.dir={sweep}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = summarize.summarize(sweep)
    assert sorted(s["placer"] for s in summary) == ["round_robin", "single"]
    for s in summary:
        assert s["runs"] == 2 and s["seeds"] == ["0", "1"] and s["step_time_mean"] > 0
        assert s["step_time_std"] > 0  # the seeds make different layered graphs
    summarize.main([str(sweep)])
    assert "± " in (sweep / "summary.md").read_text()


def test_summary_groups_train_runs_by_everything_but_the_seed(tmp_path):
    for job, (seed, layers, t) in enumerate([(0, 2, 0.010), (1, 2, 0.014), (0, 4, 0.020)]):
        d = tmp_path / str(job)
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- agent=hierarchical\n- seed={seed}\n- graph.num_layers={layers}\n")
        (d / "results.json").write_text(json.dumps({"final_evaluation": {"step_time": t, "oom": False},
                                                    "seconds": 1.0, "evaluated": 8}))
    rows = {s["setting"]["graph.num_layers"]: s for s in summarize.summarize(tmp_path)}
    assert rows["2"]["runs"] == 2 and rows["2"]["step_time_mean"] == pytest.approx(0.012)
    assert rows["2"]["step_time_std"] == pytest.approx(0.0028284, rel=1e-4)
    assert rows["4"]["runs"] == 1 and rows["4"]["step_time_std"] == 0.0


def test_slurm_launcher_config_composes(rlplace_cli):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    result = subprocess.run([*rlplace_cli("train"), "--cfg", "hydra", "hydra/launcher=slurm"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "SlurmLauncher" in result.stdout and "timeout_min: 240" in result.stdout


def test_update_why_rewrites_only_the_notes_of_a_recorded_run(tmp_path):
    from rlplace.apps.tables.common import update_why

    verdicts = [C.faster("x", "m-ETF beats expert", ["g"], [("m_etf", "expert")]).verdict(RECORDS),
                C.faster("y", "m-SCT beats expert", ["g"], [("m_sct", "expert")]).verdict(RECORDS)]
    (tmp_path / "t.md").write_text("# T\n\n| a |\n\n## Claims\n\n" + "\n".join(v.line() for v in verdicts) + "\n")
    (tmp_path / "results.json").write_text(json.dumps({"claims": [v.as_dict() for v in verdicts], "records": []}))
    (tmp_path / "why.yaml").write_text("x: latency\ny: unused\n")
    text = update_why(tmp_path, "t")
    assert text.startswith("# T\n\n| a |\n\n## Claims\n")
    lines = text.splitlines()[-2:]
    assert lines[0] == verdicts[0].line() + " Why: latency" and lines[1] == verdicts[1].line()
    assert json.loads((tmp_path / "results.json").read_text())["claims"][0]["why"] == "latency"
    (tmp_path / "why.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="why.yaml"):
        update_why(tmp_path, "t")


def test_every_recorded_note_names_a_claim_of_its_recorded_table():
    for why in sorted((REPO / "experiments/results/tables").glob("*/why.yaml")):
        ids = {c["id"] for c in json.loads((why.parent / "results.json").read_text())["claims"]}
        assert set(yaml.safe_load(why.read_text())) <= ids, why


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_follows_each_table_row_in_a_terminal_and_none_in_a_pipe(tmp_path, monkeypatch):
    overrides = ["table=baechi_table3", "mode=smoke", "plots=false",
                 "table.smoke.models=[{key: a, label: tiny A, family: gnmt, graph: layered, knobs: {num_ops: 30}},"
                 "{key: b, label: tiny B, family: gnmt, graph: chain, knobs: {num_ops: 20}}]"]
    with initialize_config_module(config_module="rlplace.conf", version_base="1.3"):
        cfg = compose("reproduce", overrides=overrides)
    for stderr, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stderr)
        reproduce(cfg, tmp_path / str(shown))
        text = stderr.getvalue()
        assert [label in text for label in ("baechi_table3: tiny A", "baechi_table3: tiny B")] == [shown, shown]
        assert ("/5 " in text) == shown  # the row of five placers
