"""TensorFlow zoo models build and extract into valid OpGraphs (no TensorFlow run here)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlplace.errors import ConfigError  # noqa: E402
from rlplace.graph import CONTROL  # noqa: E402
from rlplace.tf.extract import extract, forward_op_name  # noqa: E402
from rlplace.zoo import TF_MODELS, build_tf_model  # noqa: E402

TINY = {
    "linear_regression": dict(batch_size=8, features=16),
    "inception_v3": dict(batch_size=1, image_size=75, num_classes=5, depth_multiplier=0.1),
    "gnmt": dict(batch_size=2, seq_length=3, hidden=8, vocab_size=20, num_layers=3),
    "transformer": dict(batch_size=2, seq_length=4, hidden=8, heads=2, filter_size=16, vocab_size=20,
                        encoder_layers=2, decoder_layers=2),
    "bert": dict(batch_size=2, seq_length=8, hidden=8, heads=2, intermediate_size=16, vocab_size=20,
                 num_layers=2),
    "tensor_holography": dict(batch_size=1, image_size=8, filters=4, num_layers=5),
}
SLOW = {"inception_v3"}


def test_every_model_has_tiny_knobs():
    assert set(TINY) == set(TF_MODELS)


@pytest.fixture(scope="module")
def extracted():
    cache = {}

    def get(name):
        if name not in cache:
            model = build_tf_model(name, **TINY[name])
            cache[name] = (model, extract(model))
        return cache[name]
    return get


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in TF_MODELS])
def test_model_extracts_a_valid_training_graph(extracted, name):
    model, g = extracted(name)
    assert g.num_ops > 10 and g.num_edges >= g.num_ops - 1
    assert np.all(g.edge_src < g.edge_dst)  # topological indices: a DAG
    assert not any("Initializer" in n or "IsInitialized" in n for n in g.names)  # step ops only
    types = set(g.op_type)
    assert "VarHandleOp" in types and "Placeholder" in types
    assert np.any(g.edge_src_output == CONTROL)

    groups = g.colocation_groups
    for i in np.flatnonzero(np.array(g.op_type) == "VarHandleOp"):
        var = g.names[i]
        assert g.persistent_bytes[i] > 0 and g.output_total[i] == 0
        group = g.colocation_group[i]
        assert group is not None, var
        members = {g.op_type[j] for j in groups[group]}
        assert any(t.startswith(("ResourceApply", "ResourceSparseApply", "ResourceScatter", "Assign"))
                   for t in members), (var, members)  # its update is colocated with it

    backward = np.flatnonzero(g.forward_op >= 0)
    assert len(backward) > g.num_ops // 5
    for i in backward:
        assert g.names[i].startswith("gradients/")
        assert not g.names[g.forward_op[i]].startswith("gradients/")
    # every forward MatMul/Conv2D has gradient ops paired with it
    paired = set(g.forward_op[backward].tolist())
    for i, t in enumerate(g.op_type):
        if t in ("MatMul", "Conv2D") and not g.names[i].startswith("gradients/"):
            assert i in paired, g.names[i]


def test_tensor_bytes_and_persistent_bytes_follow_shapes(extracted):
    model, g = extracted("linear_regression")
    b, f = TINY["linear_regression"]["batch_size"], TINY["linear_regression"]["features"]
    w = g.index["Weight"]
    assert g.persistent_bytes[w] == f * 4 and g.persistent_bytes[g.index["global_step"]] == 8
    mm = g.index["MatMul"]
    assert g.output_bytes[mm] == [b * 4] and g.output_shapes[mm] == [[b, 1]]
    reads = [e for e in range(g.num_edges) if g.edge_dst[e] == mm]
    assert sorted(g.edge_bytes[e] for e in reads) == sorted([b * f * 4, f * 4])
    # the decaying learning rate reads the step, so Weight's update depends on it (Baechi Fig. 2)
    update = [i for i, t in enumerate(g.op_type) if t == "ResourceApplyGradientDescent"]
    assert len(update) == 1 and g.colocation_group[update[0]] == g.colocation_group[w]


def test_gnmt_layer_tags_give_the_expert_placement(extracted):
    _, g = extracted("gnmt")
    layers = TINY["gnmt"]["num_layers"]
    tag = dict(zip(g.names, g.layer))
    assert {t for t in g.layer if t is not None} == set(range(layers))
    assert tag["embeddings/encoder"] == 0 and tag["embeddings/decoder"] == 0
    assert tag["decoder/attention/attention_v"] == layers - 1
    assert tag["decoder/output_projection"] == layers - 1
    for k in range(1, layers):
        kernel = f"encoder/layer_{k}/kernel"
        assert tag[kernel] == k
        group = g.colocation_groups[g.colocation_group[g.index[kernel]]]
        assert {g.layer[j] for j in group} == {k}  # its reads and its update follow it
    # a backward op carries its forward op's tag
    for i in np.flatnonzero(g.forward_op >= 0):
        assert g.layer[i] == g.layer[g.forward_op[i]]


def test_cnns_carry_no_layer_tags(extracted):
    _, g = extracted("tensor_holography")
    assert all(t is None for t in g.layer)
    assert sum(t == "Conv2D" for t in g.op_type) == TINY["tensor_holography"]["num_layers"]


def test_building_is_deterministic():
    a = build_tf_model("gnmt", **TINY["gnmt"])
    b = build_tf_model("gnmt", **TINY["gnmt"])
    assert [op.name for op in a.graph.get_operations()] == [op.name for op in b.graph.get_operations()]
    assert a.layers == b.layers
    fa, fb = a.feed_dict(3), b.feed_dict(3)
    for x, y in zip(fa.values(), fb.values()):
        np.testing.assert_array_equal(x, y)


def test_forward_op_name():
    known = {"a/b/MatMul", "sub"}
    assert forward_op_name("gradients/a/b/MatMul_grad/MatMul_1", known) == "a/b/MatMul"
    assert forward_op_name("gradients_1/sub_grad/tuple/control_dependency", known) == "sub"
    assert forward_op_name("gradients/AddN_3", known) is None
    assert forward_op_name("a/b/MatMul", known) is None


@pytest.mark.parametrize("name,knobs,needle", [
    ("resnet", {}, "unknown model 'resnet'"),
    ("gnmt", {"depth": 3}, "model.depth"),
    ("gnmt", {"num_layers": 1, "batch_size": 2}, "num_layers must be >= 2"),
    ("bert", {"hidden": 10, "heads": 3}, "multiple of heads"),
])
def test_bad_model_config_is_a_config_error(name, knobs, needle):
    with pytest.raises(ConfigError, match=needle):
        build_tf_model(name, **knobs)


@pytest.mark.parametrize("name", [n for n in TF_MODELS if n not in SLOW])
def test_ops_do_not_depend_on_the_batch_size(name):
    """Standard Evaluation regresses per op over batch sizes: the ops must be the same."""
    a = extract(build_tf_model(name, **{**TINY[name], "batch_size": 2}))
    b = extract(build_tf_model(name, **{**TINY[name], "batch_size": 130}))  # tf.zeros switches at 1000
    assert a.names == b.names and a.edge_records() != b.edge_records()


def test_the_graph_cache_holds_the_extraction_codes_graph(tmp_path, monkeypatch):
    import rlplace.zoo as zoo
    from rlplace.zoo import chain, zoo_graph, zoo_graph_path

    monkeypatch.setenv("RLPLACE_CACHE", str(tmp_path))
    knobs = TINY["linear_regression"]
    first = zoo_graph("linear_regression", knobs)
    path = zoo_graph_path("linear_regression", knobs)
    assert path.is_file() and zoo_graph("linear_regression", knobs).num_ops == first.num_ops
    chain(3).save(path)                     # what is cached under this code's key is read back
    assert zoo_graph("linear_regression", knobs).num_ops == 3
    monkeypatch.setattr(zoo, "extraction_code_tag", lambda: "othercode")
    assert zoo_graph_path("linear_regression", knobs) != path  # other builder code: extracted again
    assert zoo_graph("linear_regression", knobs).num_ops == first.num_ops
    assert [p.name for p in path.parent.iterdir()] == [zoo_graph_path("linear_regression", knobs).name]  # the old one removed


def test_a_graph_cache_file_that_does_not_read_is_extracted_again(tmp_path, monkeypatch):
    from rlplace.zoo import zoo_graph, zoo_graph_path

    monkeypatch.setenv("RLPLACE_CACHE", str(tmp_path))
    knobs = TINY["linear_regression"]
    path = zoo_graph_path("linear_regression", knobs)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x1f\x8b truncated by a killed process")
    graph = zoo_graph("linear_regression", knobs)
    assert graph.num_ops > 3 and zoo_graph("linear_regression", knobs).num_ops == graph.num_ops
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # rewritten whole, nothing left beside
