"""The standby copy a replica patches at each change (``PATH.standby``) is input like every
file in its folder: what is at that name decides only whether a change patches it or copies
follow mode's file whole, never which file gets written, nor what is served."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.store import test_replica as base
from toolcat import Catalog
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = base.pytestmark
primary = base.primary  # the fixtures, from the real Litestream
following = base.following


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)  # follow mode is waited for at once


def change(primary: base.Primary, follower: Follower, toolkit: str) -> int:
    """Register a toolkit on the primary and wait for the replica to serve it: its revision."""
    revision = primary.register(base.SAMPLE_TOOLKITS / toolkit)
    base.synced(follower, seconds=30)
    assert follower.state["revision"] == revision
    return revision


def served_revision(follower: Follower) -> int:
    assert replica.copy_problem(follower.path, follower.primary) is None
    with Catalog(follower.path) as copy:
        return copy.revision


def ready(primary: base.Primary, following: Follower) -> Path:
    """A replica that has served two revisions (so it keeps a standby): the standby."""
    base.synced(following)
    change(primary, following, "text.yaml")
    assert following.standby is not None and following.standby.is_file()
    return following.standby


def test_a_standby_written_since_it_was_set_aside_is_copied_over(
    primary: base.Primary, following: Follower
) -> None:
    # Patching would give follow mode's bytes whatever the file held (every block is
    # compared: tests/store/test_pages.py), but a file written since it was set aside is
    # no longer the one the replica put there (its recorded stamp): it is not written.
    standby = ready(primary, following)
    with open(standby, "r+b") as f:  # garbage, and far longer than the catalog
        f.write(os.urandom(8192))
        f.truncate(standby.stat().st_size + (5 << 20))
    garbage = standby.read_bytes()
    revision = change(primary, following, "files.yaml")
    assert "copy" in following.steps and "patch" not in following.steps
    assert served_revision(following) == revision
    assert standby.read_bytes() == garbage  # left as it is, and never served
    assert not os.stat(following.path).st_mode & 0o077 & ~0o044  # 0644, as a copy's


def test_a_patched_copy_is_served_as_a_copy_would_be(
    primary: base.Primary, following: Follower
) -> None:
    ready(primary, following)
    revision = change(primary, following, "files.yaml")
    assert "patch" in following.steps
    assert served_revision(following) == revision
    assert not os.stat(following.path).st_mode & 0o077 & ~0o044  # 0644, as a copy's


OUTSIDE: list[tuple[str, Callable[[Path, Path], None]]] = [
    ("a link to another file", lambda standby, other: standby.symlink_to(other)),
    ("a second name of another file", lambda standby, other: os.link(other, standby)),
]


@pytest.mark.parametrize("planted", [p for _, p in OUTSIDE], ids=[n for n, _ in OUTSIDE])
def test_a_standby_naming_another_file_is_never_written(
    primary: base.Primary, following: Follower, tmp_path: Path, planted: Callable
) -> None:
    standby = ready(primary, following)
    standby.unlink()
    other = tmp_path / "precious.db"
    other.write_bytes(b"the user's own data\n" * 1000)
    before = other.read_bytes()
    planted(standby, other)
    revision = change(primary, following, "files.yaml")
    assert "copy" in following.steps and "patch" not in following.steps
    assert other.read_bytes() == before
    assert served_revision(following) == revision


def test_the_served_file_is_never_patched_in_place(
    primary: base.Primary, following: Follower
) -> None:
    standby = ready(primary, following)
    standby.unlink()
    os.link(following.path, standby)  # the standby name on the very file readers read
    served = following.path.read_bytes()
    reader = Catalog(following.path)  # an immutable reader of the served revision
    try:
        before = reader.revision
        change(primary, following, "files.yaml")
        assert "copy" in following.steps
        assert reader.revision == before  # its file was never written under it
        assert standby.read_bytes() == served
    finally:
        reader.close()


@pytest.mark.parametrize("kind", ["folder", "fifo", "writable by others"])
def test_a_standby_of_another_kind_is_copied_over(
    primary: base.Primary, following: Follower, kind: str
) -> None:
    standby = ready(primary, following)
    standby.unlink()
    if kind == "folder":
        standby.mkdir()
    elif kind == "fifo":
        os.mkfifo(standby)
    else:
        standby.write_bytes(b"x" * 4096)
        os.chmod(standby, 0o666)
    revision = change(primary, following, "files.yaml")
    assert "copy" in following.steps
    assert served_revision(following) == revision
    if kind == "folder":  # a folder is not replaced by a file: no standby kept
        assert standby.is_dir()


def test_a_standby_still_open_elsewhere_is_not_written(
    primary: base.Primary, following: Follower
) -> None:
    standby = ready(primary, following)
    # Another process reading the revision before (an immutable reader of its own, and a
    # descriptor it reads the file's bytes through when asked).
    script = (
        "import hashlib, os, sqlite3, sys\n"
        "c = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro&immutable=1', uri=True)\n"
        "c.execute('SELECT 1 FROM meta').fetchone()\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "def digest():\n"
        "    return hashlib.sha256(os.pread(fd, 1 << 30, 0)).hexdigest()\n"
        "print(digest(), flush=True)\n"
        "sys.stdin.readline()\n"
        "print(digest(), flush=True)\n"
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", script, str(standby)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None
        before = reader.stdout.readline().strip()
        revision = change(primary, following, "files.yaml")
        assert "copy" in following.steps and "patch" not in following.steps
        assert served_revision(following) == revision
        after, _ = reader.communicate("\n", timeout=10)
        assert before and after.strip() == before  # the file it reads was never written
    finally:
        if reader.poll() is None:
            reader.kill()
    # and this process's own readers count too: one left open on the standby is seen.
    standby_now = following.standby
    assert standby_now is not None and standby_now.is_file()
    mine = sqlite3.connect(f"file:{standby_now}?mode=ro&immutable=1", uri=True)
    try:
        mine.execute("SELECT 1 FROM meta").fetchone()
        change(primary, following, "data.yaml")
        assert "copy" in following.steps and "patch" not in following.steps
    finally:
        mine.close()
    change(primary, following, "time.yaml")  # closed: patched again
    assert "patch" in following.steps


RACE = """
import fcntl, os, subprocess, sys, time
from toolcat.store import replica

standby = sys.argv[1]
fd = os.open(standby, os.O_RDWR)
real = fcntl.fcntl
opener = []

def racing(fd_, command, arg=0):
    answer = real(fd_, command, arg)
    if command == fcntl.F_SETLEASE and arg == fcntl.F_WRLCK:
        # Opened in that very moment: the open waits for the lease to be let go.
        opener.append(subprocess.Popen([sys.executable, "-c", f"open({standby!r}).close()"]))
        time.sleep(0.5)  # long enough for its open to reach the lease
    return answer

fcntl.fcntl = racing
alone = replica._alone(fd)
fcntl.fcntl = real
print(alone, opener[0].wait(10))
"""


def test_an_open_during_the_lease_does_not_end_the_replica(tmp_path: Path) -> None:
    # Another process opening the standby while its lease is held breaks the lease, and the
    # kernel signals the holder: SIGIO by default, which ended the replica (exit -29).
    standby = tmp_path / "catalog.db.standby"
    standby.write_bytes(b"x" * 8192)
    done = subprocess.run(
        [sys.executable, "-c", RACE, str(standby)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(base.ROOT / "src")},
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    # and the open is seen: the file is not the replica's alone to write.
    assert done.stdout.split() == ["False", "0"]


def test_a_file_at_the_set_asides_temporary_name_is_left_alone(
    primary: base.Primary, following: Follower
) -> None:
    # The served file gets its second name under a temporary one first: a file already
    # there (yours, made by something else) was removed to make room for it.
    base.synced(following)
    assert following.standby is not None
    temporary = Path(f"{following.standby}.{os.getpid()}.tmp")
    temporary.write_bytes(b"not the replica's\n")
    change(primary, following, "text.yaml")
    assert temporary.read_bytes() == b"not the replica's\n"
    assert served_revision(following) == following.state["revision"]
