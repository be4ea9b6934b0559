"""A fresh replica waits for follow mode's first restore while its file grows, not
``FOLLOW_GRACE`` from its first look: the file shows while the snapshot is restored, and a
look then restored the whole catalog in full beside it (at 1M tools with vectors, a second
download of 4 GB: 56 s more before the replica first answered). A file that stands still
for ``FOLLOW_GRACE`` is restored in full, as before (attack66: a follow mode that hangs),
and so is one that holds transactions but stays behind for ``FOLLOW_GRACE`` (attack67: a
busy primary)."""

from __future__ import annotations

import os
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


def test_a_fresh_replica_waits_for_follow_modes_first_restore_while_it_moves_on(
    primary: Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    restores = behind(monkeypatch)
    monkeypatch.setattr(replica, "FOLLOW_GRACE", 0.5)
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    try:
        wait_for_staging(follower)
        assert follower.staging is not None
        # still restoring its snapshot: no transaction in its -txid yet
        monkeypatch.setattr(Follower, "_staged_txid", lambda self: None)
        deadline, tick = time.monotonic() + 2.0, 0  # four times FOLLOW_GRACE
        while time.monotonic() < deadline:
            tick += 1  # follow mode applying the transactions after its snapshot
            os.utime(follower.staging, ns=(tick * 10**9, tick * 10**9))
            assert not follower.sync()
            time.sleep(0.1)
        assert restores == [] and not follower.path.exists()
        time.sleep(0.6)  # then it stands still past FOLLOW_GRACE: restored in full
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
