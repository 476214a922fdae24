"""Progress bars as rlplace shows them: on a terminal tqdm's bar; where stderr is a log file or a
pipe, a plain line every ``LINE_SECONDS`` once the work has run that long (tqdm's ``delay`` and
``mininterval``), so a log shows long work too and short work prints nothing."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

LINE_SECONDS = 5.0


class _Lines:
    """A stream for tqdm that writes each refresh as one line (tqdm's carriage returns dropped)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Any = None, *, show: bool = True, **options: Any) -> tqdm:
    """tqdm over ``iterable`` (or with ``total=``), none when ``show`` is false (module docstring)."""
    if not show:
        return tqdm(iterable, disable=True, **options)
    if sys.stderr.isatty():
        return tqdm(iterable, **options)
    return tqdm(iterable, file=_Lines(sys.stderr), mininterval=LINE_SECONDS, delay=LINE_SECONDS, ascii=True,
                **options)
