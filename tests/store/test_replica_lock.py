"""One follower follows into a replica's file at a time (``PATH.replica.lock``): two (a
rolling restart on a shared volume) copied into the same incoming file, and one could check
and serve what the other was still writing. The lock file is input like every file there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.store import test_replica as base
from toolcat.errors import CatalogError
from toolcat.store.replica import Follower

pytestmark = base.pytestmark
SOURCE = "file:///nowhere"

FOLLOW = """
import sys
from toolcat.errors import CatalogError
from toolcat.store.replica import Follower
try:
    follower = Follower(sys.argv[1], sys.argv[2], follow=True)
except CatalogError as e:
    print("refused:", e, flush=True)
    raise SystemExit(3)
print("following", flush=True)
sys.stdin.readline()
follower.close()
"""


def follow_in_a_child(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", FOLLOW, str(path), SOURCE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_a_second_process_may_not_follow_into_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "replica" / "catalog.db"
    first = Follower(path, SOURCE, follow=True)
    try:
        child = follow_in_a_child(path)
        out, err = child.communicate("\n", timeout=60)
        assert child.returncode == 3, err
        assert out.startswith("refused: another replica follows the primary into")
        assert len(out.strip().splitlines()) == 1  # one line
    finally:
        first.close()
    child = follow_in_a_child(path)  # let go: the next one follows
    assert child.stdout is not None and child.stdout.readline().strip() == "following"
    child.communicate("\n", timeout=60)
    assert child.returncode == 0
    # In this process too: a second follower waits for the first to let go.
    again = Follower(path, SOURCE, follow=True)
    with pytest.raises(CatalogError, match="another replica follows"):
        Follower(path, SOURCE, follow=True)
    again.close()
    Follower(path, SOURCE, follow=True).close()
    del again
    dropped = Follower(path, SOURCE, follow=True)  # dropped without ``close``: lets go
    del dropped
    Follower(path, SOURCE, follow=True).close()


def test_a_follower_killed_outright_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "replica" / "catalog.db"
    child = follow_in_a_child(path)
    assert child.stdout is not None and child.stdout.readline().strip() == "following"
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    Follower(path, SOURCE, follow=True).close()


# What is at the lock's name, as input: tests/store/test_attack63.py.


def test_a_follower_that_cannot_start_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "replica" / "catalog.db"
    path.parent.mkdir()
    path.write_bytes(b"")  # an empty file, named by no state: refused
    with pytest.raises(CatalogError):
        Follower(path, SOURCE, follow=True)
    path.unlink()
    child = follow_in_a_child(path)  # the refused one held nothing
    assert child.stdout is not None and child.stdout.readline().strip() == "following"
    child.communicate("\n", timeout=60)
    assert child.returncode == 0


def test_an_ordinary_catalog_gets_no_lock_file_beside_it(tmp_path: Path) -> None:
    from toolcat import Catalog

    path = tmp_path / "primary" / "catalog.db"
    path.parent.mkdir()
    with Catalog(path):
        pass
    with pytest.raises(CatalogError, match="is an ordinary catalog"):
        Follower(path, SOURCE, follow=True)
    # Nothing of the replica's made beside the admin's file (SQLite's own -wal and -shm
    # come with any reader of a WAL catalog).
    made = {n for n in os.listdir(path.parent) if not n.endswith(("-wal", "-shm"))}
    assert made == {"catalog.db"}
