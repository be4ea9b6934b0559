"""A tool that escapes the subreaper: it clears ``PR_SET_CHILD_SUBREAPER`` on its worker and
double-forks, so its grandchild is reparented out of the worker's tree. In a PID namespace
per worker it still dies with the worker; where the system gives no namespace, it escapes,
as docs/calling.md says, and ``toolcat status`` says which is in force."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.test_reaper import gone, wait_for, wait_gone
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import containment, processes, reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

NAMESPACE = containment.probe() == containment.PID_NAMESPACE
NO_NAMESPACE = "this system gives a worker no PID namespace (`toolcat status` says so)"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.daemon_tools"))
    return path


@pytest.fixture
def without_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers started as where the system allows no namespace: the subreaper alone."""
    monkeypatch.setattr(processes, "WORKER_ARGS", containment.WORKER_WITHOUT_NAMESPACE)


@pytest.fixture
def survivors() -> Iterator[list[int]]:
    """Pids a test expects to outlive their worker; killed at the end whatever happens."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def escape_past_the_timeout(db: Path, marker: Path) -> int:
    """Call ``escape_and_hang`` on a warm worker until it times out; the grandchild's pid."""
    with Catalog(db, isolation="process") as catalog:
        assert catalog.call("ready").data == "ready"  # the timeout measures the tool, not a start
        result = catalog.call("escape_and_hang", {"marker": str(marker)}, timeout=2)
        assert result.error_code == "TIMEOUT", result.error
        return wait_for(marker)


@pytest.mark.skipif(not NAMESPACE, reason=NO_NAMESPACE)
def test_a_tool_that_clears_the_subreaper_flag_cannot_outlive_its_timeout(
    db: Path, tmp_path: Path, survivors: list[int]
) -> None:
    grandchild = escape_past_the_timeout(db, tmp_path / "grandchild.pid")
    survivors.append(grandchild)
    assert wait_gone(grandchild)


@pytest.mark.skipif(not NAMESPACE, reason=NO_NAMESPACE)
def test_what_such_a_tool_left_running_dies_when_its_worker_exits(
    db: Path, tmp_path: Path, survivors: list[int]
) -> None:
    marker = tmp_path / "grandchild.pid"
    with Catalog(db, isolation="process") as catalog:
        assert catalog.call("escape_and_return", {"marker": str(marker)}).data == "started"
        grandchild = wait_for(marker)
        survivors.append(grandchild)
        assert not gone(grandchild)  # a helper may outlive its call, not its worker
    assert wait_gone(grandchild)


@pytest.mark.usefixtures("without_namespace")
def test_without_a_namespace_such_a_tool_escapes_as_documented(
    db: Path, tmp_path: Path, survivors: list[int]
) -> None:
    grandchild = escape_past_the_timeout(db, tmp_path / "grandchild.pid")
    survivors.append(grandchild)
    assert not gone(grandchild)
    assert grandchild not in reaper.descendants(os.getpid())  # out of every tree we sweep


@pytest.mark.usefixtures("without_namespace")
def test_without_a_namespace_the_subreaper_still_catches_a_plain_double_fork(
    db: Path, tmp_path: Path, survivors: list[int]
) -> None:
    marker = tmp_path / "grandchild.pid"
    with Catalog(db, isolation="process") as catalog:
        assert catalog.call("ready").data == "ready"
        result = catalog.call("detach_and_hang", {"marker": str(marker)}, timeout=2)
        assert result.error_code == "TIMEOUT"
        grandchild = wait_for(marker)
        survivors.append(grandchild)
        assert wait_gone(grandchild)


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGSEGV])
def test_a_worker_killed_by_a_signal_is_reported_by_its_name(db: Path, number: int) -> None:
    """In namespace mode the pid toolcat started is not the worker: it passes the worker's
    end on, signal included."""
    with Catalog(db, isolation="process") as catalog:
        result = catalog.call("die_of", {"signal_number": int(number)})
        assert result.error_code == "TOOL_ERROR"
        assert f"killed by {signal.Signals(number).name}" in (result.error or "")
        assert catalog.call("ready").data == "ready"  # a fresh worker takes over


def test_status_says_which_containment_is_in_force(db: Path) -> None:
    def status(*args: str) -> str:
        command = [sys.executable, "-m", "toolcat", "--db", str(db), "status", *args]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout

    expected = containment.probe()
    assert json.loads(status("--json"))["containment"] == expected
    assert f"processes {expected}: {containment.MEANING[expected]}" in status()
