"""The replica state file (``<db>.replica.json``) is input: a FIFO, a planted file, a huge
one, wrong types. None of it hangs a command, makes an ordinary catalog read-only, costs
memory, or reaches an error's text; a replica with a damaged state restores afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from tests.store.test_replica import LITESTREAM, Primary
from toolcat import Catalog, CatalogError
from toolcat.store import replica
from toolcat.store.replica import DamagedStateError, Follower

PLANTED = "PLANTED-TEXT \x1b]0;owned\x07"


def toolcat(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=30,  # a FIFO read would hang here forever
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


@pytest.fixture
def ordinary(tmp_path: Path) -> Path:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return db


def test_a_fifo_beside_an_ordinary_catalog_hangs_nothing(ordinary: Path) -> None:
    os.mkfifo(replica.state_path(ordinary))
    done = toolcat(ordinary, "list")
    assert done.returncode == 0 and "math." in done.stdout, done.stderr
    assert toolcat(ordinary, "status").returncode == 0


@pytest.mark.parametrize(
    "planted",
    [
        {"primary": PLANTED},
        {"primary": "s3://bucket/x", "txid": 1, "error": PLANTED},
        {"primary": "file:///tmp/x", "txid": "one"},
    ],
    ids=["primary", "error", "wrong-type"],
)
def test_a_planted_state_cannot_make_an_ordinary_catalog_a_replica(
    ordinary: Path, planted: dict[str, Any]
) -> None:
    replica.state_path(ordinary).write_text(json.dumps(planted))
    with Catalog(ordinary) as catalog:
        assert catalog.replica_of is None
        catalog.register(SAMPLE_TOOLKITS / "text.yaml")  # still writable
        assert "replica" not in catalog.status()
    done = toolcat(ordinary, "remove", "text")
    assert done.returncode == 0, done.stderr
    assert "PLANTED" not in done.stdout + done.stderr


def test_a_huge_state_beside_an_ordinary_catalog_is_never_read(ordinary: Path) -> None:
    with open(replica.state_path(ordinary), "wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse: costs no disk, but a read costs 600 MB
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(ordinary)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 200 * 1024, f"peak RSS {done.stdout} KiB"


# VmHWM, not ru_maxrss: Linux keeps the larger of the two across exec, so a child of a big
# pytest process would report its parent's size.
PEAK = """
import sys
from toolcat import Catalog
with Catalog(sys.argv[1]) as c:
    c.list(limit=10)
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


VALID = {"primary": "s3://bucket/catalog", "txid": 3, "primary_txid": 3, "revision": 2}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"txid": "3"}, "txid is not a whole number"),
        ({"txid": True}, "txid is not a whole number"),
        ({"txid": 1.5}, "txid is not a whole number"),
        ({"txid": -1}, "txid is out of range"),
        ({"txid": 2**70}, "txid is out of range"),
        ({"revision": [1]}, "revision is not a whole number"),
        ({"checked_at": "now"}, "checked_at is not a number"),
        ({"checked_at": float("nan")}, "checked_at is out of range"),
        ({"checked_at": float("inf")}, "checked_at is out of range"),
        ({"primary": 7}, "primary is not"),
        ({"primary": "s3://user:PLANTEDPW@bucket/x"}, "primary is not"),
        ({"primary": "s3://b/x\x1b[2J"}, "primary is not"),
        ({"error": {"a": 1}}, "error is not text"),
        ({"copy": "1 2 3"}, "copy is not a file stamp"),
        ({"copy": [1, 2]}, "copy is not a file stamp"),
        ({"copy": [1, 2, -3]}, "copy is not a file stamp"),
        ({"copy": [1, 2, True]}, "copy is not a file stamp"),
        ({"copy": [1, 2, 2.5]}, "copy is not a file stamp"),
        ({"copy": [1, 2, 2**70]}, "copy is not a file stamp"),
    ],
    ids=repr,
)
def test_wrong_types_are_damaged_state_naming_the_field_never_the_value(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    db = tmp_path / "catalog.db"
    replica.state_path(db).write_text(json.dumps({**VALID, **change}))
    with pytest.raises(DamagedStateError) as raised:
        replica.read_state(db)
    message = str(raised.value)
    assert words in message and "damaged replica state" in message
    assert "PLANTED" not in message and "\x1b" not in message and "\n" not in message


@pytest.mark.parametrize(
    "shape",
    ["[]", '"x"', "{", "[" * 100_000, "null"],
    ids=["list", "string", "torn", "deep", "null"],
)
def test_a_state_that_is_no_object_is_damaged(tmp_path: Path, shape: str) -> None:
    db = tmp_path / "catalog.db"
    replica.state_path(db).write_text(shape)
    with pytest.raises(DamagedStateError):
        replica.read_state(db)


def test_a_link_a_fifo_a_big_file_or_others_writable_are_damaged(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    state = replica.state_path(db)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(VALID))
    state.symlink_to(target)
    with pytest.raises(DamagedStateError, match="cannot be opened"):
        replica.read_state(db)
    state.unlink()
    os.mkfifo(state)
    with pytest.raises(DamagedStateError, match="not a regular file"):
        replica.read_state(db)
    state.unlink()
    state.write_text(json.dumps({**VALID, "error": " " * 70_000}))
    with pytest.raises(DamagedStateError, match="over 65536 bytes"):
        replica.read_state(db)
    state.write_text(json.dumps(VALID))
    state.chmod(0o666)
    with pytest.raises(DamagedStateError, match="writable by others"):
        replica.read_state(db)
    state.chmod(0o644)
    assert replica.read_state(db) == {**VALID, "error": None}


@pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")
@pytest.mark.parametrize(
    "state",
    [{"primary": "x", "txid": "bad"}, "FIFO", {"txid": 5}],
    ids=["txid", "fifo", "no-primary"],
)
def test_a_replica_with_a_damaged_state_restores_afresh_and_serves(
    tmp_path: Path, state: Any
) -> None:
    primary = Primary(tmp_path)
    revision = primary.register(SAMPLE_TOOLKITS / "math.yaml")
    path = tmp_path / "replica" / "catalog.db"
    Follower(path, primary.url).sync()
    marker = replica.state_path(path)
    marker.unlink()
    if state == "FIFO":
        os.mkfifo(marker)
    else:
        marker.write_text(json.dumps(state))
    follower = Follower(path, primary.url)
    assert not follower.serving  # nothing of the state is trusted
    assert follower.sync() is True and follower.state["revision"] == revision
    assert replica.health(follower.state)["txid"] == follower.state["txid"]


@pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")
def test_status_on_a_replica_with_a_damaged_state_says_so(tmp_path: Path) -> None:
    primary = Primary(tmp_path)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    path = tmp_path / "replica" / "catalog.db"
    Follower(path, primary.url).sync()
    replica.state_path(path).write_text(json.dumps({"primary": primary.url, "txid": PLANTED}))
    done = toolcat(path, "status")
    assert done.returncode == CatalogError.exit_code
    assert "damaged replica state" in done.stderr and "PLANTED" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert toolcat(path, "list").returncode == 0  # reading the copy needs no state


@pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")
def test_a_replica_copy_is_read_only_because_of_what_it_holds(tmp_path: Path) -> None:
    """The state file gone, the copy is still a replica (its meta says so)."""
    primary = Primary(tmp_path)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    path = tmp_path / "replica" / "catalog.db"
    Follower(path, primary.url).sync()
    replica.state_path(path).unlink()
    done = toolcat(path, "remove", "math")
    assert done.returncode == 14 and "read-only replica of file://" in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "-config=/etc/passwd",
        "--help",
        "sftp://user@host/path",
        "http://example.com/x",
        "s3://",
        "file://relative/path",
        " s3://bucket/x",
        "s3://bucket/x\n",
    ],
    ids=repr,
)
def test_a_replica_url_that_is_a_flag_or_no_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(CatalogError, match="--replica-of"):
        Follower(tmp_path / "catalog.db", url, litestream="/bin/false")
    assert not replica.state_path(tmp_path / "catalog.db").exists()
