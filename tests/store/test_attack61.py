"""attack61: a replica's change patches its standby (``FILE.standby``, the copy served
before) instead of copying follow mode's whole file: what sits at the standby name, the
write lease that tells whether anyone still reads it, and a patch that fails, against the
real Litestream; and ``store/pages.py``'s C twin as input."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store import test_replica as base
from toolcat import Catalog
from toolcat.store import pages, replica
from toolcat.store.replica import Follower

pytestmark = [
    base.pytestmark,
    pytest.mark.skipif(sys.platform != "linux", reason="write leases are Linux's"),
]
primary = base.primary  # the fixture, from the real Litestream
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, mknod)")


@pytest.fixture
def following(
    primary: base.Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Follower]:
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)  # follow mode is waited for at once
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    base.synced(follower)  # the first revision is served
    yield follower
    follower.close()


def change(primary: base.Primary, follower: Follower, toolkit: str) -> int:
    """Register ``toolkit`` at the primary and wait until the replica serves it."""
    revision = primary.register(SAMPLE_TOOLKITS / toolkit)
    base.synced(follower)
    assert follower.state["revision"] == revision
    assert replica.copy_problem(follower.path, primary.url) is None
    with Catalog(follower.path) as copy:
        assert copy.revision == revision
    return revision


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- Finding 1: the standby was told by its kind alone --------------------------------
#
# Before: a change patched whatever own, lone, regular file sat at ``FILE.standby`` and
# served it, and the set-aside after each change renamed the served file over whatever
# was at that name: a symlink, a FIFO, a socket, a device, another user's file, an
# operator's own file (a copy kept as "catalog.db.standby", or a second replica serving
# "catalog.db.standby" in the same folder) was removed, and an own file there was written
# in place and moved to be served. The docs promise that what is at the standby name
# decides only whether a change patches or copies, never which file is written, and that
# nothing the replica did not make is removed. Now the replica records the inode of the
# file it set aside (the state's ``standby``), patches only that file (whatever bytes it
# holds: all are compared) and replaces the name only when it is empty or holds that file.
# Left open: a file put at the name after the replica's standby was deleted may get its
# inode number again (ext4 reuses a freed one at once) and is then taken for it.


def plant(kind: str, where: Path, tmp_path: Path) -> None:
    if kind == "symlink":
        elsewhere = tmp_path / "elsewhere.db"
        elsewhere.write_bytes(b"not the replica's")
        where.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(where))
        server.close()
    elif kind == "device":
        os.mknod(where, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    elif kind == "other user":
        where.write_bytes(b"another user's file")
        os.chown(where, 4242, 4242)
    elif kind == "own file":  # an operator's copy kept beside the catalog, a catalog
        where.write_bytes(b"an operator's own copy, kept here before toolcat used the name")
        where.chmod(0o644)
    else:
        raise AssertionError(kind)


def identity(path: Path) -> tuple[int, int, int, bytes | None]:
    info = os.lstat(path)
    content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
    return (info.st_ino, info.st_mode, info.st_uid, content)


@pytest.mark.parametrize(
    "kind",
    [
        "symlink",
        "fifo",
        "socket",
        "own file",
        pytest.param("device", marks=ROOT_ONLY),
        pytest.param("other user", marks=ROOT_ONLY),
    ],
)
def test_what_the_replica_did_not_set_aside_is_never_written_nor_removed(
    primary: base.Primary, following: Follower, tmp_path: Path, kind: str
) -> None:
    assert following.standby is not None
    plant(kind, following.standby, tmp_path)
    before = identity(following.standby)
    for toolkit in ("text.yaml", "files.yaml"):
        served_before = os.stat(following.path)
        change(primary, following, toolkit)
        # Never the planted file served, nor written, nor removed from its name.
        assert not os.path.samestat(os.stat(following.path), os.lstat(following.standby))
        assert identity(following.standby) == before, kind
        assert "patch" not in following.steps  # nothing of the replica's own to patch
        assert served_before.st_ino != os.stat(following.path).st_ino


def test_an_own_file_at_the_standby_name_is_never_served_even_when_garbage(
    primary: base.Primary, following: Follower
) -> None:
    """The own-file case from the served side: the planted file (here a copy of the
    served revision an operator kept) was moved to be the served file and patched."""
    assert following.standby is not None
    following.standby.write_bytes(following.path.read_bytes())
    planted = os.stat(following.standby)
    change(primary, following, "text.yaml")
    assert os.stat(following.path).st_ino != planted.st_ino
    assert os.stat(following.standby).st_ino == planted.st_ino


def test_the_replicas_own_standby_is_still_patched_across_a_restart(
    primary: base.Primary, following: Follower, tmp_path: Path
) -> None:
    """What held and must keep holding with the record: the file the replica set aside is
    patched at the next change, in this run and after a restart (the record is saved)."""
    change(primary, following, "text.yaml")
    assert "copy" in following.steps  # the first change has no standby yet
    change(primary, following, "files.yaml")
    assert "patch" in following.steps
    following.close()
    patches_after_a_restart(primary, following)


def patches_after_a_restart(primary: base.Primary, following: Follower) -> None:
    """A follower started again on ``following``'s folder patches at its first change."""
    restarted = Follower(following.path, primary.url, follow=True)
    try:
        change(primary, restarted, "data.yaml")
        assert "patch" in restarted.steps
    finally:
        restarted.close()


def test_a_kill_between_the_set_aside_and_the_saved_state_still_patches_after(
    primary: base.Primary, following: Follower
) -> None:
    """The record is saved with the change: a replica killed after renaming the served file
    aside but before saving leaves a standby its saved state does not name; the restart
    knows it by the inode the state gave the served copy then."""
    change(primary, following, "text.yaml")
    saved = replica.state_path(following.path).read_bytes()
    change(primary, following, "files.yaml")
    following.close()
    replica.state_path(following.path).write_bytes(saved)  # as if killed before ``_save``
    patches_after_a_restart(primary, following)


def test_a_damaged_standby_record_is_damaged_state(tmp_path: Path) -> None:
    """The record is input like the rest of the state file."""
    import json

    path = tmp_path / "c.db"
    for bad in ("x", [1, 2], -3, True, 1.5, 2**64):
        replica.state_path(path).write_text(json.dumps({"primary": "file:///p", "standby": bad}))
        with pytest.raises(replica.DamagedStateError, match="standby"):
            replica.read_state(path)


# --- Finding 2: an open while the lease was held went unseen ---------------------------
#
# ``_alone`` took the write lease and let go of it at once, and said "alone" whatever
# happened in between. An open that came in that moment breaks the lease (it waits for
# the holder to let go, then gets its descriptor): the file was then open elsewhere, and
# the patch wrote it. The lease is now asked (F_GETLEASE) before it is let go: broken, the
# file is not alone.

OPENER = (
    "import os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "print('open', flush=True)\n"
    "time.sleep(30)\n"
)


def test_an_open_while_the_lease_is_held_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "standby"
    path.write_bytes(b"x" * 8192)
    real = fcntl.fcntl
    openers: list[subprocess.Popen[str]] = []

    def opened_meanwhile(fd: int, command: int, arg: int = 0) -> Any:
        done = real(fd, command, arg)
        if command == fcntl.F_SETLEASE and arg == fcntl.F_WRLCK:
            # A reader opens the file while the lease is held: its open waits for the
            # holder, which the kernel tells (SIGURG here) by breaking the lease.
            openers.append(
                subprocess.Popen(
                    [sys.executable, "-c", OPENER, str(path)], stdout=subprocess.PIPE, text=True
                )
            )
            deadline = time.monotonic() + 10
            while real(fd, fcntl.F_GETLEASE) == fcntl.F_WRLCK:
                assert time.monotonic() < deadline, "the open never broke the lease"
                time.sleep(0.002)
        return done

    monkeypatch.setattr(fcntl, "fcntl", opened_meanwhile)
    fd = os.open(path, os.O_RDWR)
    try:
        alone = replica._alone(fd)
    finally:
        os.close(fd)
        monkeypatch.undo()
    (opener,) = openers
    with opener:
        try:
            assert opener.stdout is not None and opener.stdout.readline().strip() == "open"
            assert alone is False  # another process has it open now
        finally:
            opener.kill()


def test_the_lease_sees_readers_that_only_map_the_file(tmp_path: Path) -> None:
    """Held: a reader that mapped the file and closed its descriptor (SQLite's mmap), one
    that holds it read-only in another process, a descriptor of this very process; an
    O_PATH descriptor (no reading) is no reader."""
    import mmap

    path = tmp_path / "standby"
    path.write_bytes(b"x" * 8192)

    def alone() -> bool:
        fd = os.open(path, os.O_RDWR)
        try:
            return replica._alone(fd)
        finally:
            os.close(fd)

    assert alone() is True
    fd = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    os.close(fd)
    try:
        assert alone() is False
    finally:
        mapped.close()
    with subprocess.Popen(
        [sys.executable, "-c", OPENER, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "open"
            assert alone() is False
        finally:
            child.kill()
    fd = os.open(path, os.O_PATH)
    try:
        assert alone() is True
    finally:
        os.close(fd)


def test_a_reader_of_an_older_revision_in_another_process_keeps_its_bytes(
    primary: base.Primary, following: Follower
) -> None:
    """Held: a process that mapped the first revision (its descriptor closed) reads the
    same bytes after two changes; the second change copies rather than patch its file."""
    script = (
        "import hashlib, mmap, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)\n"
        "os.close(fd)\n"
        "print(hashlib.sha256(m[:]).hexdigest(), flush=True)\n"
        "sys.stdin.readline()\n"
        "print(hashlib.sha256(m[:]).hexdigest(), flush=True)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(following.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as reader:
        try:
            assert reader.stdin is not None and reader.stdout is not None
            first = reader.stdout.readline().strip()
            change(primary, following, "text.yaml")  # the mapped file is set aside
            change(primary, following, "files.yaml")  # and not patched: it is mapped
            assert "copy" in following.steps
            reader.stdin.write("\n")
            reader.stdin.flush()
            assert reader.stdout.readline().strip() == first
        finally:
            reader.kill()


# --- Finding 3: a patch that failed threw follow mode's file away ----------------------
#
# A patch fails on the standby's side too: a read error in the old copy (EIO), no room for
# blocks a sparse or shared (reflinked) standby must allocate (ENOSPC, which the room
# check, made for the size the standby grows by, does not foresee). That surfaced as
# "cannot copy follow mode's file", which the replica takes for a staging file that does
# not check out: follow mode was stopped, its file removed and restored afresh (at 1M
# tools a 2.2 GB download, every change restored in full meanwhile). What the standby is
# decides only whether a change patches or copies: a patch that fails now copies.


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC])
def test_a_failed_patch_copies_and_keeps_follow_mode(
    primary: base.Primary,
    following: Follower,
    monkeypatch: pytest.MonkeyPatch,
    error: int,
) -> None:
    change(primary, following, "text.yaml")  # the standby is set aside
    assert following.staging is not None
    staged = os.stat(following.staging)
    served = digest(following.path)
    refollowed: list[bool] = []
    refollow = Follower._refollow

    def counted(self: Follower) -> None:
        refollowed.append(True)
        refollow(self)

    def failing(source: int, target: int, size: int) -> tuple[int, int]:
        os.pwrite(target, b"\0" * 4096, 8192)  # half done, then the disk says no
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(Follower, "_refollow", counted)
    monkeypatch.setattr(pages, "patch", failing)
    change(primary, following, "files.yaml")
    assert digest(following.path) != served
    assert refollowed == []  # follow mode kept its file and its place
    assert os.stat(following.staging).st_ino == staged.st_ino
    assert "copy" in following.steps and "restore" not in following.steps


def test_an_interrupted_patch_leaves_the_served_copy_and_the_next_change_works(
    primary: base.Primary, following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: an interrupt (SIGINT, shutdown) in the middle of a patch leaves the served
    file as it was; the next look clears the half-patched file and serves the change."""
    change(primary, following, "text.yaml")
    served = digest(following.path)
    real = pages.patch

    def interrupted(source: int, target: int, size: int) -> tuple[int, int]:
        os.pwrite(target, b"\xff" * 4096, 4096)
        raise KeyboardInterrupt

    monkeypatch.setattr(pages, "patch", interrupted)
    revision = primary.register(SAMPLE_TOOLKITS / "files.yaml")
    deadline = time.monotonic() + 20
    with pytest.raises(KeyboardInterrupt):
        while not following.sync():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert digest(following.path) == served
    monkeypatch.setattr(pages, "patch", real)
    base.synced(following)
    assert following.state["revision"] == revision
    assert replica.copy_problem(following.path, primary.url) is None


# --- Finding 4: a standby kept while follow mode is off --------------------------------
#
# With follow mode switched off (a staging file the replica may not replace), every change
# is a full restore and nothing patches: the standby was set aside all the same, one more
# whole copy of the catalog on the replica's disk (2.2 GB at 1M tools) with no use, and a
# full restore then needs room for three copies where it needed two.


def test_no_standby_is_kept_while_follow_mode_is_off(
    primary: base.Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    path = tmp_path / "replica" / "catalog.db"
    path.parent.mkdir()
    Path(f"{path}{replica.STAGING_SUFFIX}-txid").mkdir()  # follow mode may not work here
    follower = Follower(path, primary.url, follow=True)
    try:
        base.synced(follower)
        assert follower.staging is None  # switched off
        for toolkit in ("text.yaml", "files.yaml"):
            change(primary, follower, toolkit)
            assert "restore" in follower.steps
        assert follower.standby is not None and not os.path.lexists(follower.standby)
    finally:
        follower.close()


# --- What held: what sits at the standby and the patch as input ------------------------


def test_a_sparse_or_longer_standby_of_the_replicas_own_is_left_alone(
    primary: base.Primary, following: Follower
) -> None:
    """Held: the replica's own standby, grown sparse far past follow mode's file and with
    holes over its pages, is no longer the file it set aside (its stamp moved): never
    patched nor served nor replaced, the change copies. (Patching it would give follow
    mode's bytes all the same: tests/store/test_pages.py.)"""
    change(primary, following, "text.yaml")
    assert following.standby is not None and following.staging is not None
    with open(following.standby, "r+b") as f:
        f.truncate(1 << 30)  # a 1 GiB hole after the copy (no blocks on disk)
        f.seek(4096)
        f.write(b"\0" * 8192)
    grown = os.stat(following.standby)
    change(primary, following, "files.yaml")
    assert "copy" in following.steps and "patch" not in following.steps
    assert os.stat(following.path).st_size < 1 << 30
    assert os.path.samestat(os.stat(following.standby), grown)
    assert os.stat(following.standby).st_size == 1 << 30


def test_patch_refuses_what_is_no_regular_file_and_wrong_arguments(tmp_path: Path) -> None:
    """Held (C and Python alike): bad descriptors, a pipe, a read-only target, a folder are
    OSError; a negative size ValueError; sizes past 64 bits a refusal, never a crash."""
    source = tmp_path / "source"
    source.write_bytes(os.urandom(10_000))
    for native in (True, False):
        pages.NATIVE = native
        try:
            with pytest.raises(OSError):
                pages.patch(-1, -1, 10)
            read, write = os.pipe()
            os.write(write, b"x" * 10)
            os.close(write)
            plain = os.open(tmp_path / "target", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            ro = os.open(source, os.O_RDONLY)
            folder = os.open(tmp_path, os.O_RDONLY)
            try:
                with pytest.raises(OSError, match="Illegal seek"):
                    pages.patch(read, plain, 10)
                with pytest.raises(OSError):
                    pages.patch(ro, ro, 10_000)  # the target cannot be written
                with pytest.raises(OSError):
                    pages.patch(folder, plain, 10)
                with pytest.raises(ValueError):
                    pages.patch(ro, plain, -1)
                try:  # C: past a long long; Python: read to the end
                    assert pages.patch(ro, plain, 2**64)[0] == 10_000
                except OverflowError:
                    assert native
                assert pages.patch(ro, plain, 2**62)[0] == 10_000  # the source ends sooner
            finally:
                for fd in (read, plain, ro, folder):
                    os.close(fd)
        finally:
            pages.NATIVE = True
    assert (tmp_path / "target").read_bytes() == source.read_bytes()


def test_c_and_python_patch_agree_on_ragged_files(tmp_path: Path) -> None:
    """Held: random sources and targets of every awkward length around the block and the
    chunk; both give the source's first ``size`` bytes and the same counts."""
    import random

    rng = random.Random(61)
    s, t = tmp_path / "s", tmp_path / "t"
    for _ in range(60):
        length = rng.choice(
            [
                0,
                1,
                4095,
                4096,
                4097,
                (1 << 20) - 1,
                1 << 20,
                (1 << 20) + 4097,
                rng.randrange(3 << 20),
            ]
        )
        source = rng.randbytes(length)
        target = bytearray(source[: rng.randrange(length + 1)] + rng.randbytes(rng.randrange(9000)))
        for _ in range(rng.randrange(4)):
            if target:
                target[rng.randrange(len(target))] ^= 0xFF
        size = rng.choice([length, rng.randrange(length + 10), length + 5000])
        results = []
        for native in (True, False):
            s.write_bytes(source)
            t.write_bytes(bytes(target))
            pages.NATIVE = native
            a, b = os.open(s, os.O_RDONLY), os.open(t, os.O_RDWR)
            try:
                results.append((pages.patch(a, b, size), t.read_bytes()))
            finally:
                os.close(a)
                os.close(b)
                pages.NATIVE = True
        assert results[0] == results[1]
        assert results[0][1] == source[:size]
