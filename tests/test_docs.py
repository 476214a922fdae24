"""The documents stand alone in the repository (issue 40): every path README's "What is here"
map names exists, and README.md and docs/*.md link only files inside the repository that exist.

What counts as a path in the map: inline code that is a plain relative path (letters, digits,
``._-/``) and either has a ``/`` (``rlplace/sim.py``, ``rlplace/conf/``), ends in a file
extension (``pyproject.toml``) or is one of the extension-less file names (``Makefile``).
Module names (``rlplace.cluster.load_cluster_file``), overrides (``cluster.path=...``) and
commands are not paths; ``rlplace/Placement-v0`` is a Gymnasium id, not a path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]

EXTENSIONS = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".csv", ".png", ".gz", ".npz", ".cfg"}
PLAIN_FILE_NAMES = {"Makefile"}
NOT_PATHS = {"rlplace/Placement-v0"}  # the environment's Gymnasium id
PATH_TOKEN = re.compile(r"\.?[\w\-]+(?:\.[\w\-]+)*(?:/[\w.\-]+)*/?")
# [text](target) and [text](target "title"); reference definitions [label]: target
INLINE_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.\-]*:", re.IGNORECASE)  # https:, mailto:, ...


def section(text: str, heading: str) -> str:
    """The body of the level-2 section ``heading`` (its subsections included)."""
    match = re.search(rf"^## {re.escape(heading)}\s*$", text, re.MULTILINE)
    assert match, f"README.md has no section '## {heading}'"
    rest = text[match.end():]
    end = re.search(r"^## ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def without_code_blocks(text: str) -> str:
    """``text`` with fenced code blocks blanked (a link inside one is not a link)."""
    blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731  (keeps line numbers)
    return re.sub(r"^```.*?^```", blank, text, flags=re.MULTILINE | re.DOTALL)


def looks_like_path(token: str) -> bool:
    if token in NOT_PATHS or not PATH_TOKEN.fullmatch(token):
        return False
    return "/" in token or Path(token.rstrip("/")).suffix in EXTENSIONS or token in PLAIN_FILE_NAMES


def map_paths(text: str) -> list[str]:
    """Every inline-code path of the "What is here" section, in order."""
    tokens = re.findall(r"`([^`\n]+)`", without_code_blocks(section(text, "What is here")))
    return [t for t in tokens if looks_like_path(t)]


def link_targets(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every markdown link and image of ``path`` outside code blocks."""
    text = without_code_blocks(path.read_text())
    found = []
    for pattern in (INLINE_LINK, IMAGE_LINK, REFERENCE_LINK):
        for match in pattern.finditer(text):
            found.append((text[:match.start()].count("\n") + 1, match.group(1)))
    return sorted(found)


def outside_links(path: Path, root: Path = REPO) -> list[str]:
    """Links of ``path`` to files missing or outside ``root`` (the repository), and mentions of
    a document outside it (``../<folder>/<name>.md``, as the design document once was)."""
    bad = []
    for line, target in link_targets(path):
        if EXTERNAL.match(target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (path.parent / file).resolve()
        if not resolved.is_relative_to(root.resolve()):
            bad.append(f"{path.name}:{line}: {target} is outside the repository")
        elif not resolved.exists():
            bad.append(f"{path.name}:{line}: {target} does not exist")
    for k, text in enumerate(path.read_text().splitlines(), 1):
        for mention in re.findall(r"(?:\.\./)+[\w.\-/]*\.md\b", text):
            bad.append(f"{path.name}:{k}: {mention} is a document outside the repository")
    return bad


def test_the_map_names_paths():
    """The extraction finds the map's paths (an empty list would pass the next test silently)."""
    paths = map_paths(README.read_text())
    assert len(paths) >= 40
    assert {"rlplace/sim.py", "rlplace/placers/", "docs/design.md", "Makefile"} <= set(paths)
    assert "rlplace/Placement-v0" not in paths and "rlplace.cluster.load_cluster_file" not in paths


def test_every_path_of_the_map_exists():
    missing = [p for p in map_paths(README.read_text()) if not (REPO / p).exists()]
    assert missing == [], f"README.md, 'What is here', names paths that do not exist: {missing}"


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(REPO).as_posix() for p in DOCS])
def test_links_stay_inside_the_repository_and_exist(path):
    assert outside_links(path) == []


def test_the_link_check_sees_the_links():
    """README links docs/design.md and docs/distributed.md, and the extraction finds them (an
    empty list would pass the check above silently)."""
    targets = {target for _, target in link_targets(README)}
    assert {"docs/design.md", "docs/distributed.md"} <= targets


# ----------------------------------------------------------------- the checks can fail
def test_a_missing_map_path_is_caught():
    broken = README.read_text().replace("`rlplace/sim.py`", "`rlplace/simulator.py`", 1)
    assert "rlplace/simulator.py" in map_paths(broken)
    assert not (REPO / "rlplace/simulator.py").exists()


def test_a_missing_or_outside_link_is_caught(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    doc = root / "README.md"
    doc.write_text("See [the design](../shared/NOTES.md), [gone](missing.md), [web](https://example.org),\n"
                   "[here](#top) and `../shared/NOTES.md`.\n\n```\n[in code](nowhere.md)\n```\n")
    problems = outside_links(doc, root)
    assert any("../shared/NOTES.md is outside the repository" in p for p in problems)
    assert any("missing.md does not exist" in p for p in problems)
    assert any("is a document outside the repository" in p for p in problems)
    assert not any("example.org" in p or "#top" in p or "nowhere.md" in p for p in problems)
