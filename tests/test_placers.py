import numpy as np
import pytest

from rlplace.cluster import Cluster
from rlplace.coarsen import CoarseGraph
from rlplace.errors import ConfigError, PlacementError
from rlplace.placers import Placer, available_placers, make_placer
from rlplace.zoo import layered, linear_regression

BASELINES = ["single", "round_robin", "random"]


def test_registry():
    assert set(BASELINES) <= set(available_placers())
    with pytest.raises(ConfigError, match="unknown placer 'magic'"):
        make_placer("magic")
    with pytest.raises(ConfigError, match="placer 'single': bad options"):
        make_placer("single", colour="red")


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_place_every_op_once_and_keep_colocation(name):
    c = Cluster.homogeneous(3, 10**9)
    for g in (linear_regression(), layered(300, seed=3)):
        placer = make_placer(name, seed=5)
        assert isinstance(placer, Placer)
        p = placer.place(g, c)
        assert len(p) == g.num_ops
        p.validate(g, c)


def test_round_robin_cycles_over_units_and_random_follows_the_seed():
    g, c = linear_regression(), Cluster.homogeneous(3, 10**9)
    units = CoarseGraph.colocation(g)
    assert units.num_groups == g.num_ops - 2
    rr = make_placer("round_robin").place(g, c)
    assert np.bincount(rr.device_of, minlength=3).sum() == g.num_ops
    assert set(rr.device_of.tolist()) == {0, 1, 2}
    a, b = make_placer("random", seed=1).place(g, c), make_placer("random", seed=1).place(g, c)
    assert a == b
    big = layered(400, seed=0)
    assert make_placer("random", seed=1).place(big, c) != make_placer("random", seed=2).place(big, c)
    assert set(make_placer("single", device=2).place(g, c).device_of.tolist()) == {2}
    with pytest.raises(ConfigError, match="single: device 7 out of range"):
        make_placer("single", device=7).place(g, c)


def test_coarse_graph_expand_and_labels():
    g = layered(50, seed=0)
    cg = CoarseGraph.from_labels(g, np.arange(g.num_ops) // 10)
    assert cg.num_groups == 5 and list(cg.members(0)) == list(range(10))
    p = cg.expand(np.array([0, 1, 0, 1, 0]))
    assert list(p.device_of[:20]) == [0] * 10 + [1] * 10
    with pytest.raises(PlacementError, match="one device per group"):
        cg.expand([0, 1])
