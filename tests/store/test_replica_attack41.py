"""attack41: follow mode's files as bounded input (their owner and mode, the replica's
folder), against the real Litestream."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store import test_replica as base
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = base.pytestmark
primary = base.primary  # the fixture, from the real Litestream


@pytest.fixture
def group_umask() -> Iterator[None]:
    """The umask of a user with a group of their own (Ubuntu's default, 002)."""
    before = os.umask(0o002)
    yield
    os.umask(before)


def test_follow_mode_takes_each_change_under_a_group_umask(
    primary: base.Primary,
    tmp_path: Path,
    group_umask: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Litestream wrote its staging file and -txid 0664 under the replica's umask 002, which
    # the check of follow mode's files refuses as writable by others: follow mode was never
    # used, and each change waited FOLLOW_GRACE (20 s) for a full restore.
    primary.register(base.SAMPLE_TOOLKITS / "math.yaml")
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    try:
        base.synced(follower)
        for toolkit in ("text.yaml", "files.yaml"):
            revision = primary.register(base.SAMPLE_TOOLKITS / toolkit)
            started = time.monotonic()
            base.synced(follower, seconds=30)
            assert follower.state["revision"] == revision
            assert time.monotonic() - started < replica.FOLLOW_GRACE / 2
        assert "copy" in follower.steps and "restore" not in follower.steps
        assert follower.staging is not None
        for name in (follower.staging, Path(f"{follower.staging}-txid")):
            assert not os.stat(name).st_mode & 0o022  # none others may write
    finally:
        follower.close()
