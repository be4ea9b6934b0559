"""The reindex progress line: tools done of all, tools/s and the time left."""

from __future__ import annotations

import pytest

from toolcat.cli.admin import ReindexProgress, progress_line


@pytest.mark.parametrize(
    ("done", "total", "rate", "line"),
    [
        (0, 10, None, "embedded 0/10"),
        (500, 2000, 100.0, "embedded 500/2000 (100 tools/s, ETA 0:00:15)"),
        (1000, 1_000_000, 143.0, "embedded 1000/1000000 (143 tools/s, ETA 1:56:26)"),
        (10, 10, 5.0, "embedded 10/10 (5 tools/s, ETA 0:00:00)"),
    ],
    ids=["no-rate-yet", "seconds", "hours", "done"],
)
def test_progress_line(done: int, total: int, rate: float | None, line: str) -> None:
    assert progress_line(done, total, rate) == line


def test_progress_counts_from_the_first_batch_and_always_shows_the_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = [100.0]
    progress = ReindexProgress(terminal=False, clock=lambda: now[0])
    for at, done in [(100.0, 64), (101.0, 128), (102.5, 192), (103.0, 256), (103.5, 1000)]:
        now[0] = at
        progress(done, 1000)
    progress.finish()
    # the export and model load before the first batch are not counted; a line per 2 s
    assert capsys.readouterr().err.splitlines() == [
        "embedded 64/1000",
        "embedded 192/1000 (51 tools/s, ETA 0:00:16)",
        "embedded 1000/1000 (267 tools/s, ETA 0:00:00)",
    ]


def test_progress_on_a_terminal_rewrites_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    now = [0.0]
    progress = ReindexProgress(terminal=True, clock=lambda: now[0])
    for at, done in [(0.0, 10), (0.2, 20), (1.0, 30), (1.1, 40)]:
        now[0] = at
        progress(done, 40)
    progress.finish()
    err = capsys.readouterr().err
    assert err == (
        "\rembedded 10/40\x1b[K"
        "\rembedded 30/40 (20 tools/s, ETA 0:00:00)\x1b[K"
        "\rembedded 40/40 (27 tools/s, ETA 0:00:00)\x1b[K\n"
    )
