"""Every Python block of docs/your_own_model.md (the README's "Your own model") runs as written."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "your_own_model.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
NEEDS = ["tensorflow", "tensorflow", "torch", "tensorflow", "accelerate", None]
PRINTS = ["OpGraph(", "OpGraph(", "OpGraph(", "loss after one placed step", "'1': 'cpu'", "OpGraph("]   # each prints


def test_the_doc_has_its_blocks():
    assert len(BLOCKS) == len(NEEDS)


@pytest.mark.parametrize("k", range(len(NEEDS)))
def test_snippet_runs(k, capsys):
    if NEEDS[k]:
        pytest.importorskip(NEEDS[k])
    exec(compile(BLOCKS[k], f"{DOC.name}[block {k}]", "exec"), {})
    assert PRINTS[k] in capsys.readouterr().out
