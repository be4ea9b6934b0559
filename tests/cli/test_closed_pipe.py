"""A command whose reader went away (``toolcat status | head -1``) ends quietly, as ``cat``
and ``git`` do: no traceback, no "bug" line, exit 141 (what a shell reports for SIGPIPE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.cli.text import CLOSED_PIPE_EXIT


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipe") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def into_closed_pipe(db: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``toolcat ARGS`` with stdout a real pipe whose reading end is already closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "TOOLCAT_DB": str(db), "PYTHONPATH": str(Path("src").resolve())}
    try:
        return subprocess.run(
            [sys.executable, "-m", "toolcat", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("show", "read_file"),
        ("list", "--include-deferred"),
        ("search", "read a file", "--mode", "bm25"),
        ("toolkits",),
        ("status", "--json"),
        ("--isolate", "thread", "call", "calculate", "--args", '{"expression": "1+1"}'),
    ],
    ids=lambda args: "-".join(a for a in args if not a.startswith("{")),
)
def test_a_closed_pipe_ends_quietly(db: Path, args: tuple[str, ...]) -> None:
    done = into_closed_pipe(db, *args)
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode == CLOSED_PIPE_EXIT
