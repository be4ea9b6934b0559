"""attack63: one follower a file (``PATH.replica.lock``, a POSIX record lock held by the
process that follows into ``PATH``), attacked where POSIX locks are weak: a record lock
belongs to the process and any close of any descriptor of the same file in that process
drops it, so what else in the process opens that file (a second follower of the same
file, a follower whose served file *is* another's lock, a lock file hard-linked to a file
the follower opens) decides whether the lock holds. Cheap: no Litestream runs here."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from toolcat import Catalog
from toolcat.errors import CatalogError
from toolcat.store import replica
from toolcat.store.replica import Follower

SOURCE = "s3://bucket/catalog"
OTHER = "s3://bucket/other"


def lock_of(path: Path) -> Path:
    return Path(f"{path}{replica.LOCK_SUFFIX}")


def held_elsewhere(path: Path) -> bool:
    """Whether another process is refused the lock of ``path`` (a child tries it)."""
    code = (
        "import errno, fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except OSError as e:\n"
        "    sys.exit(3 if e.errno in (errno.EAGAIN, errno.EACCES) else 4)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(lock_of(path))], timeout=30)
    assert done.returncode in (0, 3), done
    return done.returncode == 3


def follower(path: Path, source: str = SOURCE) -> Follower:
    return Follower(path, source, litestream="/bin/false")


def marked_copy(path: Path, primary: str) -> None:
    """A catalog that reads as a replica of ``primary`` (its meta's marker)."""
    with Catalog(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (replica.MARKER, primary))
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.commit()
    conn.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_second_follower_in_the_same_process_is_refused_and_keeps_the_first_ones_lock(
    tmp_path: Path,
) -> None:
    # The hole (with the POSIX record lock first used): a lock is the process's, and the
    # second follower's own descriptor of the lock file, closed by its ``close``, dropped
    # the lock the first still followed under. With an ``flock`` of the descriptor's own, a
    # second follower in the same process is refused like one in another process.
    db = tmp_path / "replica" / "catalog.db"
    first = follower(db)
    try:
        assert held_elsewhere(db)
        with pytest.raises(CatalogError, match="another replica follows"):
            follower(db)
        assert held_elsewhere(db)
    finally:
        first.close()
    assert not held_elsewhere(db)


def test_a_refused_second_follower_in_the_same_process_keeps_the_first_ones_lock(
    tmp_path: Path,
) -> None:
    # The hole: a second follower refused after it took the lock (here: the file is another
    # primary's replica) let go of its descriptor, and with it the first one's lock.
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    marked_copy(db, SOURCE)
    first = follower(db)
    try:
        with pytest.raises(CatalogError, match="another replica follows"):
            follower(db, OTHER)
        assert held_elsewhere(db)
    finally:
        first.close()
    assert not held_elsewhere(db)


def test_a_follower_whose_file_is_another_ones_lock_drops_no_lock(tmp_path: Path) -> None:
    # The hole (with the POSIX record lock first used): a follower of ``PATH.replica.lock``
    # itself (or of a hard link of it) opened that file as its catalog (SQLite, to read its
    # marker) and closed it: the lock of the follower of PATH, in the same process, was
    # gone. An ``flock`` is the descriptor's own: such a follower is refused (no catalog
    # there) and the lock holds.
    db = tmp_path / "replica" / "catalog.db"
    first = follower(db)
    try:
        alias = tmp_path / "replica" / "alias.db"
        os.link(lock_of(db), alias)
        for path in (lock_of(db), alias):
            with pytest.raises(CatalogError, match="cannot be read as a catalog"):
                follower(path)
            assert held_elsewhere(db)
    finally:
        first.close()


def test_a_lock_file_with_another_name_holds_and_is_left(tmp_path: Path) -> None:
    # The hole (with the POSIX record lock first used): a lock file that is a second name of
    # the served catalog was locked, and SQLite's first open and close of the catalog (at
    # every start and read) dropped it. An ``flock`` is the descriptor's own: SQLite's opens
    # and closes (and its own record locks) leave it held.
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    marked_copy(db, SOURCE)
    os.link(db, lock_of(db))
    listing = sorted(os.listdir(db.parent))
    first = follower(db)
    try:
        with Catalog(db) as copy:
            copy.list(limit=1)
        assert held_elsewhere(db)
    finally:
        first.close()
    assert os.path.samestat(os.stat(db), os.stat(lock_of(db)))
    assert sorted(os.listdir(db.parent)) == sorted({*listing, replica.state_path(db).name})


# What held.


def test_another_process_is_refused_in_one_line_and_nothing_is_done(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    first = follower(db)
    try:
        listing = {n: os.stat(db.parent / n).st_mtime_ns for n in os.listdir(db.parent)}
        code = (
            "import sys\n"
            "from toolcat.errors import CatalogError\n"
            "from toolcat.store.replica import Follower\n"
            "try:\n"
            "    Follower(sys.argv[1], 's3://bucket/catalog', litestream='/bin/false')\n"
            "except CatalogError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 3, done
        assert done.stdout.count("\n") == 1 and str(db) in done.stdout
        assert {n: os.stat(db.parent / n).st_mtime_ns for n in os.listdir(db.parent)} == listing
    finally:
        first.close()


def test_a_follower_killed_outright_lets_go(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    code = (
        "import os, sys, signal\n"
        "from toolcat.store.replica import Follower\n"
        "Follower(sys.argv[1], 's3://bucket/catalog', litestream='/bin/false')\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "held\n"
    follower(db).close()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "others-writable", "foreign"])
def test_a_lock_file_that_is_no_own_file_is_refused_left_and_leaks_nothing(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    lock = lock_of(db)
    target = tmp_path / "elsewhere"
    if kind == "symlink":
        lock.symlink_to(target)  # dangling: O_CREAT must not make the target
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "folder":
        lock.mkdir()
    else:
        lock.write_text("")
        os.chmod(lock, 0o666 if kind == "others-writable" else 0o600)
        if kind == "foreign":
            if os.geteuid() != 0:
                pytest.skip("needs root to give the file away")
            os.chown(lock, 4242, 4242)
    before = os.lstat(lock)
    fds = open_fds()
    for _ in range(5):
        with pytest.raises(CatalogError) as refused:
            follower(db)
        assert "\n" not in str(refused.value) and str(lock) in str(refused.value)
    assert open_fds() == fds
    after = os.lstat(lock)
    assert (after.st_ino, after.st_mode, after.st_uid) == (
        before.st_ino,
        before.st_mode,
        before.st_uid,
    )
    assert not target.exists()
    assert sorted(os.listdir(db.parent)) == [lock.name]


def test_refused_starts_leak_no_descriptor(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    marked_copy(db, OTHER)  # another primary's replica: refused after the lock is taken
    fds = open_fds()
    for _ in range(5):
        with pytest.raises(CatalogError):
            follower(db)
    assert open_fds() == fds
    assert not held_elsewhere(db)


def test_a_name_too_long_for_the_lock_is_refused_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "replica" / ("c" * 250)
    with pytest.raises(CatalogError) as refused:
        follower(db)
    assert "\n" not in str(refused.value)


def test_a_huge_sparse_lock_file_is_taken_at_once(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    with open(lock_of(db), "wb") as f:
        f.truncate(1 << 40)
    os.chmod(lock_of(db), 0o600)
    first = follower(db)
    try:
        assert held_elsewhere(db)
    finally:
        first.close()


def test_litestream_children_do_not_hold_the_lock_descriptor(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    fake = tmp_path / "litestream"
    fake.write_text('#!/bin/sh\nfor f in /proc/$$/fd/*; do readlink "$f"; done; exit 0\n')
    fake.chmod(0o755)
    first = Follower(db, SOURCE, litestream=str(fake))
    try:
        out = first._run("ltx", timeout=30)
        assert replica.LOCK_SUFFIX not in out
    finally:
        first.close()


def test_status_of_a_running_replica_is_not_refused(tmp_path: Path) -> None:
    db = tmp_path / "replica" / "catalog.db"
    db.parent.mkdir()
    marked_copy(db, SOURCE)
    first = follower(db)
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-m", "toolcat", "--db", str(db), "status"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done
        assert "replica" in done.stdout
        assert held_elsewhere(db)
    finally:
        first.close()


def test_a_forked_child_holds_no_lock_of_its_parents(tmp_path: Path) -> None:
    # A child forked from a follower's process shares its lock's descriptor, not the lock:
    # a follower it starts is refused like any other.
    db = tmp_path / "replica" / "catalog.db"
    first = follower(db)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                follower(db)
            except CatalogError as e:
                code = 3 if "another replica" in str(e) else 2
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        assert held_elsewhere(db)
    finally:
        first.close()
