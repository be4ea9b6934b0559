"""Process isolation kills every process a tool started, even one that detached itself with
a double fork and ``setsid()``: at a timeout, and when the worker exits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_for(path: Path, seconds: float = 10) -> int:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return int(path.read_text())


def wait_gone(pid: int, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return gone(pid)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.daemon_tools"))
    return path


def test_a_timeout_kills_a_detached_grandchild(db: Path, tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    with Catalog(db, isolation="process") as catalog:
        result = catalog.call("detach_and_hang", {"marker": str(marker)}, timeout=1.5)
        assert result.error_code == "TIMEOUT"
        assert wait_gone(wait_for(marker))
        assert catalog.call("detach_and_return", {"marker": str(tmp_path / "m2")}).success


def test_closing_the_catalog_kills_what_a_finished_tool_left_running(
    db: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "grandchild.pid"
    with Catalog(db, isolation="process") as catalog:
        assert catalog.call("detach_and_return", {"marker": str(marker)}).data == "started"
        grandchild = wait_for(marker)
        assert not gone(grandchild)  # a tool may start a helper that outlives its call
    assert wait_gone(grandchild)


def test_the_cli_returns_and_releases_its_stderr_at_the_timeout(db: Path, tmp_path: Path) -> None:
    """`capture_output` waits for every holder of the pipes: a surviving grandchild would
    keep this run waiting for its 120 s."""
    marker = tmp_path / "grandchild.pid"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "call", "detach_and_hang",
         "--args", f'{{"marker": "{marker}"}}', "--timeout", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert "error (TIMEOUT)" in done.stderr
    assert wait_gone(int(marker.read_text()))
