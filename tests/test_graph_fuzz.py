"""Random corruptions of a valid graph file: the loader returns a graph or raises an
``rlplace.errors`` exception, nothing else (issue 17)."""

import copy
import gzip
import json
import math

from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import op
from rlplace.errors import RlplaceError
from rlplace.graph import CONTROL, OpGraph

OPS = [op("w", out=[0], persistent=64, op_type="VariableV2", colocation_group="w", layer=0),
       op("split", compute_time=0.5, out=[8, 8], temporary=4, output_shapes=[[2, 1], None], layer=0),
       op("mul", out=[16], output_shapes=[[2, 2]], layer=1),
       op("grad", out=[16], forward_op="mul", layer="head")]
EDGES = [["w", "mul", 64, 0], ["split", "mul", 8, 0], ["split", "mul", 8, 1], ["mul", "grad", 16, 0],
         ["split", "grad", 0, CONTROL]]
DOC = {"format": "rlplace.opgraph", "version": 1, "name": "fuzz", "ops": OPS, "edges": EDGES}
JSON = json.dumps(DOC).encode()

ODD_VALUES = st.sampled_from([None, True, False, "", "abc", "w", [], {}, [["w"]], {"name": "x"}, -1, 0, 1.5,
                              -1e300, 1e300, 10**30, -(10**30), 10**400, 2**62, 2**63, math.nan, math.inf,
                              -math.inf, 1.7e308, [1e300], [10**30], [None], [[1, "2"]], ["a", "b"]])


def load_or_refuse(tmp_path_factory, raw: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "g.json.gz"
    path.write_bytes(raw)
    try:
        g = OpGraph.load(path, max_bytes=1 << 20)
    except RlplaceError:
        return
    assert isinstance(g, OpGraph)


@st.composite
def byte_corruptions(draw, data: bytes):
    """Truncate, flip or insert bytes, or several of them."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        k = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            del data[k:]
        elif kind == "flip" and data:
            data[k] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[k:k] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[k:k + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=byte_corruptions(gzip.compress(JSON)))
def test_corrupt_gzip_bytes(tmp_path_factory, raw):
    load_or_refuse(tmp_path_factory, raw)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=byte_corruptions(JSON))
def test_corrupt_json_bytes(tmp_path_factory, raw):
    load_or_refuse(tmp_path_factory, gzip.compress(raw))


def _paths(node, prefix=()):
    """Every place in a JSON document: (keys and indices leading to it)."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(DOC) if p]


def odd_value(draw):
    """A fresh copy: the lists and dicts of ODD_VALUES are shared, and a later mutation could
    append one into itself (a circular document) or change it for the examples after."""
    return copy.deepcopy(draw(ODD_VALUES))


@st.composite
def json_mutations(draw):
    """Up to three places of the document get an odd value, lose their key or gain a sibling."""
    doc = json.loads(JSON)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            kind = draw(st.sampled_from(["set", "set", "delete", "append"]))
            if kind == "set":
                parent[path[-1]] = odd_value(draw)
            elif kind == "delete":
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.append(odd_value(draw))
            else:
                parent["extra"] = odd_value(draw)
        except (KeyError, IndexError, TypeError):  # an earlier mutation removed or replaced that place
            pass
    return gzip.compress(json.dumps(doc).encode())


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=json_mutations())
def test_json_level_mutations(tmp_path_factory, raw):
    load_or_refuse(tmp_path_factory, raw)


def test_the_unmutated_file_loads(tmp_path):
    path = tmp_path / "g.json.gz"
    path.write_bytes(gzip.compress(JSON))
    assert OpGraph.load(path).num_ops == 4
