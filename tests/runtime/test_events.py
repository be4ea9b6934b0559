"""Every A2E event kind (progress, status, artifact, log) through ``Catalog.call``: in thread
and process isolation, in ``ToolResult.events`` and to ``on_event``, within their bounds."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolcat import Catalog, ToolEvent, report_artifact, report_status
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts, events

MODES = ["thread", "process"]


@pytest.fixture(scope="module")
def rt_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("events") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools"))
    return path


@pytest.fixture(params=MODES)
def rt(
    request: pytest.FixtureRequest, rt_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Catalog]:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(tmp_path / "artifacts"))
    with Catalog(rt_db, isolation=request.param) as catalog:
        yield catalog


def test_every_kind_reaches_the_result_and_the_callback(rt: Catalog) -> None:
    seen: list[ToolEvent] = []
    result = rt.call("reports", {"artifacts": 2, "logs": 1}, on_event=seen.append)
    assert result.success and result.data == "reported"
    assert seen == result.events
    kinds = [e.kind for e in result.events]
    assert kinds == ["status", "log", "progress", "artifact", "artifact", "status", "progress"]
    status = result.events[0]
    assert (status.state, status.message) == ("starting", "warming up")
    assert result.events[5].state == "done" and result.events[5].message is None
    table, blob = result.artifacts
    assert (table.name, table.mime_type, table.size) == ("table-0.csv", "text/csv", 8)
    assert table.text == "a,b\n0,0\n" and table.content() == b"a,b\n0,0\n" and table.uri is None
    assert (blob.name, blob.mime_type, blob.message) == (
        "blob-1.bin",
        "application/octet-stream",
        "bytes 1",
    )
    assert blob.content() == b"\x01" * 10 and blob.text is None
    elapsed = [e.elapsed_ms for e in result.events]
    assert elapsed == sorted(elapsed)


def test_a_large_artifact_is_a_file_in_the_calls_folder(rt: Catalog, tmp_path: Path) -> None:
    size = artifacts.INLINE_BYTES + 1
    result = rt.call("reports", {"artifacts": 0, "big": size})
    (big,) = result.artifacts
    assert big.text is None and big.blob is None and big.size == size
    assert big.uri is not None and big.uri.startswith("file://")
    path = Path(big.uri.removeprefix("file://"))
    # The name lost its folder part; the file sits in this call's own folder.
    assert path.name == "big_report.txt"
    assert path.parent.parent == tmp_path / "artifacts"
    assert big.content() == b"x" * size
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    again = rt.call("reports", {"artifacts": 0, "big": size}).artifacts[0]
    assert Path(again.uri.removeprefix("file://")).parent != path.parent  # type: ignore[union-attr]


def test_bounds_keep_artifacts_and_say_what_was_not_kept(rt: Catalog) -> None:
    n = artifacts.MAX_ARTIFACTS + 2
    result = rt.call("reports", {"artifacts": n, "logs": events.MAX_EVENTS})
    assert len(result.events) == events.MAX_EVENTS
    assert len(result.artifacts) == artifacts.MAX_ARTIFACTS  # none pushed out by log lines
    warnings = [e.message for e in result.events if e.level == "warning"]
    assert len(warnings) == 2 and all("at most 32 per call" in (w or "") for w in warnings)
    assert result.events[-1].kind == "progress"  # the latest kept, the oldest logs gone


def test_an_artifact_over_the_limit_is_refused_in_the_tool(rt: Catalog) -> None:
    refused = rt.call("reports", {"too_big": True})
    assert not refused.success and refused.error_code == "TOOL_ERROR"
    assert "at most 33,554,432" in (refused.error or "")
    caught = rt.call("reports", {"too_big": True, "catch": True})
    assert caught.success and "huge.bin refused" in [e.message for e in caught.events]


def test_reporters_do_nothing_outside_a_call() -> None:
    report_status("idle")
    report_artifact("x.txt", "x")
    with pytest.raises(TypeError):
        report_artifact("x.txt", 3)  # type: ignore[arg-type]


def test_old_call_folders_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(tmp_path))
    old, fresh = tmp_path / f"call-{'0' * 32}", tmp_path / f"call-{'1' * 32}"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "a.csv").write_text("a")
    past = time.time() - artifacts.TTL_SECONDS - 60
    os.utime(old, (past, past))
    artifacts.CallFolder().write("new.csv", b"n")  # a new call folder sweeps the old ones
    assert not old.exists() and fresh.exists()
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("..", "artifact"),
        (".hidden", "hidden"),
        ("a b/c?.csv", "c_.csv"),
    ],
)
def test_artifact_names_never_leave_the_folder(name: str, safe: str) -> None:
    assert artifacts.safe_name(name) == safe
