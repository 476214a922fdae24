"""Placements a PyTorch model can use (issue 43 item 1): ``from_torch(granularity="module")``
never splits a module's tensors, and ``rlplace.export.torch_device_map`` gives the device_map
that ``accelerate.dispatch_model`` applies, with the same loss and gradients as unplaced."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from rlplace.cluster import load_preset
from rlplace.errors import PlacementError
from rlplace.export import apply_device_map, torch_device_map
from rlplace.import_.torch import from_torch
from rlplace.placers import make_placer

torch.manual_seed(0)
CLUSTER = load_preset("baechi_2080")
CPUS = ["cpu"] * CLUSTER.num_devices


class Tied(nn.Module):
    """An embedding whose weight the output layer shares (as GPT-2's)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.body = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.LayerNorm(16))
        self.head = nn.Linear(16, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


def transformer():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, num_layers=2), nn.Linear(32, 10))


MODELS = {"transformer": (transformer, lambda: (torch.randn(4, 8, 32), torch.randint(0, 10, (4, 8)))),
          "tied": (Tied, lambda: (torch.randint(0, 20, (4, 6)), torch.randint(0, 20, (4, 6))))}


@pytest.fixture(scope="module", params=sorted(MODELS))
def imported(request):
    build, data = MODELS[request.param]
    model = build()
    x, y = data()
    return model, x, y, from_torch(model, x, targets=y, granularity="module")


@pytest.mark.parametrize("placer", ["m_etf", "round_robin", "random", "expert", "heft"])
def test_no_module_is_split_and_the_map_covers_every_tensor(imported, placer):
    model, _, _, result = imported
    placement = make_placer(placer, seed=1).place(result.graph, CLUSTER)
    device_map = torch_device_map(result, placement, CPUS)
    for name in model.state_dict():   # tied names included: every tensor has a module in the map
        assert name.rpartition(".")[0] in device_map, name
    devices = torch_device_map(result, placement, [f"cuda:{k}" for k in range(CLUSTER.num_devices)])
    for state, modules in result.holders.items():
        assert {devices[m] for m in modules} == {f"cuda:{placement.device_of[result.graph.index[state]]}"}


def test_expert_splits_the_modules_into_stages_in_forward_order(imported):
    _, _, _, result = imported
    placement = make_placer("expert").place(result.graph, CLUSTER)
    assert len(set(placement.device_of.tolist())) > 1     # the layer tags are the modules' order


def test_dispatched_model_gives_the_unplaced_loss_and_gradients(imported):
    accelerate = pytest.importorskip("accelerate")
    model, x, y, result = imported
    placement = make_placer("round_robin").place(result.graph, CLUSTER)
    device_map = torch_device_map(result, placement, CPUS)

    def loss_and_grads(m):
        out = m(x)
        loss = nn.functional.cross_entropy(out.flatten(0, -2), y.flatten())
        grads = torch.autograd.grad(loss, [p for p in m.parameters()])
        return loss.detach(), [g.detach() for g in grads]

    plain = loss_and_grads(model)
    for placed in (accelerate.dispatch_model(copy.deepcopy(model), device_map=device_map),
                   apply_device_map(copy.deepcopy(model), device_map)):
        loss, grads = loss_and_grads(placed)
        torch.testing.assert_close(loss, plain[0])
        for a, b in zip(grads, plain[1]):
            torch.testing.assert_close(a, b)


def test_an_op_granularity_placement_that_splits_a_module_is_refused():
    model = transformer()
    x, y = MODELS["transformer"][1]()
    result = from_torch(model, x, targets=y)
    placement = make_placer("round_robin").place(result.graph, CLUSTER)
    with pytest.raises(PlacementError, match="granularity='module'"):
        torch_device_map(result, placement, CPUS)
    with pytest.raises(PlacementError, match="devices were named"):
        torch_device_map(result, placement, ["cpu"])


TF_SCRIPT = """
import numpy as np, tensorflow as tf
from rlplace.tf.devices import configure_devices, device_session_config
devices = configure_devices(2)                      # two logical CPU devices, before TensorFlow starts
import keras
from rlplace.cluster import load_preset
from rlplace.import_.keras import apply_placement, from_keras
from rlplace.placers import make_placer

def build():
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])

imported = from_keras(build, batch_size=8)
placement = make_placer("round_robin").place(imported.graph, load_preset("local_cpu"))
model = apply_placement(imported, placement, devices)
assert all(model.graph.get_operation_by_name(n).device.endswith(devices[d][-5:])
           for n, d in zip(imported.graph.names, placement.device_of))
options, metadata = tf.compat.v1.RunOptions(trace_level=3), tf.compat.v1.RunMetadata()
with tf.compat.v1.Session(graph=model.graph, config=device_session_config(1, 1)) as session:
    session.run(model.init_op)
    _, loss = session.run([model.train_op, model.loss], model.feed_dict(0), options=options, run_metadata=metadata)
ran = {s.device.rsplit("device:", 1)[-1] for s in metadata.step_stats.dev_stats if s.node_stats}
print("ran on", sorted(ran), "loss", float(loss))
assert {"CPU:0", "CPU:1"} <= ran and np.isfinite(loss)
"""


def test_a_keras_step_runs_placed_on_two_logical_cpu_devices():
    pytest.importorskip("tensorflow")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", TF_SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran on ['CPU:0', 'CPU:1']" in done.stdout
