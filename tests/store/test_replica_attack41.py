"""attack41: follow mode's files as bounded input (their owner and mode, the replica's
folder), against the real Litestream."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store import test_replica as base
from tests.store.test_replica_bounds import WRITE_LOCK
from toolcat.errors import CatalogError
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
        # The second change patched the copy served before the first (its standby).
        assert "patch" in follower.steps and "restore" not in follower.steps
        assert follower.staging is not None
        for name in (follower.staging, Path(f"{follower.staging}-txid"), follower.path):
            assert not os.stat(name).st_mode & 0o022  # none others may write
    finally:
        follower.close()


def hold_write_lock(path: Path, seconds: float, *, writing: bool) -> threading.Thread:
    """A thread holding a write lock on SQLite's shared bytes of ``path`` (its own open file
    description: it excludes this process's other descriptors too) for ``seconds``, as
    Litestream's follow mode holds it while it applies a transaction; ``writing``: it
    writes the file meanwhile, as follow mode writes a transaction's pages."""
    import fcntl

    taken = threading.Event()

    def hold() -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, WRITE_LOCK)
            taken.set()
            end = time.monotonic() + seconds
            page = 0
            while time.monotonic() < end:
                if writing:
                    os.pwrite(fd, os.urandom(4096), page * 4096)
                    page += 1
                time.sleep(0.02)
        finally:
            os.close(fd)  # and the lock with it

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(5)
    return thread


linux_only = pytest.mark.skipif(
    sys.platform != "linux", reason="open file description locks (one process, two holders)"
)


@linux_only
@pytest.mark.parametrize("writing", [True, False])
def test_a_follow_mode_is_taken_for_hung_only_when_it_holds_its_lock_without_writing(
    tmp_path: Path, writing: bool
) -> None:
    # Litestream holds its write lock while it reads a transaction's pages from the store
    # (a big one over a slow link: longer than LOCK_WAIT); writing all the while, it is
    # slow, not hung, and stopping it means a full download instead of the rest of one.
    # Holding the lock without writing, it is hung.
    staged = tmp_path / "catalog.db.follow"
    staged.write_bytes(bytes(4096))
    holder = hold_write_lock(staged, 1.2 if writing else 1.5, writing=writing)
    fd = os.open(staged, os.O_RDONLY)
    try:
        started = time.monotonic()
        if writing:
            assert replica._read_lock(fd, wait=0.4) is True
            assert time.monotonic() - started >= 1.0  # once the transaction was written
        else:
            with pytest.raises(CatalogError, match="write lock"):
                replica._read_lock(fd, wait=0.4)
            assert 0.4 <= time.monotonic() - started < 1.2
    finally:
        os.close(fd)
        holder.join()


@pytest.mark.parametrize("sticky", [False, True])
def test_a_replica_under_a_folder_everyone_may_write_is_refused_unless_sticky(
    primary: base.Primary, tmp_path: Path, sticky: bool
) -> None:
    # The replica's own folder was checked, not those above it: in one everyone may write
    # (no sticky bit), anyone may rename the checked folder away once checked and put a link
    # to another of their choosing in its place, where follow mode's files and the served
    # copy then go. /tmp's sticky bit lets only a folder's owner rename it.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777 if sticky else 0o777)
    path = shared / "replica" / "catalog.db"
    if sticky:
        Follower(path, primary.url, follow=True).close()
    else:
        with pytest.raises(CatalogError, match="shared") as refused:
            Follower(path, primary.url, follow=True)
        assert "\n" not in str(refused.value)
        assert list(shared.iterdir()) == []  # nothing made under a refused folder
