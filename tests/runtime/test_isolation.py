"""Timeouts that stop the work, failures of any kind as results, a tool's stdout kept off
the protocol, and progress events: in both isolation modes, with real worker processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, run_script
from toolcat import Catalog, ToolEvent
from toolcat.registry.python import toolkit_from_module

MODES = ["thread", "process"]


@pytest.fixture(scope="module")
def rt_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rt") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools"))
    return path


@pytest.fixture(scope="module", params=MODES)
def rt(request: pytest.FixtureRequest, rt_db: Path) -> Iterator[Catalog]:
    with Catalog(rt_db, isolation=request.param) as catalog:
        yield catalog


@pytest.fixture(scope="module")
def proc(rt_db: Path) -> Iterator[Catalog]:
    with Catalog(rt_db, isolation="process") as catalog:
        yield catalog


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_modes_run_where_they_say(rt: Catalog) -> None:
    first, second = rt.call("pid").data, rt.call("pid").data
    if rt.isolation == "thread":
        assert first == second == os.getpid()
    else:  # one worker, reused: the implementation is imported once
        assert first == second != os.getpid()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("interrupts", "KeyboardInterrupt: from the tool"),
        ("generator_exit", "GeneratorExit: from the tool"),
        ("exits", "SystemExit: 3"),
        ("async_interrupts", "KeyboardInterrupt: from the coroutine"),
    ],
)
def test_any_base_exception_is_a_tool_error(rt: Catalog, name: str, message: str) -> None:
    result = rt.call(name)
    assert (result.success, result.error_code, result.error) == (False, "TOOL_ERROR", message)
    assert rt.call("quick").data == "ok"  # the runtime (and its event loop) still works


def test_a_worker_that_dies_is_a_tool_error_and_is_replaced(proc: Catalog) -> None:
    before = proc.call("pid").data
    result = proc.call("hard_exit", {"code": 7})
    assert result.error_code == "TOOL_ERROR"
    assert "exited with code 7" in (result.error or "")
    after = proc.call("pid").data
    assert after != before and gone(before)


@pytest.mark.parametrize("name", ["nap", "async_nap"])
def test_timeouts_return_at_the_timeout(rt: Catalog, name: str) -> None:
    rt.call("quick")  # start the worker first: this measures the timeout, not a cold start
    started = time.monotonic()
    result = rt.call(name, {"seconds": 5}, timeout=0.5)
    elapsed = time.monotonic() - started
    assert result.error_code == "TIMEOUT" and "0.5 s" in (result.error or "")
    assert 0.45 <= elapsed < 2.0, elapsed
    stopped = rt.isolation == "process" or name == "async_nap"
    assert ("may still be running" in (result.error or "")) is not stopped


def test_process_timeout_kills_the_work_and_its_children(proc: Catalog, tmp_path: Path) -> None:
    worker = proc.call("pid").data
    marker = tmp_path / "child.pid"
    result = proc.call("spawns", {"marker": str(marker), "seconds": 30}, timeout=1.5)
    assert result.error_code == "TIMEOUT"
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while not (gone(worker) and gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(worker) and gone(child)
    assert proc.call("quick").data == "ok"  # a fresh worker takes over


def test_process_timeout_stops_a_gil_holding_c_loop(proc: Catalog) -> None:
    proc.call("quick")
    started = time.monotonic()
    result = proc.call("spin", {"length": 80}, timeout=1)  # `re` backtracking, GIL held
    assert result.error_code == "TIMEOUT"
    assert time.monotonic() - started < 3


def test_max_concurrency_slot_is_free_after_a_process_timeout(proc: Catalog) -> None:
    assert proc.call("single", {"seconds": 10}, timeout=0.5).error_code == "TIMEOUT"
    started = time.monotonic()
    assert proc.call("single", {"seconds": 0}, timeout=5).success  # the killed call's slot
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True])
def test_timeouts_must_be_above_zero(rt: Catalog, timeout: Any) -> None:
    result = rt.call("quick", timeout=timeout)
    assert result.error_code == "INVALID_ARGUMENTS"
    assert "timeout must be a number of seconds above 0" in (result.error or "")


def test_default_timeout_is_checked_too(rt_db: Path) -> None:
    from toolcat import InvalidArgumentsError

    with pytest.raises(InvalidArgumentsError, match="default_timeout must be"):
        Catalog(rt_db, default_timeout=0)
    with pytest.raises(ValueError, match="isolation must be"):
        Catalog(rt_db, isolation="fork")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["counts", "async_counts"])
def test_progress_events_reach_the_result_and_the_callback(rt: Catalog, name: str) -> None:
    seen: list[ToolEvent] = []
    result = rt.call(name, {"steps": 3}, on_event=seen.append)
    assert result.data == 3
    progress = [(e.progress, e.total) for e in result.events if e.kind == "progress"]
    assert progress == [(1, 3), (2, 3), (3, 3)]
    assert seen == result.events
    if name == "counts":
        assert result.events[0].kind == "log" and result.events[0].message == "starting"
        assert result.events[1].message == "step 1"
    assert all(e.elapsed_ms >= 0 for e in result.events)


def test_acall_delivers_events_on_the_event_loop(rt: Catalog) -> None:
    async def main() -> tuple[Any, list[bool]]:
        loop_thread = threading.get_ident()
        on_loop: list[bool] = []

        async def record(event: ToolEvent) -> None:
            on_loop.append(threading.get_ident() == loop_thread)

        result = await rt.acall("counts", {"steps": 2}, on_event=record)
        await asyncio.sleep(0.05)  # let the last callbacks run
        return result.data, on_loop

    data, on_loop = asyncio.run(main())
    assert data == 2 and on_loop == [True, True, True]


PRINT_SCRIPT = """
import json, sys
from toolcat import Catalog
with Catalog(sys.argv[1], isolation="process") as catalog:
    result = catalog.call("chatty", {"text": "x"})
print(json.dumps(result.data))
"""


def test_a_tools_stdout_never_reaches_the_callers_stdout(rt_db: Path) -> None:
    out = run_script(PRINT_SCRIPT, str(rt_db), timeout=60)
    assert out.stdout.strip() == '"x"'  # the protocol (here: the script's output) is clean
    assert "PRINTED-BY-TOOL x" in out.stderr and "WRITTEN-TO-FD-1" in out.stderr


def toolcat(db: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
    )
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def cold(rt_db: Path) -> float:
    """Seconds `toolcat call quick` takes here (interpreter start, worker start)."""
    return toolcat(rt_db, "call", "quick")[1]


@pytest.mark.parametrize(
    "args",
    [
        ["call", "nap", "--args", '{"seconds": 20}', "--timeout", "1"],
        ["--isolate", "thread", "call", "nap", "--args", '{"seconds": 20}', "--timeout", "1"],
        ["call", "spin", "--args", '{"length": 80}', "--timeout", "1"],
        ["--isolate", "thread", "call", "async_nap", "--args", '{"seconds": 20}', "--timeout", "1"],
    ],
    ids=["process-sleep", "thread-sleep", "process-gil-loop", "thread-async"],
)
def test_cli_returns_at_the_timeout(rt_db: Path, cold: float, args: list[str]) -> None:
    done, elapsed = toolcat(rt_db, *args)
    assert done.returncode == 11, done.stderr  # TIMEOUT
    assert "error (TIMEOUT)" in done.stderr
    assert "Task was destroyed" not in done.stderr
    assert elapsed < cold + 1 + 3, (elapsed, cold)  # the 20 s of work did not hold it


@pytest.mark.slow
def test_cli_calculate_huge_power_stops_at_the_timeout(tmp_path: Path) -> None:
    from tests.helpers import SAMPLE_TOOLKITS

    db = tmp_path / "samples.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    cold = toolcat(db, "call", "calculate", "--args", '{"expression": "1+1"}')[1]
    done, elapsed = toolcat(
        db, "call", "calculate", "--args", json.dumps({"expression": "(9**9999)**9999"}),
        "--timeout", "2",
    )  # fmt: skip
    assert elapsed < cold + 2 + 3, (elapsed, cold)
    assert "error (" in done.stderr  # TIMEOUT, or the tool's own refusal of huge powers


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_cli_refuses_timeouts_not_above_zero(rt_db: Path, timeout: str) -> None:
    from click.testing import CliRunner

    from toolcat.cli import cli

    done = CliRunner().invoke(cli, ["--db", str(rt_db), "call", "quick", "--timeout", timeout])
    assert done.exit_code == 10
    assert "timeout must be a number of seconds above 0" in done.stderr
