"""attack42: a replica's folder reached through links (issue 42's outside attack on d4b76c4),
and follow mode's files it may not remove (b3419f2).

``_check_folder`` checked the folders above the replica's by the path as typed, with ``..``
taken off by the letter: a link on the way led elsewhere, and the folders the path really
went through (the link's target's, and the one holding a link of a chain) were never looked
at. Anyone who may write one of those may rename the replica's folder away and put another
in its place, the hole 2c51ea8 closed for the typed path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store import test_replica as base
from tests.store.test_replica import LITESTREAM, Primary, synced
from toolcat.errors import CatalogError
from toolcat.store import replica
from toolcat.store.replica import Follower

primary = base.primary  # the fixture, from the real Litestream
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")


def open_to_all(folder: Path) -> Path:
    """``folder``, made one everyone may write, without the sticky bit."""
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    return folder


@pytest.fixture
def ours(tmp_path: Path) -> Path:
    """A folder of this user's that only it may write: where the links are made."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    return home


def test_a_link_into_a_folder_everyone_may_write_is_refused(ours: Path, tmp_path: Path) -> None:
    """The link's target is a folder of this user's, but the folder above the target is
    everyone's: the typed path's folders above are all fine."""
    target = open_to_all(tmp_path / "shared") / "mine"
    target.mkdir(mode=0o755)
    (ours / "link").symlink_to(target, target_is_directory=True)
    with pytest.raises(CatalogError, match="everyone may write"):
        replica._check_folder(ours / "link" / "replica" / "catalog.db")
    assert list(target.iterdir()) == []  # nothing made there


def test_a_link_in_a_chain_held_by_a_folder_everyone_may_write_is_refused(
    ours: Path, tmp_path: Path
) -> None:
    """ours/first -> shared/second -> safe: anyone may swap ``second`` for a link of theirs;
    neither the typed path nor the real one names ``shared``."""
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o755)
    shared = open_to_all(tmp_path / "shared")
    (shared / "second").symlink_to(safe, target_is_directory=True)
    (ours / "first").symlink_to(shared / "second", target_is_directory=True)
    with pytest.raises(CatalogError, match="everyone may write"):
        replica._check_folder(ours / "first" / "replica" / "catalog.db")
    assert list(safe.iterdir()) == []


def test_dot_dot_after_a_link_is_the_targets_parent(ours: Path, tmp_path: Path) -> None:
    """ours/link/../replica is shared/replica to the kernel, ours/replica by the letter: the
    folder was made inside the folder everyone may write, and taken."""
    shared = open_to_all(tmp_path / "shared")
    (shared / "mine").mkdir(mode=0o755)
    (ours / "link").symlink_to(shared / "mine", target_is_directory=True)
    with pytest.raises(CatalogError, match="everyone may write"):
        replica._check_folder(ours / "link" / ".." / "replica" / "catalog.db")
    assert sorted(p.name for p in shared.iterdir()) == ["mine"]  # no replica folder made


def test_a_relative_path_through_a_link_is_checked_too(
    ours: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = open_to_all(tmp_path / "shared") / "mine"
    target.mkdir(mode=0o755)
    (ours / "link").symlink_to(target, target_is_directory=True)
    monkeypatch.chdir(ours)
    with pytest.raises(CatalogError, match="everyone may write"):
        replica._check_folder(Path("link/replica/catalog.db"))


def test_links_that_go_round_are_refused_not_followed_forever(ours: Path) -> None:
    (ours / "a").symlink_to(ours / "b")
    (ours / "b").symlink_to(ours / "a")
    with pytest.raises((CatalogError, OSError)):
        replica._check_folder(ours / "a" / "replica" / "catalog.db")


def test_links_among_safe_folders_are_still_taken(ours: Path, tmp_path: Path) -> None:
    """Not every link is refused: one to a folder of this user's under safe folders (and
    ``..`` within them) is fine, and the replica's folder is made there."""
    safe = tmp_path / "safe"
    (safe / "deeper").mkdir(parents=True, mode=0o755)
    (ours / "link").symlink_to(safe / "deeper", target_is_directory=True)
    replica._check_folder(ours / "link" / ".." / "replica" / "catalog.db")
    assert (safe / "replica").is_dir()


def test_folders_made_for_a_replica_are_never_everyones_whatever_the_umask(
    ours: Path,
) -> None:
    """Under umask 000 the folders ``mkdir -p`` made were everyone's to write (0777): the
    replica's own was then refused, and the ones above it were left open to all."""
    old = os.umask(0)
    try:
        replica._check_folder(ours / "new" / "deeper" / "catalog.db")
    finally:
        os.umask(old)
    for made in (ours / "new", ours / "new" / "deeper"):
        assert not os.stat(made).st_mode & 0o002, made


# Follow mode's files that ``_remove_own_file`` leaves (b3419f2: only this user's regular
# files are removed): at every start Litestream stopped on them, and each change waited
# FOLLOW_GRACE (20 s) before its full restore, with nothing in the health answer and a
# warning logged about ten times a second.


def plant(path: Path, what: str) -> None:
    if what == "folder":
        path.mkdir()
    else:  # another user's file
        path.write_text("not follow mode's")
        os.chown(path, 54321, 54321)


@pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")
@pytest.mark.parametrize(
    ("name", "what"),
    [
        (".follow", "folder"),
        (".follow-txid", "folder"),
        pytest.param(".follow", "another user's file", marks=NEEDS_ROOT),
    ],
)
def test_a_file_follow_mode_may_not_remove_turns_it_off_not_every_change_late(
    primary: Primary,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    what: str,
) -> None:
    import logging
    import time

    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)  # follow mode is waited for at once
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    folder = tmp_path / "replica"
    folder.mkdir(mode=0o755)
    planted = folder / f"catalog.db{name}"
    plant(planted, what)
    before = os.lstat(planted)
    follower = Follower(folder / "catalog.db", primary.url, follow=True)
    try:
        with caplog.at_level(logging.WARNING, logger="toolcat.store.replica"):
            synced(follower, seconds=10)
            for toolkit in ("text.yaml", "files.yaml"):
                revision = primary.register(SAMPLE_TOOLKITS / toolkit)
                started = time.monotonic()
                synced(follower, seconds=10)
                assert time.monotonic() - started < 5.0  # not FOLLOW_GRACE each change
                assert follower.state["revision"] == revision
    finally:
        follower.close()
    said = [r.getMessage() for r in caplog.records]
    assert any("follow mode is off" in s and str(planted) in s for s in said)
    assert len(said) < 10  # said once, not at every look
    after = os.lstat(planted)  # never removed nor written
    assert (after.st_ino, after.st_uid, after.st_mtime_ns) == (
        before.st_ino,
        before.st_uid,
        before.st_mtime_ns,
    )


@pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")
@NEEDS_ROOT
def test_another_users_sidecar_is_replaced_by_follow_mode_not_a_reason_to_stop(
    primary: Primary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Litestream renames its ``-txid`` sidecar over whatever is there: follow mode works on."""

    def no_full_restore(self: Follower, txid: int, steps: dict[str, float]) -> int:
        raise AssertionError("a full restore")

    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    folder = tmp_path / "replica"
    folder.mkdir(mode=0o755)
    plant(folder / "catalog.db.follow-txid", "another user's file")
    follower = Follower(folder / "catalog.db", primary.url, follow=True)
    try:
        synced(follower)
        monkeypatch.setattr(Follower, "_restore", no_full_restore)
        monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
        revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
        synced(follower)
        assert follower.state["revision"] == revision and follower.staging is not None
    finally:
        follower.close()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_a_folder_as_follow_modes_sidecar_leaks_no_descriptor_and_stops_no_look(
    tmp_path: Path,
) -> None:
    """``open(fd)`` on a folder raises IsADirectoryError and leaves ``fd`` open: ``news``
    (asked every 50 ms) leaked 20 descriptors a second until the server could open nothing,
    and ``sync`` raised it at every look (no change taken, by follow mode or in full)."""
    follower = Follower.__new__(Follower)  # only what the sidecar's reading needs
    follower.staging = tmp_path / "catalog.db.follow"
    follower.state = {"primary": "file:///nowhere", "txid": 1}
    follower._news = follower._news_listed = None
    Path(f"{follower.staging}-txid").mkdir()
    before = open_descriptors()
    for _ in range(50):
        assert follower._staged_txid() is None
        assert follower.news() is False
    assert open_descriptors() == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_a_folder_as_the_state_file_is_damaged_state_not_a_crash(tmp_path: Path) -> None:
    from toolcat.store.replica_state import state_path

    state_path(tmp_path / "catalog.db").mkdir()
    before = open_descriptors()
    for _ in range(20):
        with pytest.raises(replica.DamagedStateError, match="not a regular file"):
            replica.read_state(tmp_path / "catalog.db")
    assert open_descriptors() == before


@NEEDS_ROOT
def test_a_folder_squatted_in_a_sticky_folder_is_not_taken_for_its_files_owner(
    tmp_path: Path,
) -> None:
    """/tmp/new/catalog.db, /tmp/new not made yet: anyone may make /tmp/new and a catalog
    file (marked a replica of the primary, with a state file) in it first. The folder of
    "the served file's owner" was taken, so the squatter's file and state (whose owner
    ``read_state`` takes too) were read as this replica's."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    squatted = sticky / "new"
    squatted.mkdir(mode=0o755)
    (squatted / "catalog.db").write_text("")
    for made in (squatted, squatted / "catalog.db"):
        os.chown(made, 54321, 54321)
    with pytest.raises(CatalogError, match="no folder a replica may use"):
        replica._check_folder(squatted / "catalog.db")
    # The served file's owner's folder elsewhere (not in a folder everyone may write) is
    # still taken, as docs/security.md says.
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "catalog.db").write_text("")
    for made in (theirs, theirs / "catalog.db"):
        os.chown(made, 54321, 54321)
    replica._check_folder(theirs / "catalog.db")
