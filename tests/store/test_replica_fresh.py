"""A fresh replica waits for follow mode's first restore, not for ``FOLLOW_GRACE``: its
file shows before the transactions after the snapshot are applied, and a look in that
moment restored the whole catalog in full beside it (at 1M tools with vectors, a second
download of 4 GB: 56 s more before the replica first answered)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store import test_replica as base
from tests.store.test_replica import LITESTREAM, Primary
from toolcat.store import replica
from toolcat.store.replica import Follower

primary = base.primary  # the fixture, from the real Litestream

pytestmark = pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")


def behind(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Follow mode runs, but its file never holds the newest transaction (``_staged``
    None); each full restore is counted."""
    restores: list[int] = []
    original = Follower._restore

    def staged(self: Follower, newest: int, steps: dict[str, float]) -> None:
        self._following()

    def restore(self: Follower, txid: int, steps: dict[str, float]) -> Any:
        restores.append(txid)
        return original(self, txid, steps)

    monkeypatch.setattr(Follower, "_staged", staged)
    monkeypatch.setattr(Follower, "_restore", restore)
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    monkeypatch.setattr(replica, "FOLLOW_GRACE", 0.0)
    return restores


def wait_for_staging(follower: Follower) -> None:
    assert follower.staging is not None
    deadline = time.monotonic() + 30
    while not follower.staging.exists():
        assert time.monotonic() < deadline
        follower.sync()
        time.sleep(0.1)


def test_a_fresh_replica_waits_for_follow_modes_first_restore(
    primary: Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    restores = behind(monkeypatch)
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    try:
        wait_for_staging(follower)
        for _ in range(5):  # past FOLLOW_GRACE, follow mode's file there and behind
            assert not follower.sync()
        assert restores == [] and not follower.path.exists()
        # Up to RESTORE_TIMEOUT: then it restores in full after all.
        follower._waiting_since = time.monotonic() - replica.RESTORE_TIMEOUT - 1
        assert follower.sync()
        assert len(restores) == 1 and follower.serving
    finally:
        follower.close()


def test_a_serving_replica_still_restores_in_full_past_follow_grace(
    primary: Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    try:
        base.synced(follower)
        restores = behind(monkeypatch)
        wait_for_staging(follower)
        revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
        base.synced(follower)
        assert len(restores) == 1 and follower.state["revision"] == revision
    finally:
        follower.close()
