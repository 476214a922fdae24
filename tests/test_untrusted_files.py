"""Files a user may receive from someone else are data, never code (issue 44, item 1).

Every loader of such a file (a cluster preset given as ``cluster=file``, a calibration run given
as ``rlplace-calibrate from_run=``, a table's saved run config) is fed planted files: a
``_target_`` that writes a file, the same one nested, a ``!!python`` tag, a ``torch.load`` of a
malicious pickle, and a YAML alias bomb. Each must be one line and exit 2 from the apps (a
ConfigError from Python), and nothing planted may run."""

import pickle
from pathlib import Path

import pytest

from rlplace.apps.tables.learned import RUN_CONFIG, saved_config
from rlplace.cluster import Cluster, CommModel, Device, cluster_from_data, load_cluster_file
from rlplace.errors import ConfigError, GraphError
from rlplace.graph import OpGraph
from tests.test_app_inputs import assert_one_line_exit_2, run  # noqa: F401 - run is a fixture
from tests.test_calibrate import fake_run


class Planted:
    """Running this object's pickle writes ``marker`` (what torch.load(weights_only=False) does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def alias_bomb(depth: int = 12) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join(['*a' + str(i - 1)] * 9)}]" for i in range(1, depth)]
    return "\n".join(lines) + f"\nn: *a{depth - 1}\nmemory_bytes: 1000\n"


def planted_files(tmp_path: Path) -> dict[str, str]:
    """Cluster preset texts that would run code (or never end) if the file were instantiated."""
    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(Planted(marker)))
    return {
        "target": f"_target_: pathlib.Path.write_text\nself: {marker}\ndata: ran\n",
        "nested_target": ("_target_: rlplace.cluster.Cluster.homogeneous\nn: 2\nmemory_bytes: 1000\n"
                          f"comm:\n  _target_: pathlib.Path.write_text\n  self: {marker}\n  data: ran\n"),
        "python_tag": f"!!python/object/apply:exec [\"open('{marker}', 'w').write('ran')\"]\n",
        "python_tag_value": ("n: 2\nmemory_bytes: !!python/object/apply:exec "
                             f"[\"open('{marker}', 'w').write('ran')\"]\n"),
        "torch_load": f"_target_: torch.load\nf: {evil}\nweights_only: false\n",
        "file_in_file": f"_target_: rlplace.cluster.load_cluster_file\npath: {tmp_path / 'other.yaml'}\n",
        "alias_bomb": alias_bomb(),
    }


def plant(tmp_path: Path, kind: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(planted_files(tmp_path)[kind])
    (tmp_path / "other.yaml").write_text(planted_files(tmp_path)["target"])
    return path


KINDS = ["target", "nested_target", "python_tag", "python_tag_value", "torch_load", "file_in_file", "alias_bomb"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_cluster_file_is_refused_by_the_python_api(tmp_path, kind):
    path = plant(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"cluster.path: {path}"):
        load_cluster_file(path)
    assert not (tmp_path / "ran.txt").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_cluster_file_is_one_line_from_compare(tmp_path, run, kind):
    path = plant(tmp_path, kind)
    proc = run("compare", "cluster=file", f"cluster.path={path}", "graph.num_ops=20", "placers=[single]",
               f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_exit_2(proc, "rlplace-compare", ["cluster.path", str(path)])
    assert not (tmp_path / "ran.txt").exists()
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_calibration_run_is_one_line(tmp_path, run, kind):
    earlier = fake_run(tmp_path)
    plant(earlier, kind, "measured_cluster.yaml")
    proc = run("calibrate", f"from_run={earlier}", f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_exit_2(proc, "rlplace-calibrate", ["measured_cluster.yaml"])
    assert not (earlier / "ran.txt").exists()
    assert not (tmp_path / "out" / "cluster.yaml").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_run_config_is_refused(tmp_path, kind):
    text = planted_files(tmp_path)[kind]
    (tmp_path / RUN_CONFIG).write_text("cluster:\n" + "".join(f"  {line}\n" for line in text.splitlines())
                                       if kind != "alias_bomb" else text)
    with pytest.raises(ConfigError):
        cluster_from_data(saved_config(tmp_path).get("cluster"))
    assert not (tmp_path / "ran.txt").exists()


def test_what_rlplace_calibrate_writes_and_the_shipped_format_still_load(tmp_path):
    (tmp_path / "a.yaml").write_text("_target_: rlplace.cluster.Cluster.homogeneous\nn: 2\nmemory_bytes: 1e9\n"
                                     "comm:\n  _target_: rlplace.cluster.CommModel\n  latency: 1e-5\n")
    assert load_cluster_file(tmp_path / "a.yaml") == Cluster.homogeneous(2, 10**9, CommModel(1e-5))
    (tmp_path / "b.yaml").write_text("_target_: rlplace.cluster.Cluster\n_convert_: all\nname: b\ndevices:\n"
                                     "- {name: x, memory_bytes: 100, speed: 2.0}\n- {name: y, memory_bytes: 50}\n")
    assert load_cluster_file(tmp_path / "b.yaml") == Cluster((Device("x", 100, 2.0), Device("y", 50)), name="b")


@pytest.mark.parametrize("text, needles", [
    ("n: 2\n", ["memory_bytes: missing"]),
    ("n: 2\nmemory_bytes: 10\nspeeed: 1\n", ["'speeed'", "known: n, memory_bytes"]),
    ("n: 99999999\nmemory_bytes: 10\n", ["n: must be an integer in [1, 4096]"]),
    ("n: 2\nmemory_bytes: '10'\n", ["memory_bytes: must be a finite number", "'10'"]),
    ("n: 2\nmemory_bytes: .nan\n", ["memory_bytes: must be a finite number"]),
    (f"n: 2\nmemory_bytes: {10**400}\n", ["memory_bytes", "an integer of 1329 bits"]),
    ("n: true\nmemory_bytes: 10\n", ["n: must be an integer", "True"]),
    ("n: 2\nmemory_bytes: 10\ncomm: [1]\n", ["comm: must be a mapping"]),
    ("n: 2\nmemory_bytes: 10\ncomm: {mode: telepathy}\n", ["comm.mode must be one of"]),
    ("devices: []\n", ["devices: must be a list of 1 to 4096 devices"]),
    ("devices: [{name: a}]\n", ["devices[0].memory_bytes: missing"]),
    ("devices: [{name: a, memory_bytes: 1, _target_: os.system}]\n", ["devices[0]._target_", "os.system"]),
    ("- 1\n- 2\n", ["not a cluster preset", "list"]),
    ("", ["not a cluster preset", "null"]),
    ("n: [\n", ["not a cluster preset file"]),
    ("!foo 1\n", ["not a cluster preset file"]),
])
def test_a_bad_cluster_file_names_the_key(tmp_path, text, needles):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_cluster_file(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def test_only_regular_files_are_read(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    import os

    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="fifo.yaml: not a regular file"):
        load_cluster_file(fifo)
    with pytest.raises(ConfigError, match="a directory"):
        load_cluster_file(tmp_path)
    os.mkfifo(tmp_path / "fifo.json.gz")
    with pytest.raises(GraphError, match="fifo.json.gz: not a regular file"):
        OpGraph.load(tmp_path / "fifo.json.gz")
    (tmp_path / "big.yaml").write_text("n: 2\n" + "#" * (1 << 20))
    with pytest.raises(ConfigError, match="more than 1048576 bytes"):
        load_cluster_file(tmp_path / "big.yaml")
