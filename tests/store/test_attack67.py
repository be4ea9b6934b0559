"""attack67: a fresh replica's wait for follow mode is bounded by what its server waits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from toolcat.store import replica
from toolcat.store.replica import Follower


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Follower, Clock]:
    clock = Clock()
    monkeypatch.setattr(replica.time, "monotonic", clock)
    store = tmp_path / "store"
    store.mkdir()
    folder = tmp_path / "replica"
    folder.mkdir(mode=0o700)
    follower = Follower(folder / "catalog.db", store.as_uri(), litestream="/bin/false", follow=True)
    # follow mode runs (its first restore of a big catalog under way)
    follower._follower = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
    follower._follow_starts = [clock.now]
    return follower, clock


def _write_txid(follower: Follower, txid: int) -> None:
    sidecar = f"{follower.staging}-txid"
    fd = os.open(f"{sidecar}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, f"{txid:016x}\n".encode())
    os.close(fd)
    os.replace(f"{sidecar}.tmp", sidecar)


def test_a_fresh_replica_behind_a_busy_primary_restores_in_full_within_the_servers_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Follow mode's file moves on at every look (a busy primary: each transaction applied
    a second late, its -txid always one behind the store's newest at the look). The fresh
    replica waits for it while it moves, up to RESTORE_TIMEOUT (600 s), though `serve
    --replica-wait` gives up after 300 s by default: the server exits at startup with no
    first revision, where a full restore (or the old 20 s grace) would have served."""
    follower, clock = _fresh(tmp_path, monkeypatch)
    try:
        assert follower.state.get("txid") is None and not follower.path.exists()
        assert follower.staging is not None
        follower.staging.write_bytes(b"\0" * 4096)
        os.chmod(follower.staging, 0o600)
        server_wait = 300.0  # `toolcat serve --replica-wait` default
        gave_up_at = None
        txid = 1
        for second in range(int(replica.RESTORE_TIMEOUT) + 5):
            _write_txid(follower, txid)  # applied one more: the file moved on
            txid += 1
            if not follower._follow_soon():
                gave_up_at = second
                break
            clock.now += 1.0
        assert gave_up_at is not None
        assert gave_up_at < server_wait, (
            f"a fresh replica waited {gave_up_at} s for follow mode, past {server_wait:g} s"
        )
    finally:
        follower._follower.kill()
        follower._follower.wait()
        follower.close()


def test_held_a_fresh_replica_whose_follow_file_stands_still_restores_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower, clock = _fresh(tmp_path, monkeypatch)
    try:
        assert follower.staging is not None
        follower.staging.write_bytes(b"\0" * 4096)
        os.chmod(follower.staging, 0o600)
        _write_txid(follower, 5)
        gave_up_at = None
        for second in range(100):
            if not follower._follow_soon():
                gave_up_at = second
                break
            clock.now += 1.0
        assert gave_up_at is not None and gave_up_at <= replica.FOLLOW_GRACE + 1
    finally:
        follower._follower.kill()
        follower._follower.wait()
        follower.close()
