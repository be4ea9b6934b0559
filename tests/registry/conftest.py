"""Fixtures of the registration workers' tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolcat.registry import parallel


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Registrations in these tests use two workers whatever their size; the files whose worker
    answers this process took (so a test knows the workers ran)."""
    monkeypatch.setenv("TOOLCAT_REGISTER_WORKERS", "2")
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    # threads left by earlier tests (the CLI's, servers') would keep the workers from forking
    monkeypatch.setattr(parallel, "_can_fork", lambda: True)
    taken: list[Path] = []
    accept = parallel._accept

    def counted(path: Path, answer: Any) -> Any:
        taken.append(path)
        return accept(path, answer)

    monkeypatch.setattr(parallel, "_accept", counted)
    return taken
