"""A tool reporting in a tight loop: its events are coalesced and bounded on every path
(thread and process isolation, ``acall``'s delivery), and the last progress still arrives."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, ToolEvent
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import events

FLOOD = 100_000


@pytest.fixture(scope="module")
def rt_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bounds") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools"))
    return path


def most_passed(seconds: float) -> int:
    """What the gate lets through in ``seconds``: a burst, the rate, the held ones, a note."""
    return events.BURST + int(seconds * events.PER_SECOND) + 4


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_flood_of_progress_is_coalesced_and_the_last_progress_arrives(
    rt_db: Path, isolation: str
) -> None:
    seen: list[ToolEvent] = []
    with Catalog(rt_db, isolation=isolation) as catalog:
        started = time.monotonic()
        result = catalog.call("counts", {"steps": FLOOD}, on_event=seen.append)
        took = time.monotonic() - started
    assert result.success and result.data == FLOOD
    assert len(seen) <= most_passed(took), len(seen)
    progress = [e for e in seen if e.kind == "progress"]
    assert (progress[-1].progress, progress[-1].total) == (FLOOD, FLOOD)
    assert progress[-1].message == f"step {FLOOD}"
    done = [e.progress or 0 for e in progress]
    assert done == sorted(done)
    (note,) = [e for e in seen if e.level == "warning"]
    assert "events of this call not passed on" in (note.message or "")
    assert seen == result.events[-len(seen) :] or len(result.events) == events.MAX_EVENTS


def test_log_lines_stop_at_the_cap_with_one_note(rt_db: Path) -> None:
    seen: list[ToolEvent] = []
    with Catalog(rt_db) as catalog:
        result = catalog.call("reports", {"logs": events.MAX_LOGS + 500}, on_event=seen.append)
    assert result.success
    logs = [e for e in seen if e.kind == "log"]
    assert len(logs) == events.MAX_LOGS + 1
    assert logs[-2].message == f"line {events.MAX_LOGS - 1}"
    assert "500 events of this call not passed on" in (logs[-1].message or "")
    assert [e.kind for e in seen[-3:]] == ["status", "progress", "log"]  # nothing else lost


def test_acall_delivers_a_flood_in_little_memory(rt_db: Path) -> None:
    delivered: list[tuple[float | None, float | None]] = []

    async def on_event(event: ToolEvent) -> None:
        await asyncio.sleep(0)  # a callback that sends, like an MCP server's
        if event.kind == "progress":
            delivered.append((event.progress, event.total))

    async def call(catalog: Catalog) -> Any:
        return await catalog.acall("counts", {"steps": FLOOD}, on_event=on_event)

    with Catalog(rt_db) as catalog:
        catalog.call("counts", {"steps": 1})  # imported before measuring
        tracemalloc.start()
        try:
            result = asyncio.run(call(catalog))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.success
    assert peak < 8 * 1024 * 1024, f"{peak:,} bytes at the peak"
    assert delivered[-1] == (FLOOD, FLOOD)  # delivered before acall returned


def test_the_gate_holds_the_latest_of_each_kind_and_passes_them_at_the_end() -> None:
    passed: list[dict[str, Any]] = []
    gate = events.Gate(passed.append)
    for i in range(events.BURST):
        gate({"kind": "progress", "progress": i})
    gate({"kind": "progress", "progress": 1000})  # over the burst: held
    gate({"kind": "status", "state": "late"})  # held too, after it
    gate({"kind": "progress", "progress": 1001})  # replaces the held progress
    gate({"kind": "artifact", "name": "a.csv"})  # artifacts are never held
    assert len(passed) == events.BURST + 1 and passed[-1]["kind"] == "artifact"
    gate.end()
    held = [{"kind": "status", "state": "late"}, {"kind": "progress", "progress": 1001}]
    assert passed[-3:-1] == held
    assert passed[-1]["level"] == "warning" and passed[-1]["message"].startswith("1 events")
