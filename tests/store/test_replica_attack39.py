"""Follow mode's file checked while it is copied (attack39): what ``quick_check`` read must be
the very bytes the copy holds, or the copy is checked itself; an empty file is never
served; a log left beside the incoming file never reaches a copy; the read lock is released
on every path; a torn copy is restored after a restart; ``last_change_s`` is a token's."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store import test_replica as base
from tests.store.test_replica import LITESTREAM, Primary, synced, write_lock_free
from toolcat.errors import CatalogError
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = [
    pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed"),
    pytest.mark.skipif(sys.platform != "linux", reason="the check through /proc is Linux's"),
]


primary, following = base.primary, base.following  # the fixtures, from the real Litestream


def stopped(following: Follower) -> Path:
    """Follow mode synced once and stopped, its staging file left as it was: its path."""
    synced(following)
    following.close()  # nothing writes the staging file now; no restore runs either
    assert following.staging is not None and following.staging.exists()
    return following.staging


def damage_tail(path: Path, pages: int = 3) -> None:
    """Garbage over the last pages: what only ``quick_check`` reads (the copy's own reads
    of ``meta`` and the schema would not meet it)."""
    with open(path, "r+b") as f:
        f.seek(-pages * 4096, 2)
        f.write(b"\xff" * pages * 4096)


def sound(path: Path) -> bool:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return bool(conn.execute("PRAGMA quick_check").fetchone()[0] == "ok")
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def copied(following: Follower) -> tuple[int, int] | None:
    """``_copy_staged`` once: None when it refused the file (or had nothing to copy); a
    copy it returns must be sound."""
    try:
        result = following._copy_staged(1, {})
    except CatalogError:
        return None
    if result is not None:
        assert sound(following.incoming), "a damaged copy of follow mode's file checked ok"
    return result


def test_the_check_is_of_the_held_file_not_a_name_planted_beside_it(
    following: Follower, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite opens ``/proc/self/fd/N`` by the name the link reads, not the descriptor: once
    the held file is no longer at its name it reads ``FILE.follow (deleted)``, which anyone
    who can write the folder may plant (a sound catalog). Then the damaged file held was
    copied and the planted one checked, and the copy skipped its own check."""
    staging = stopped(following)
    damage_tail(staging)
    planted = Path(f"{staging} (deleted)")
    shutil.copyfile(following.path, planted)
    other = tmp_path / "other"
    other.write_bytes(b"")
    lock = replica._read_lock

    def swapped(fd: int) -> bool:  # follow mode restoring afresh renames its file over it
        apart = lock(fd)
        os.replace(other, staging)
        return apart

    monkeypatch.setattr(replica, "_read_lock", swapped)
    assert copied(following) is None


@pytest.mark.parametrize("change", ["overwritten", "truncated"])
def test_bytes_changed_between_the_check_and_the_copy_are_checked_in_the_copy(
    following: Follower, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A writer that ignores SQLite's lock (not Litestream: it takes it) changes the file
    after ``quick_check`` read it and before the copy did: the copy holds bytes no check
    saw, and a file cut short copies short."""
    staging = stopped(following)
    checked = threading.Event()
    check, copy = replica._Checking._check, replica._copy_range

    def check_then_change(self: Any, fd: int) -> None:
        check(self, fd)
        if change == "overwritten":
            damage_tail(staging)
        else:
            os.truncate(staging, staging.stat().st_size - 3 * 4096)
        checked.set()

    def copy_after_the_check(source: int, target: int, size: int) -> Any:
        assert checked.wait(30)
        return copy(source, target, size)

    monkeypatch.setattr(replica._Checking, "_check", check_then_change)
    monkeypatch.setattr(replica, "_copy_range", copy_after_the_check)
    assert copied(following) is None


def test_an_empty_file_is_no_catalog(following: Follower) -> None:
    """A staging file cut to nothing (a crash, a planted one) beside a sidecar saying it
    holds the newest transaction: SQLite reads an empty file as an empty database
    (``quick_check``: ok), and migrating it made a served empty catalog at revision 0."""
    staging = stopped(following)
    os.truncate(staging, 0)
    with pytest.raises(CatalogError, match="no catalog"):
        following._copy_staged(1, {})
    path = following.path.with_name("restored.db")
    path.write_bytes(b"")
    with pytest.raises(CatalogError, match="no catalog"):  # a full restore's copy alike
        replica.check_copy(path, following.primary)


@pytest.mark.parametrize("without", ["ofd", "ofd-einval", "proc"])
def test_without_the_descriptors_lock_or_proc_the_copy_is_checked(
    following: Follower, monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    """No open file description locks (not Linux, an old kernel: EINVAL) or no ``/proc``:
    the check cannot run on the staging file, and the copy is checked as before."""
    import errno
    import fcntl

    staging = stopped(following)
    damage_tail(staging)
    if without == "ofd":
        monkeypatch.delattr(fcntl, "F_OFD_SETLK")
    elif without == "ofd-einval":
        real = fcntl.fcntl

        def no_ofd(fd: int, command: int, *args: Any) -> Any:
            if command == getattr(fcntl, "F_OFD_SETLK", None):
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, command, *args)

        monkeypatch.setattr(fcntl, "fcntl", no_ofd)
    else:
        connect = sqlite3.connect

        def no_proc(database: str, *args: Any, **kwargs: Any) -> Any:
            if "/proc/self/fd/" in str(database):
                raise sqlite3.OperationalError("unable to open database file")
            return connect(database, *args, **kwargs)

        monkeypatch.setattr(sqlite3, "connect", no_proc)
    with pytest.raises(CatalogError, match=r"damaged|malformed"):  # quick_check of the copy
        following._copy_staged(1, {})


@pytest.mark.parametrize("path", ["early", "failed"])
def test_the_read_lock_is_released_on_every_path(following: Follower, path: str) -> None:
    """A sidecar behind the transaction wanted (an early return) or an incoming file that
    cannot be made (a folder planted there): the lock goes with the descriptor."""
    staging = stopped(following)
    if path == "early":
        assert following._copy_staged(2**40, {}) is None
    else:
        following.incoming.mkdir()
        with pytest.raises(CatalogError, match="cannot copy"):
            following._copy_staged(1, {})
    assert write_lock_free(staging)


def test_a_torn_copy_under_its_stamp_after_a_restart_is_restored_never_kept(
    primary: Primary, following: Follower
) -> None:
    """The copy leaves WAL mode without an fsync: a crash may leave pages of it unwritten
    (zeros) under the stamp the state file kept. The restarted follower serves it until its
    first look, which checks it and restores it again."""
    synced(following)
    following.close()
    info = following.path.stat()
    with open(following.path, "r+b") as f:  # a middle page never reached the disk
        f.seek((info.st_size // 4096 // 2) * 4096)
        f.write(b"\0" * 4096)
    os.utime(following.path, ns=(info.st_atime_ns, info.st_mtime_ns))
    restarted = Follower(following.path, primary.url, follow=True)
    try:
        assert restarted.serving  # the stamp matches: served at once
        assert restarted.sync() is True  # checked at the first look: restored again
        assert replica.copy_problem(restarted.path, restarted.primary) is None
    finally:
        restarted.close()


def test_last_change_s_names_its_steps_to_a_token_only(primary: Primary, tmp_path: Path) -> None:
    """``last_change_s``: each step a number of seconds, ``{}`` before a change (a restart),
    kept across a failed look, never in the answer without a token."""
    pytest.importorskip("mcp")
    pytest.importorskip("httpx2")
    from tests.server.test_healthz import TOKEN, get

    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url)
    assert follower.sync() is True
    report = get(follower, "/healthz", token=TOKEN).json()
    steps = report["last_change_s"]
    assert set(steps) == {"look", "restore", "check"}
    assert all(isinstance(s, float) and s >= 0 for s in steps.values())
    short = get(follower, "/healthz")
    assert "last_change_s" not in short.json()
    shutil.rmtree(primary.store)  # a look that fails keeps the last change's steps
    assert follower.sync() is False
    assert get(follower, "/healthz", token=TOKEN).json()["last_change_s"] == steps
    restarted = Follower(follower.path, primary.url)
    assert get(restarted, "/healthz", token=TOKEN).json()["last_change_s"] == {}


KILLED_MID_CHECK = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = " + sys.argv[2])
if sys.argv[2] == "WAL":  # committed to the log, never checkpointed
    conn.execute("UPDATE meta SET value = 424242 WHERE key = 'revision'")
else:  # the rollback journal holds the page saying 424242, the file has spilled pages
    conn.execute("UPDATE meta SET value = 424242 WHERE key = 'revision'")
    conn.execute("PRAGMA cache_size = 1")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE meta SET value = 1 WHERE key = 'revision'")
    for table in ("tools", "tools_fts"):
        conn.execute(f"DELETE FROM {table}")
os._exit(0)
"""


def crash_leftover(following: Follower, mode: str) -> Path:
    """What a replica killed in the middle of ``check_copy`` leaves beside the incoming
    file: the log of that copy's writes (here: revision 424242), which SQLite applies to
    whatever database next opens under that name. The log's path."""
    shutil.copyfile(following.staging or following.path, following.incoming)
    subprocess.run(
        [sys.executable, "-c", KILLED_MID_CHECK, str(following.incoming), mode],
        check=True,
        timeout=30,
    )
    log = Path(f"{following.incoming}{'-wal' if mode == 'WAL' else '-journal'}")
    assert log.stat().st_size > 0
    following.incoming.unlink()  # what the next copy does first
    return log


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
def test_a_log_left_beside_the_incoming_file_never_reaches_the_copy(
    following: Follower, mode: str
) -> None:
    """SQLite applies a ``-wal`` file (or rolls back a hot ``-journal``) to the database
    opened beside it: neither names its database. One left by a replica killed while it
    checked its last copy was applied to the next copy (a revision the primary never had,
    pages no check saw: the copy's own check is skipped when follow mode's file checked ok
    as it was copied) and kept by leaving WAL mode."""
    staging = stopped(following)
    with sqlite3.connect(f"{staging.resolve().as_uri()}?mode=ro&immutable=1", uri=True) as conn:
        staged = conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0]
    crash_leftover(following, mode)
    result = following._copy_staged(1, {})
    assert result is not None and result[1] == staged != 424242
    assert sound(following.incoming)


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
def test_a_log_left_beside_the_incoming_file_never_reaches_a_restore(
    primary: Primary, tmp_path: Path, mode: str
) -> None:
    """The same for a full restore: Litestream writes the incoming file, and the log left
    beside it was applied before its ``quick_check``, which a consistent page passes."""
    revision = primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url)
    assert follower.sync() is True
    crash_leftover(follower, mode)
    assert follower._restore(follower.state["txid"], {}) == revision != 424242


def test_the_check_is_waited_for_when_closing_the_copy_fails(
    following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy whose close fails (EIO on a network folder) still waits for the check reading
    through the staging file's descriptor, before that descriptor closes and its number can
    name another file."""
    stopped(following)
    waited: list[bool] = []
    verdict = replica._Checking.verdict

    def recorded(self: Any) -> Any:
        waited.append(True)
        return verdict(self)

    close = os.close

    def failing(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        close(fd)
        if name.endswith(replica.INCOMING_SUFFIX):
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(replica._Checking, "verdict", recorded)
    monkeypatch.setattr(os, "close", failing)
    with pytest.raises(CatalogError, match="cannot copy follow mode's file"):
        following._copy_staged(1, {})
    monkeypatch.undo()
    assert waited == [True]
