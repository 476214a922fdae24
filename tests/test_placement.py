import numpy as np
import pytest

from rlplace.backends import SimBackend, make_backend
from rlplace.cluster import Cluster
from rlplace.errors import ConfigError, PlacementError
from rlplace.placement import Placement
from rlplace.zoo import linear_regression


@pytest.fixture
def lr():
    return linear_regression()


def colocated(graph, devices):
    """A placement with the two colocation groups whole."""
    p = np.array(devices)
    for ops in graph.colocation_groups.values():
        p[ops] = p[ops[0]]
    return Placement(p)


def test_dict_round_trip_and_files(lr, tmp_path):
    c = Cluster.homogeneous(2, 10**9)
    p = colocated(lr, np.arange(lr.num_ops) % 2)
    mapping = p.to_dict(lr, c)
    assert mapping["Weight"] == mapping["ApplyGrad"]
    assert Placement.from_dict(mapping, lr, c) == p
    p.save(tmp_path / "p.json", lr, c)
    assert Placement.load(tmp_path / "p.json", lr, c) == p
    assert hash(Placement(p.device_of.copy())) == hash(p)


def test_validation_errors(lr):
    c = Cluster.homogeneous(2, 10**9)
    with pytest.raises(PlacementError, match="placement has 3 entries but graph"):
        Placement([0, 0, 0]).validate(lr, c)
    bad = np.zeros(lr.num_ops, dtype=int)
    bad[lr.index["Loss"]] = 2
    with pytest.raises(PlacementError, match="op 'Loss': device index 2 out of range"):
        Placement(bad).validate(lr, c)
    split = np.zeros(lr.num_ops, dtype=int)
    split[lr.index["ApplyGrad"]] = 1
    with pytest.raises(PlacementError, match="colocation group 'Weight' is split.*'ApplyGrad'"):
        Placement(split).validate(lr, c)
    with pytest.raises(PlacementError, match="1-D array"):
        Placement([[0, 1]])
    assert Placement(np.zeros(lr.num_ops, dtype=int)).validate(lr, c) is not None


def test_from_dict_errors(lr):
    c = Cluster.homogeneous(2, 10**9)
    full = Placement(np.zeros(lr.num_ops, dtype=int)).to_dict(lr, c)
    with pytest.raises(PlacementError, match="unknown op 'ghost'"):
        Placement.from_dict({**full, "ghost": c.device_names[0]}, lr, c)
    with pytest.raises(PlacementError, match="op 'X': unknown device 'tpu:0'"):
        Placement.from_dict({**full, "X": "tpu:0"}, lr, c)
    del full["Loss"]
    with pytest.raises(PlacementError, match="misses op 'Loss'"):
        Placement.from_dict(full, lr, c)


def test_sim_backend_refuses_split_groups_like_tensorflow(lr):
    c = Cluster.homogeneous(2, 10**9)
    split = np.zeros(lr.num_ops, dtype=int)
    split[lr.index["UpdateStep"]] = 1
    with pytest.raises(PlacementError, match="colocation group 'Step'"):
        SimBackend().evaluate(lr, c, Placement(split))
    ok = SimBackend(trace=True).evaluate(lr, c, colocated(lr, np.arange(lr.num_ops) % 2))
    assert ok.schedule is not None and ok.step_time > 0
    with pytest.raises(ConfigError, match="unknown backend 'gpu'"):
        make_backend("gpu")
