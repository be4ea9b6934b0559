"""attack62: the standby of a replica in follow mode (the file served before, patched at the
next change), attacked where attack61's fix put it: the state's ``standby`` stamp, the
recovery of a follower stopped mid set-aside, the set-aside's temporary name, and the checks
before the standby is taken. Against the real Litestream."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.store import test_replica as base
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = base.pytestmark
primary = base.primary  # the fixture, from the real Litestream
following = base.following


def leftovers(follower: Follower) -> list[str]:
    """The standby and the set-aside's temporary names in the replica's folder."""
    prefix = f"{follower.path.name}{replica.STANDBY_SUFFIX}"
    return sorted(n for n in os.listdir(follower.path.parent) if n.startswith(prefix))


@pytest.mark.parametrize("stopped", ["after-link", "after-rename"])
def test_a_follower_stopped_mid_set_aside_leaks_no_copy_and_keeps_patching(
    primary: base.Primary,
    following: Follower,
    monkeypatch: pytest.MonkeyPatch,
    stopped: str,
) -> None:
    # The hole: a follower killed inside ``_set_aside`` (after its ``link``, or after the
    # rename but before the served file was swapped) leaves the served file under a second
    # name. At the restart's next change the set-aside renamed a link of the served file
    # over the standby that already was that file: rename(2) of two names of one file does
    # nothing, so the temporary name stayed, holding a whole old revision on disk for good
    # (no code removes it), and the standby had two names (never patched again). Killed
    # after the link with the same pid at the restart (a container's), ``link`` then failed
    # at every change: nothing was ever set aside again, and every change copied.
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    base.synced(following)
    assert following.standby is not None
    if stopped == "after-link":
        os.link(following.path, f"{following.standby}.{os.getpid()}.tmp")
    else:
        following._set_aside()  # the state, as saved, still names the served file `copy`
    following.close()
    again = Follower(following.path, primary.url, follow=True)
    try:
        for toolkit in ("text.yaml", "files.yaml"):
            revision = primary.register(base.SAMPLE_TOOLKITS / toolkit)
            base.synced(again, seconds=40)
            assert again.state["revision"] == revision
            assert leftovers(again) == [f"{again.path.name}{replica.STANDBY_SUFFIX}"]
            standby = os.lstat(f"{again.path}{replica.STANDBY_SUFFIX}")
            assert standby.st_nlink == 1
        assert "patch" in again.steps  # the second change patched the standby
    finally:
        again.close()


STATE = {"primary": "s3://bucket/catalog", "txid": 3, "primary_txid": 3, "revision": 2}
HIGH_INODE = 2**63 + 0x2A  # an NTFS file id with a high sequence number (CIFS serverino)


@pytest.mark.parametrize("key", ["copy", "standby"])
def test_a_stamp_the_kernel_gives_is_no_damaged_state(tmp_path: Path, key: str) -> None:
    # The hole: a stamp's inode was bounded like a transaction id (2**63 - 1), but st_ino is
    # an unsigned 64-bit number, and some file systems hand out ones past that (CIFS with
    # NTFS file ids, whose top bits are a sequence number; some NFS servers). A replica
    # there saved a state it read back as "damaged" at every start: each restart restored
    # the whole catalog afresh, and `toolcat status` on it failed while it ran.
    db = tmp_path / "catalog.db"
    stamp = [HIGH_INODE, 135168, 1_796_000_000_123_456_789]
    replica.state_path(db).write_text(json.dumps({**STATE, key: stamp}))
    assert replica.read_state(db)[key] == stamp  # type: ignore[index]


@pytest.mark.parametrize(
    "stamp",
    [[2**64, 1, 1], [1, 2**63, 1], [1, 1, 2**63], [1, -1, 1], [True, 1, 1], [1, 1], None],
    ids=repr,
)
def test_a_stamp_past_what_the_kernel_gives_is_still_damaged(
    tmp_path: Path, stamp: list[Any] | None
) -> None:
    db = tmp_path / "catalog.db"
    state = {**STATE, "standby": stamp if stamp is not None else [[1], 2, 3]}
    replica.state_path(db).write_text(json.dumps(state))
    with pytest.raises(replica.DamagedStateError, match="standby is not a file stamp"):
        replica.read_state(db)


def test_a_file_put_at_the_standby_name_between_its_checks_and_its_rename_stays(
    primary: base.Primary, following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hole: ``_take_standby`` checks the open standby, then renames whatever is at the
    # name to the incoming name. A file put there in between (a second follower's
    # set-aside, any process of this user's) was moved to the incoming name; the samestat
    # check refused it, but left it there: the fresh copy's O_EXCL open then failed
    # (EEXIST), the change failed, follow mode was thrown away (``_refollow``) with the file
    # (``_clear_incoming``), and the catalog was restored in full from the store.
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    base.synced(following)
    primary.register(base.SAMPLE_TOOLKITS / "text.yaml")
    base.synced(following)
    assert following.standby is not None and following.staging is not None
    theirs = following.path.parent / "theirs.db"
    theirs.write_bytes(b"not the replica's")
    alone = replica._alone

    def raced(fd: int) -> bool:
        found = alone(fd)
        os.replace(theirs, following.standby)  # another process, at that moment
        return found

    monkeypatch.setattr(replica, "_alone", raced)
    revision = primary.register(base.SAMPLE_TOOLKITS / "files.yaml")
    staged = os.stat(following.staging)
    base.synced(following, seconds=40)
    assert following.state["revision"] == revision
    assert "copy" in following.steps  # copied from follow mode's file, not restored in full
    assert os.path.samestat(os.stat(following.staging), staged)  # follow mode kept its file
    assert following.standby.read_bytes() == b"not the replica's"  # where it was put


@pytest.mark.parametrize("missing", ["no-leases", "EINVAL"])
def test_where_no_lease_can_be_had_no_standby_is_kept_for_nothing(
    primary: base.Primary,
    following: Follower,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    missing: str,
) -> None:
    # The hole (a silent no-op): where no write lease can be had at all (a system without
    # F_SETLEASE, a file system without leases: NFS; leases turned off), ``_alone`` said
    # "open elsewhere" at every change, and nothing said why. The standby was never patched,
    # yet set aside again at every change: a whole old revision kept on disk (2.2 GB at 1M
    # tools) for nothing, for as long as the replica ran.
    import errno
    import fcntl

    if missing == "no-leases":
        monkeypatch.delattr(fcntl, "F_SETLEASE")
    else:
        real = fcntl.fcntl

        def refused(fd: int, command: int, arg: Any = 0) -> Any:
            if command == fcntl.F_SETLEASE and arg == fcntl.F_WRLCK:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            return real(fd, command, arg)

        monkeypatch.setattr(fcntl, "fcntl", refused)
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)
    base.synced(following)
    assert following.standby is not None
    for toolkit in ("text.yaml", "files.yaml", "data.yaml"):
        revision = primary.register(base.SAMPLE_TOOLKITS / toolkit)
        base.synced(following)
        assert following.state["revision"] == revision
        assert "copy" in following.steps
    assert not following.standby.exists()  # no old revision kept that nothing would patch
    assert "standby" not in following.state
    said = [r for r in caplog.records if "lease" in r.getMessage()]
    assert len(said) == 1  # said once
