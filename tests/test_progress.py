"""Progress where stderr is not a terminal (issue 43 item 5): a plain line every few seconds once
the work has run that long, nothing for short work or when progress is off."""

import time

import rlplace.progress
from rlplace.progress import progress_bar


def run(seconds: float, steps: int = 10, **options) -> None:
    bar = progress_bar(total=steps, desc="work", **options)
    for _ in range(steps):
        time.sleep(seconds / steps)
        bar.update(1)
    bar.close()


def test_long_work_shows_lines_in_a_log_and_short_work_none(monkeypatch, capsys):
    monkeypatch.setattr(rlplace.progress, "LINE_SECONDS", 0.2)
    run(0.02)
    assert capsys.readouterr().err == ""
    run(1.0)
    lines = capsys.readouterr().err.splitlines()
    assert 2 <= len(lines) <= 8 and all(line.startswith("work:") and "\r" not in line for line in lines), lines
    assert lines[-1].startswith("work: 100%")
    run(1.0, show=False)
    assert capsys.readouterr().err == ""
