"""rlplace-compare end to end, as a user runs it."""

import json
import subprocess

import pytest

from rlplace.zoo import chain


def run(cli, *args, cwd):
    return subprocess.run([*cli("compare"), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_compare_end_to_end(rlplace_cli, tmp_path):
    proc = run(rlplace_cli, "graph=layered", "graph.num_ops=300", "placers=[single,round_robin,random]",
               f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "placer" in proc.stdout and "step time (ms)" in proc.stdout and "round_robin" in proc.stdout
    records = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [r["placer"] for r in records] == ["single", "round_robin", "random"]
    for r in records:
        assert {"step_time", "oom", "peak_memory", "placement_time", "ops_placed"} <= set(r)
        assert r["ops_placed"] == 300 and len(r["peak_memory"]) == 4 and r["step_time"] > 0
    assert records[0]["peak_memory"][1:] == [0, 0, 0]  # single uses device 0 only
    for name in ("schedule.png", "memory.png", "best_placement.json"):
        assert (tmp_path / "run" / name).stat().st_size > 0


def test_compare_reads_a_graph_file(rlplace_cli, tmp_path):
    path = tmp_path / "chain.json.gz"
    chain(20).save(path)
    proc = run(rlplace_cli, "graph=file", f"graph.path={path}", "cluster=local_cpu", "placers=[single]",
               "plots=false", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = json.loads((tmp_path / "run" / "results.json").read_text())
    assert records[0]["step_time"] == pytest.approx(20e-3)


@pytest.mark.parametrize("args,needle", [
    (["graph=file", "graph.path=BAD"], "bad.json.gz: not a json.gz OpGraph file"),
    (["graph=file", "graph.path=MISSING"], "missing.json.gz: no such graph file"),
    (["placers=[single,magic]"], "unknown placer 'magic'"),
    (["graph=nonexistent"], "graph=nonexistent: no such graph config (options: baechi_gnmt, chain, file"),
    (["graph=file"], "graph.path"),
])
def test_bad_input_exits_2_with_one_line(rlplace_cli, tmp_path, args, needle):
    (tmp_path / "bad.json.gz").write_text("this is not gzip")
    args = [a.replace("BAD", str(tmp_path / "bad.json.gz")).replace("MISSING", str(tmp_path / "missing.json.gz"))
            for a in args]
    proc = run(rlplace_cli, *args, "graph.num_ops=50" if args[0].startswith("placers") else "plots=false",
               f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_on_a_measuring_backend_the_default_list_leaves_the_searches_out():
    from hydra import compose, initialize_config_module

    import rlplace.apps  # noqa: F401  (registers the schemas)
    from rlplace.apps.compare import defaults_that_finish, placer_names
    from rlplace.backends import make_backend

    class Measuring:
        simulated = False

    with initialize_config_module("rlplace.conf", version_base=None):
        default = compose("compare", overrides=["backend=tf"])
        named = compose("compare", overrides=["backend=tf", "placers=[m_etf,local_search]"])
        verified = compose("compare", overrides=["backend=tf", "verify_top_k=3"])
    names = placer_names(default.placers)
    assert "local_search" in names and "local_search" not in defaults_that_finish(names, default, Measuring())
    assert defaults_that_finish(names, default, make_backend("sim")) == names
    assert defaults_that_finish(["m_etf", "local_search"], named, Measuring()) == ["m_etf", "local_search"]
    assert defaults_that_finish(names, verified, Measuring()) == names
