"""attack42: a replica's folder reached through links (issue 42's outside attack on d4b76c4).

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

from toolcat.errors import CatalogError
from toolcat.store import replica


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
