"""``rlplace.atomic.write_whole``: a file is replaced whole or left as it was."""

import pytest

from rlplace.atomic import write_whole


def test_the_file_is_replaced_whole(tmp_path):
    path = tmp_path / "weights.npz"
    path.write_bytes(b"old")
    write_whole(path, lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["weights.npz"]


def test_a_write_that_fails_leaves_the_old_file_and_no_partial_one(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old")

    def write(f):
        f.write(b"half of it")
        raise KeyboardInterrupt  # killed while writing

    with pytest.raises(KeyboardInterrupt):
        write_whole(path, write)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_new_file_that_fails_is_not_created(tmp_path):
    with pytest.raises(ValueError):
        write_whole(tmp_path / "cache.json.gz", lambda f: (_ for _ in ()).throw(ValueError("no")))
    assert list(tmp_path.iterdir()) == []
