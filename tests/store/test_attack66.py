"""attack66: a fresh replica waiting for follow mode's first restore (``Follower._follow_soon``):
up to ``RESTORE_TIMEOUT`` (600 s) now, even when follow mode's file shows and lags, where it
restored in full after ``FOLLOW_GRACE`` (20 s) before."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store.test_replica import LITESTREAM, Primary
from toolcat import Catalog
from toolcat.store import replica
from toolcat.store.replica import Follower

pytestmark = pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")


def stuck_litestream(tmp_path: Path) -> Path:
    """Litestream, but its follow mode (``restore -f``) hangs once it has written the first
    snapshot into its file: the file and its ``-txid`` sidecar show a transaction behind
    the store's, the process runs on and applies nothing more (a download stalled on a
    dead connection, an object store answering nothing: Litestream has no timeout of its
    own there)."""
    script = tmp_path / "litestream"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        '  *" -f "*)\n'
        '    while [ "$#" -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        '    : > "$out"; printf "0000000000000001" > "$out-txid"\n'
        "    exec sleep 600 ;;\n"
        "esac\n"
        f'exec "{LITESTREAM}" "$@"\n'
    )
    script.chmod(stat.S_IRWXU)
    return script


def test_a_fresh_replica_whose_follow_mode_hangs_restores_in_full_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh replica (nothing served yet) whose follow mode runs but is stuck behind the
    store, its file showing. Before, it restored in full once follow mode had settled and
    the work had waited ``FOLLOW_GRACE``; now ``_follow_soon`` waits for as long as the
    process lives, up to ``RESTORE_TIMEOUT`` (600 s), whatever its file shows: no
    progress is looked at. ``toolcat serve --replica-of`` waits ``--replica-wait`` (300 s
    by default) for the first revision and so never starts; the grace and the settling
    time are scaled down here (1 s and 0.2 s), the restore's timeout left as it is."""
    monkeypatch.setattr(replica, "FOLLOW_GRACE", 1.0)
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.2)
    primary = Primary(tmp_path)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    revision = primary.register(SAMPLE_TOOLKITS / "text.yaml")  # the store past txid 1
    follower = Follower(
        tmp_path / "replica" / "catalog.db",
        primary.url,
        litestream=str(stuck_litestream(tmp_path)),
        follow=True,
    )
    try:
        deadline = time.monotonic() + 8
        swapped = showed = False
        while not swapped and time.monotonic() < deadline:
            swapped = follower.sync()
            assert follower.staging is not None
            showed = showed or follower.staging.exists()
            if not swapped:
                time.sleep(0.25)
        assert showed  # follow mode's file showed, behind the store
        assert swapped and follower.path.exists()  # still waiting, 8 s on (a 1 s grace)
        with Catalog(follower.path) as copy:
            assert copy.revision == revision
    finally:
        follower.close()


def _synced_within(follower: Follower, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if follower.sync():
            return True
        time.sleep(0.25)
    return False


def test_a_serving_replica_whose_file_was_removed_is_not_taken_for_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_follow_soon`` tells a fresh replica by its served file missing. A serving replica
    (its state names the transaction served) whose file was removed under it (an
    operator's cleanup, a disk tool) with follow mode stuck behind: the next change waited
    ``FOLLOW_GRACE`` before its full restore; it now waits up to ``RESTORE_TIMEOUT``."""
    monkeypatch.setattr(replica, "FOLLOW_GRACE", 1.0)
    monkeypatch.setattr(replica, "FOLLOW_SETTLED", 0.2)
    primary = Primary(tmp_path)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    primary.register(SAMPLE_TOOLKITS / "text.yaml")
    path = tmp_path / "replica" / "catalog.db"
    plain = Follower(path, primary.url)
    try:
        assert plain.sync()
    finally:
        plain.close()
    follower = Follower(path, primary.url, litestream=str(stuck_litestream(tmp_path)), follow=True)
    try:
        assert follower.state.get("txid") is not None  # serving
        revision = primary.register(SAMPLE_TOOLKITS / "files.yaml")
        # restarted and serving: restored in full after the grace
        assert _synced_within(follower, 6)
        os.unlink(path)
        revision = primary.register(SAMPLE_TOOLKITS / "time.yaml")
        assert _synced_within(follower, 6)
        with Catalog(path) as copy:
            assert copy.revision == revision
    finally:
        follower.close()
