"""The graphs the ``learned`` placer is trained on, and the held-out family it is tested on.

Training (``training_family``): random graphs drawn per seed, each with a cluster drawn for it:

* layered random DAGs (``rlplace.zoo.layered``) of 100-400 ops, 4-16 wide, with mean outputs of
  0.1, 1 or 10 MB (communication-to-computation ratios from about 0.1 to 10);
* fork-join graphs of 2-8 branches;
* random training steps (``rlplace.zoo.synthetic.training_step``: forward layers, their
  gradients, weight updates colocated with the weights) of 10-60 layers;
* two TensorFlow zoo models with roofline costs: Transformer 2+2 (batch 64) and Inception-V3
  (batch 1), on the Baechi and Mars presets;

on 2, 3, 4 or 8 devices, sequential or parallel links, memory ample (4x the single-device
peak) or binding (each device between 0.3 and 0.8 of it, and all together 1.2x at least).

Held out (``test_family``, never trained on): BERT, the Tensor Holography network, GNMT (the
TensorFlow zoo's and the Baechi authors' profile) and linear regression, none of whose kinds is
in training, and layered DAGs of 1,000 and 2,000 ops (5-10x the training sizes) with
``placer_quality``'s settings, ample and binding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlplace.cluster import Cluster, CommModel, load_preset
from rlplace.costs import with_analytical_costs
from rlplace.graph import OpGraph
from rlplace.sim import simulate
from rlplace.zoo import zoo_graph
from rlplace.zoo.baechi import default_profile_path, load_baechi_profile
from rlplace.zoo.synthetic import fork_join, layered, training_step

LINK = dict(latency=134e-6, seconds_per_byte=1.754e-10)  # placer_quality's: ~5.7 GB/s, 134 µs
ZOO_DEVICE = "gtx2080"


@dataclass(frozen=True)
class Instance:
    """A graph, the cluster to place it on, and the kind it was drawn from."""

    graph: OpGraph
    cluster: Cluster
    kind: str


def single_peak(graph: OpGraph) -> int:
    """The peak bytes of the whole graph on one device with ample memory."""
    big = Cluster.homogeneous(1, 2**60)
    return int(simulate(graph, big, np.zeros(graph.num_ops, dtype=np.int64)).peak_memory[0])


def cluster_for(graph: OpGraph, devices: int, memory_fraction: float, mode: str, name: str) -> Cluster:
    """``devices`` equal devices of ``memory_fraction`` x the graph's single-device peak each."""
    memory = max(int(memory_fraction * single_peak(graph)), 1)
    return Cluster.homogeneous(devices, memory, CommModel(**LINK, mode=mode), name=name)


def _random_cluster(graph: OpGraph, rng: np.random.Generator) -> Cluster:
    devices = int(rng.choice([2, 3, 4, 8]))
    binding = rng.random() < 0.35 and graph.persistent_bytes.sum() > 0  # else activations alone decide
    low = max(0.3, 1.2 / devices)  # the devices together hold 1.2x the peak at least
    fraction = float(rng.uniform(low, max(0.8, low + 0.1))) if binding else 4.0
    mode = str(rng.choice(["sequential", "parallel"]))
    return cluster_for(graph, devices, fraction, mode, f"{devices} x {fraction:.2f} peak, {mode}")


def training_family(seed: int = 0, size: int = 48, zoo_models: bool = True) -> list[Instance]:
    """``size`` random training instances (module docstring) and, with ``zoo_models``, the two
    zoo models on two presets each; the same seed gives the same family."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(size):
        kind = ("layered", "layered", "fork_join", "training_step")[i % 4]
        s = int(rng.integers(2**31))
        if kind == "layered":
            graph = layered(int(rng.integers(100, 401)), width=int(rng.choice([4, 8, 16])),
                            max_fan_in=int(rng.integers(1, 4)), skip_prob=float(rng.choice([0.0, 0.1])),
                            compute_mean=4e-4, compute_cv=1.5, output_bytes_mean=float(rng.choice([1e5, 1e6, 1e7])),
                            bytes_cv=2.0, seed=s, name=f"layered_{i}")
        elif kind == "fork_join":
            graph = fork_join(int(rng.integers(2, 9)), int(rng.integers(3, 20)),
                              compute_time=float(rng.choice([1e-4, 1e-3])),
                              output_bytes=int(rng.choice([1e4, 1e6, 1e7])), name=f"fork_join_{i}")
        else:
            graph = training_step(s, continuous=True, layers=int(rng.integers(10, 61)))
            graph.name = f"training_step_{i}"
        out.append(Instance(graph, _random_cluster(graph, rng), kind))
    for model, knobs in (("transformer", {"encoder_layers": 2, "decoder_layers": 2, "batch_size": 64}),
                         ("inception_v3", {"batch_size": 1})) if zoo_models else ():
        graph = zoo(model, knobs)
        out += [Instance(graph, load_preset(preset), model) for preset in ("baechi_2080", "mars_p100")]
    return out


def test_family(sizes: tuple[int, ...] = (1000, 2000)) -> list[Instance]:
    """The held-out family (module docstring); the Baechi profile where its file is present."""
    out = []
    for model, knobs in (("bert", {"num_layers": 4, "seq_length": 128}), ("tensor_holography", {"num_layers": 10}),
                         ("gnmt", {"num_layers": 2, "seq_length": 10}), ("linear_regression", {})):
        graph = zoo(model, knobs)
        out += [Instance(graph, load_preset(preset), model) for preset in ("baechi_2080", "mars_p100")]
    if default_profile_path().is_file():
        profile = load_baechi_profile()
        out += [Instance(profile, load_preset(preset), "gnmt_profile") for preset in ("baechi_2080", "mars_p100")]
    for n in sizes:
        graph = layered(n, width=16, max_fan_in=3, skip_prob=0.0, compute_mean=4e-4, compute_cv=1.5,
                        output_bytes_mean=1e6, bytes_cv=2.0, seed=0, name=f"layered{n}")
        out += [Instance(graph, cluster_for(graph, 4, 4.0, "sequential", "4 x ample"), "layered_large"),
                Instance(graph, cluster_for(graph, 4, 0.3, "sequential", "4 x 0.3 peak"), "layered_large")]
    return out


def zoo(model: str, knobs: dict) -> OpGraph:
    """A TensorFlow zoo model with roofline costs of ``ZOO_DEVICE`` (extracted once, cached)."""
    graph = with_analytical_costs(zoo_graph(model, knobs), ZOO_DEVICE)
    graph.name = f"{model}_{'_'.join(f'{k}{v}' for k, v in knobs.items()) or 'default'}"
    return graph
