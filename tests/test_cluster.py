from importlib.resources import files

import numpy as np
import pytest

from rlplace.cluster import Cluster, CommModel, Device, load_preset
from rlplace.errors import ConfigError

# file.yaml is not a preset but the loader of one from a file (tests/test_calibrate.py)
PRESETS = sorted(p.name.removesuffix(".yaml") for p in files("rlplace.conf").joinpath("cluster").iterdir()
                 if p.name.endswith(".yaml") and p.name != "file.yaml")


def test_the_papers_presets_exist():
    assert {"baechi_2080", "celeritas_v100", "mars_p100", "hrl_k40x2", "hrl_k40x4", "hrl_k40x8",
            "local_cpu"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds(name):
    c = load_preset(name)
    assert isinstance(c, Cluster) and c.name == name and c.num_devices >= 2
    assert len(set(c.device_names)) == c.num_devices


def test_baechi_preset_is_the_fitted_model():
    c = load_preset("baechi_2080")
    assert c.num_devices == 4 and set(c.memory) == {8 * 2**30}
    assert c.comm.mode == "sequential"
    # Baechi: t[µs] = 0.0001754 × bytes + 134
    assert c.comm.transfer_time(10**6) == pytest.approx((0.0001754 * 10**6 + 134) * 1e-6)
    assert [load_preset(f"hrl_k40x{n}").num_devices for n in (2, 4, 8)] == [2, 4, 8]


def test_preset_overrides_and_unknown_preset():
    assert load_preset("mars_p100", n=2).num_devices == 2
    with pytest.raises(ConfigError, match="unknown cluster preset 'tpu'"):
        load_preset("tpu")


def test_transfer_time_is_linear_and_vectorised():
    comm = CommModel(latency=2e-6, seconds_per_byte=1e-9)
    np.testing.assert_allclose(comm.transfer_time([0, 1000]), [2e-6, 2e-6 + 1e-6])
    assert comm.bandwidth == pytest.approx(1e9)


@pytest.mark.parametrize("build,message", [
    (lambda: CommModel(mode="carrier-pigeon"), "comm.mode"),
    (lambda: CommModel(latency=-1.0), "comm.latency"),
    (lambda: Device("gpu", 0), "device 'gpu': memory_bytes"),
    (lambda: Device("gpu", 10, speed=0.0), "device 'gpu': speed"),
    (lambda: Cluster((Device("a", 1), Device("a", 1))), "duplicate device name 'a'"),
    (lambda: Cluster(()), "at least one device"),
    (lambda: Cluster.homogeneous(0, 10), "cluster size"),
])
def test_bad_clusters_raise_config_error(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_with_memory_and_device_index():
    c = Cluster.homogeneous(3, 100, prefix="gpu")
    assert list(c.with_memory(7).memory) == [7, 7, 7]
    assert list(c.with_memory([1, 2, 3]).memory) == [1, 2, 3]
    assert c.device_index("gpu2") == 2
    with pytest.raises(ConfigError, match="unknown device 'gpu9'"):
        c.device_index("gpu9")
