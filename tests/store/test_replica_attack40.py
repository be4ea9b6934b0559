"""attack40: a hostile follow mode ``-txid`` file against the real Litestream: it may start
a look early, never drive the server into listing the store in a loop."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.store import test_replica as base
from toolcat.server.watcher import RevisionWatcher
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = base.pytestmark
primary, following = base.primary, base.following  # the fixtures, from the real Litestream


@contextlib.contextmanager
def planting(path: Path, txids: Iterator[int], pause: float) -> Iterator[None]:
    """While the block runs, a thread rewrites follow mode's ``-txid`` file with ``txids``, as
    an attacker would: through a name of its own (Litestream renames its ``-txid.tmp``
    away), a lost race with Litestream passed over."""
    stop = threading.Event()

    def plant() -> None:
        temporary = path.with_name(path.name + ".planted")
        for txid in txids:
            if stop.is_set():
                return
            with contextlib.suppress(OSError):
                temporary.write_text(f"{txid:016x}\n")
                temporary.replace(path)
            stop.wait(pause)

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    try:
        yield
    finally:
        stop.set()
        planter.join(5)


@pytest.mark.slow
@pytest.mark.parametrize("sidecar", ["increasing", "flipping"])
def test_a_lying_txid_file_never_lists_the_store_in_a_loop(
    following: Follower, monkeypatch: pytest.MonkeyPatch, sidecar: str
) -> None:
    base.synced(following)
    replica._kill(following._follower)  # follow mode gone: the sidecar is the attacker's
    following._follower.wait(5)
    assert following.staging is not None
    path = Path(f"{following.staging}-txid")
    served = following.state["txid"]
    listings: list[int] = []
    published = Follower._published

    def counted(self: Follower) -> list[dict[str, object]]:
        listings.append(1)
        return published(self)

    monkeypatch.setattr(Follower, "_published", counted)
    watcher = RevisionWatcher(
        following.path, interval=1.0, follow=following.sync, news=following.news
    )

    async def main() -> None:
        with anyio.move_on_after(3.0):
            await watcher.run()

    lies = (served + (n if sidecar == "increasing" else 1 + n % 2) for n in itertools.count(1))
    with planting(path, lies, 0.01):
        anyio.run(main)
    # 3 s at 1 s: a look at the start, one per interval, at most one early per interval
    assert len(listings) <= 1 + 2 * 3, len(listings)
    assert following.state["txid"] == served  # nothing forged was swapped in


def test_real_news_is_still_told_after_a_look(primary: base.Primary, following: Follower) -> None:
    """The bound above never silences the real follow mode: what it tells of, the store
    lists at the look that follows."""
    base.synced(following)
    for toolkit in ("text.yaml", "math.yaml"):
        primary.register(base.SAMPLE_TOOLKITS / toolkit)
        deadline = time.monotonic() + 20
        while not following.news():
            assert time.monotonic() < deadline, following.state
            time.sleep(0.05)
        base.synced(following)


def test_a_huge_txid_file_never_freezes_the_replica(
    primary: base.Primary, following: Follower
) -> None:
    """A ``-txid`` file saying 2**63-1 while the store holds a newer transaction: the copy
    of the staging file was recorded as holding that transaction, so every later look found
    the store "behind" the copy and the replica never followed again (across restarts: the
    state keeps it)."""
    base.synced(following)
    assert following.staging is not None
    path = Path(f"{following.staging}-txid")
    primary.register(base.SAMPLE_TOOLKITS / "text.yaml")
    with planting(path, itertools.repeat(replica.MAX_TXID), 0.002):
        for _ in range(20):
            if following.sync():
                break
            time.sleep(0.1)
    assert following.state["txid"] < replica.MAX_TXID
    # It follows again. What the lie swapped in may be follow mode's older file, recorded as
    # the store's newest (served until the next change: the folder's writer could plant any
    # file there anyway); once follow mode has written its file's number again, each change
    # reaches the served copy.
    primary.register(base.SAMPLE_TOOLKITS / "files.yaml")
    deadline = time.monotonic() + 40
    while (following._staged_txid() or replica.MAX_TXID) == replica.MAX_TXID:
        assert time.monotonic() < deadline, "follow mode never wrote its -txid file again"
        time.sleep(0.1)
    revision = primary.register(base.SAMPLE_TOOLKITS / "data.yaml")
    while served_revision(following.path) != revision:
        assert time.monotonic() < deadline, following.state
        following.sync()
        time.sleep(0.1)


def served_revision(path: Path) -> int:
    from toolcat import Catalog

    with Catalog(path) as copy:
        return copy.revision
