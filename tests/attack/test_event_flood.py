"""A tool that reports artifacts in a loop: past the per-call count each became a warning log
event that no gate counted, so 20,000 tiny artifacts sent 19,968 log events to the caller's
callback (and over MCP, into the delivery queue) although log lines stop at ``MAX_LOGS``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from toolcat import Catalog, ToolEvent
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts, events

FLOOD = 20_000


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flood") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.attack.tools"))
    return path


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_artifacts_past_the_count_are_bounded_like_log_lines(db: Path, isolation: str) -> None:
    seen: list[ToolEvent] = []
    with Catalog(db, isolation=isolation) as catalog:
        result = catalog.call("spam_artifacts", {"count": FLOOD}, on_event=seen.append)
    assert result.success and result.data == FLOOD
    kinds = Counter(event.kind for event in seen)
    assert kinds["artifact"] == artifacts.MAX_ARTIFACTS
    assert kinds["log"] <= events.MAX_LOGS + 1, kinds  # the lines, and the note of the rest
    warnings = [e.message or "" for e in seen if e.kind == "log"]
    assert "at most 32 per call" in warnings[0]
    assert "events of this call not passed on" in warnings[-1]
