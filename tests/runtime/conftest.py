"""Fixtures of the runtime's tests."""

from __future__ import annotations

from typing import Any

import pytest

from toolcat import ToolResult
from toolcat.runtime.call import Runtime


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path each acall took: ``direct`` (the tool thread alone) or ``call`` (a thread
    running ``Runtime.call``, which hands the tool to another)."""
    taken: list[str] = []
    run_here, call = Runtime._run_here, Runtime.call

    def spy_run_here(self: Runtime, *args: Any, **kwargs: Any) -> ToolResult:
        taken.append("direct")
        return run_here(self, *args, **kwargs)

    def spy_call(self: Runtime, *args: Any, **kwargs: Any) -> ToolResult:
        taken.append("call")
        return call(self, *args, **kwargs)

    monkeypatch.setattr(Runtime, "_run_here", spy_run_here)
    monkeypatch.setattr(Runtime, "call", spy_call)
    return taken
