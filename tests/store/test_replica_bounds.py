"""Follow mode's files are bounded input (issue 32's "seen, not fixed"): a hung follow mode
holding its write lock stops no look, a file planted by another user (or one others may write)
is no follow mode's, a replica's folder that everyone may write is refused, and a copy that
would fill the disk is never made."""

from __future__ import annotations

import fcntl
import os
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store import test_replica as base
from tests.store.test_replica import LITESTREAM, Primary, synced, write_lock_free
from toolcat import Catalog
from toolcat.errors import CatalogError
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")

primary, following, follower = base.primary, base.following, base.follower  # the fixtures


def stopped(following: Follower) -> Path:
    """Follow mode synced once and stopped, its staging file left as it was: its path."""
    synced(following)
    following.close()
    assert following.staging is not None and following.staging.exists()
    return following.staging


def hold_write_lock(path: Path) -> int:
    """A descriptor of ``path`` holding the write lock Litestream's follow mode takes while
    it writes a transaction (an open file description lock: another description of the same
    file, even in this process, conflicts with it)."""
    fd = os.open(path, os.O_RDWR)
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, WRITE_LOCK)
    return fd


# struct flock for the write lock Litestream's follow mode takes: l_type, l_whence, l_start,
# l_len, l_pid (0 for open file description locks)
WRITE_LOCK = struct.pack(
    "hhqqi4x",
    fcntl.F_WRLCK,
    os.SEEK_SET,
    replica.SQLITE_SHARED_FIRST,
    replica.SQLITE_SHARED_SIZE,
    0,
)


@pytest.mark.skipif(sys.platform != "linux", reason="open file description locks are Linux's")
def test_a_hung_follow_mode_holding_its_lock_stops_no_look(
    primary: Primary, following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the copy waited for the lock with no end: a follow mode hung mid-write
    stopped every later look (the replica went stale for good). Now the wait ends, follow
    mode is stopped and restored afresh, and the change is restored in full meanwhile."""
    import subprocess

    staging = stopped(following)
    following._closed = False
    # Follow mode running but stuck: a process that never ends, holding the write lock.
    hung = subprocess.Popen(["sleep", "300"], stdin=subprocess.PIPE, start_new_session=True)
    following._follower = hung
    monkeypatch.setattr(replica, "LOCK_WAIT", 0.5, raising=False)
    revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
    Path(f"{staging}-txid").write_text(f"{2**40:016x}\n")  # it says it holds the change
    held = hold_write_lock(staging)
    try:
        outcome: list[object] = []

        def look() -> None:
            try:
                outcome.append(following.sync())
            except Exception as e:  # what it raised is the outcome
                outcome.append(e)

        worker = threading.Thread(target=look, daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(30)
        assert not worker.is_alive(), "the look waited on follow mode's lock with no end"
        assert outcome == [True]  # restored in full: the change is served
        assert time.monotonic() - started < 30
    finally:
        os.close(held)
    assert hung.wait(10) is not None  # the hung follow mode was stopped
    assert hung.stdin is not None
    hung.stdin.close()
    with Catalog(following.path) as copy:
        assert copy.revision == revision
    assert replica.copy_problem(following.path, primary.url) is None


@pytest.mark.skipif(sys.platform != "linux", reason="open file description locks are Linux's")
def test_the_lock_wait_ends_with_one_line_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "staged.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    held = hold_write_lock(db)
    fd = os.open(db, os.O_RDONLY)
    try:
        started = time.monotonic()
        with pytest.raises(CatalogError, match=r"held its file's write lock for over 0\.3 s"):
            replica._read_lock(fd, wait=0.3)
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        os.close(held)
    try:  # released: taken at once, and held
        assert replica._read_lock(fd, wait=0.3) is True
        assert not write_lock_free(db)
    finally:
        os.close(fd)


def test_a_classic_lock_waits_the_same_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without open file description locks, the classic lock is taken the same way: never
    a wait without an end."""
    db = tmp_path / "staged.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    monkeypatch.delattr(fcntl, "F_OFD_SETLK", raising=False)
    import subprocess

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX, int(sys.argv[3]), int(sys.argv[2]))\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
            str(db),
            str(replica.SQLITE_SHARED_FIRST),
            str(replica.SQLITE_SHARED_SIZE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        fd = os.open(db, os.O_RDONLY)
        try:
            with pytest.raises(CatalogError, match="write lock for over"):
                replica._read_lock(fd, wait=0.3)
        finally:
            os.close(fd)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()


@pytest.mark.parametrize("planted", ["txid", "staging"])
@pytest.mark.parametrize("how", ["others-may-write", "another-user"])
def test_follow_modes_files_are_this_users_own(following: Follower, planted: str, how: str) -> None:
    """A ``-txid`` sidecar or a staging file that another user owns, or that others may
    write, is not follow mode's: no transaction is read from it, no copy is made of it."""
    if how == "another-user" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    staging = stopped(following)
    sidecar = Path(f"{staging}-txid")
    sidecar.write_text(f"{2**40:016x}\n")
    assert following._staged_txid() == 2**40  # as follow mode writes it: read
    target = sidecar if planted == "txid" else staging
    if how == "others-may-write":
        os.chmod(target, 0o666)
    else:
        os.chown(target, 4242, 4242)
    if planted == "txid":
        assert following._staged_txid() is None
        assert following._copy_staged(1, {}) is None
    else:
        with pytest.raises(CatalogError, match="not a regular file of this user's"):
            following._copy_staged(1, {})
    assert not following.incoming.exists()


@pytest.mark.parametrize("folder", ["everyone-may-write", "a-link"])
def test_a_replica_folder_others_could_plant_in_is_refused(
    primary: Primary, tmp_path: Path, folder: str
) -> None:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    shared = tmp_path / "shared"
    shared.mkdir()
    if folder == "everyone-may-write":
        os.chmod(shared, 0o777)
        where = shared
    else:
        where = tmp_path / "linked"
        where.symlink_to(shared, target_is_directory=True)
    with pytest.raises(CatalogError, match="no folder a replica may use"):
        Follower(where / "catalog.db", primary.url, follow=True)
    assert list(shared.iterdir()) == []  # nothing written there
    os.chmod(shared, 0o755)  # the same folder, now its owner's alone: taken
    if folder == "everyone-may-write":
        follower = Follower(shared / "catalog.db", primary.url, follow=True)
        try:
            synced(follower)
        finally:
            follower.close()


def test_a_copy_that_would_fill_the_disk_is_never_made(
    following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A huge (or sparse) file as follow mode's: the copy is refused before a byte is
    written, naming the sizes; not one that fits."""
    staging = stopped(following)
    free = os.statvfs(staging.parent)
    room = free.f_bavail * free.f_frsize
    monkeypatch.setattr(replica, "COPY_RESERVE", room, raising=False)  # the disk as good as full
    with pytest.raises(CatalogError, match=r"does not fit in the replica's folder"):
        following._copy_staged(1, {})
    assert not following.incoming.exists()
    monkeypatch.setattr(replica, "COPY_RESERVE", 64 << 20)
    assert following._copy_staged(1, {}) is not None


def test_an_older_file_behind_a_lying_txid_is_never_a_step_back(
    primary: Primary, following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Follow mode's file holding an older revision than the one served, its ``-txid``
    saying it holds the store's newest: before, it was swapped in (the replica went back a
    revision) and recorded as caught up, until the next change. Now it is refused, follow
    mode starts afresh and the change is restored in full."""
    staging = stopped(following)
    old = staging.read_bytes()
    first = following.state["revision"]
    following._closed = False
    monkeypatch.setattr(Follower, "_following", lambda self: None)  # a follow mode that lags
    second = primary.register(SAMPLE_TOOLKITS / "text.yaml")
    synced(following)  # follow mode has not got it: restored in full
    assert following.state["revision"] == second > first
    staging.write_bytes(old)  # what it holds: the first revision
    Path(f"{staging}-txid").write_text(f"{2**40:016x}\n")  # what it says: anything newer
    third = primary.register(SAMPLE_TOOLKITS / "files.yaml")
    synced(following)
    with Catalog(following.path) as copy:
        assert copy.revision == third
    assert following.state["revision"] == third
    assert not staging.exists()  # refused and removed: follow mode starts afresh


def test_a_restored_copy_is_no_one_elses_to_write_whatever_the_umask(
    primary: Primary, tmp_path: Path
) -> None:
    """Under a umask of 002 (a user with a group of their own) a full restore wrote the
    served file group-writable, while readers open it immutable: Litestream now runs under
    022 for a restore."""
    import stat

    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    before = os.umask(0o002)
    try:
        follower = Follower(tmp_path / "replica" / "catalog.db", primary.url)
        synced(follower)
    finally:
        os.umask(before)
    mode = stat.S_IMODE(follower.path.stat().st_mode)
    assert not mode & 0o022, oct(mode)
    assert mode & 0o444  # still readable: status and other readers


def test_only_this_users_files_are_removed_as_follow_modes(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    theirs, ours = tmp_path / "theirs.follow", tmp_path / "ours.follow"
    theirs.write_text("x")
    ours.write_text("x")
    os.chown(theirs, 4242, 4242)
    replica._remove_own_file(theirs)
    replica._remove_own_file(ours)
    assert theirs.exists() and not ours.exists()


def test_a_replica_folder_that_cannot_be_made_is_one_line(primary: Primary, tmp_path: Path) -> None:
    """A file on the way to the replica's folder: one line naming it, not "a bug in
    toolcat"."""
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(CatalogError, match=r"cannot make the replica's folder .*a-file/r") as e:
        Follower(blocker / "r" / "catalog.db", primary.url, follow=True)
    assert "\n" not in str(e.value)


def test_healthz_says_when_follow_mode_was_switched_off(
    primary: Primary, following: Follower
) -> None:
    """A file at follow mode's names that it may not replace switches follow mode off
    (each change a full restore): the operator sees it in ``/healthz``, not only in the
    log; not without a token."""
    pytest.importorskip("mcp")
    pytest.importorskip("httpx2")
    from tests.server.test_healthz import TOKEN, get

    synced(following)
    assert get(following, "/healthz", token=TOKEN).json()["follow_mode"] is True
    following.close()
    following._closed = False
    assert following.staging is not None
    following.staging.unlink()
    following.staging.mkdir()  # a folder: neither Litestream nor the replica replaces it
    primary.register(SAMPLE_TOOLKITS / "text.yaml")
    synced(following)
    assert get(following, "/healthz", token=TOKEN).json()["follow_mode"] is False
    assert "follow_mode" not in get(following, "/healthz").json()


def test_a_publishing_time_before_1970_is_no_time(
    primary: Primary, follower: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Litestream's ``ltx`` output is input: a file "published" in year 0001 was saved as
    ``pending_since`` (negative), and the next start read the state as damaged (a fresh
    restore instead of serving at once). It is now an error of that look."""
    import json

    assert follower.sync() is True
    primary.register(SAMPLE_TOOLKITS / "text.yaml")
    run = Follower._run

    def ancient(self: Follower, *args: str, timeout: float) -> str:
        out = run(self, *args, timeout=timeout)
        if args[0] != "ltx":
            return out
        rows = json.loads(out)
        for row in rows:
            row["timestamp"] = "0001-01-01T00:00:00Z"
        return json.dumps(rows)

    monkeypatch.setattr(Follower, "_run", ancient)
    assert follower.sync() is False
    assert "time out of range" in follower.state["error"]
    monkeypatch.undo()
    follower.close()  # a restart: the process before has let go
    restarted = Follower(follower.path, primary.url)
    assert restarted.restarted  # the state was not damaged: it serves its copy at once
