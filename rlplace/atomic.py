"""Writing a file whole or not at all.

A cache file, a training checkpoint or shipped weights that a killed process left half written
would fail the next read, or be read as something else. ``write_whole`` writes beside the file
and renames into place (``os.replace``, atomic within one filesystem), so a reader sees the
previous file or the new one; processes that write the same file at once each write their own
and the last rename wins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable


def write_whole(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write`` with a binary file beside ``path``, then rename it to ``path``. When
    ``write`` raises, ``path`` is left as it was and the partial file is removed."""
    path = Path(path)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as f:
            write(f)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
