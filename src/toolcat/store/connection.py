"""Opening the catalog file: where it lives, and the connection settings every user shares.

Failures that come from the file or the machine, not from toolcat's SQL (a lock held past the
busy timeout, a full disk, a damaged page, a file that is no SQLite database), surface as a
one-line ``CatalogError`` naming the file and the cause, wherever the query runs: the
connection and its cursors translate them (``CatalogConnection``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import CatalogDamagedError, CatalogError
from .replica_state import MARKER, state_path

BUSY_TIMEOUT_MS = 30_000

# Primary result codes (the low byte of an extended code) that describe the file or the
# machine. Others (a missing table, a constraint) are toolcat's business and pass unchanged.
_CAUSES = {
    5: "is locked: another process held it longer than the busy timeout ({timeout} s); "
    "try again when it is done",  # SQLITE_BUSY
    6: "is locked by another connection of this process",  # SQLITE_LOCKED
    7: "cannot be used: out of memory",  # SQLITE_NOMEM
    8: "is read-only here: {message}",  # SQLITE_READONLY
    10: "cannot be read or written (disk I/O error: {message})",  # SQLITE_IOERR
    11: "",  # SQLITE_CORRUPT: a CatalogDamagedError
    13: "cannot be written: the disk (or the database's size limit) is full; nothing of the "
    "failed change was kept",  # SQLITE_FULL
    14: "cannot be opened ({message})",  # SQLITE_CANTOPEN
    3: "cannot be used: permission denied",  # SQLITE_PERM
    26: "is not an SQLite database (the file holds something else)",  # SQLITE_NOTADB
}
_MESSAGES = {  # Python 3.10 has no sqlite_errorcode: recognise the messages instead
    "database is locked": 5,
    "database table is locked": 6,
    "database or disk is full": 13,
    "database disk image is malformed": 11,
    "file is not a database": 26,
    "disk i/o error": 10,
    "unable to open database file": 14,
    "attempt to write a readonly database": 8,
}


def environment_error(error: BaseException, path: str | os.PathLike[str]) -> CatalogError | None:
    """The ``CatalogError`` for an SQLite error caused by the file or the machine, else
    ``None`` (the error is a query's own and should propagate unchanged)."""
    if not isinstance(error, sqlite3.DatabaseError) or isinstance(
        error, (sqlite3.ProgrammingError, sqlite3.IntegrityError)
    ):
        return None
    message = str(error)
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else _MESSAGES.get(message.lower())
    cause = _CAUSES.get(primary) if primary is not None else None
    if cause is None:
        return None
    if primary == 11:
        return CatalogDamagedError(message, str(path))
    text = cause.format(timeout=BUSY_TIMEOUT_MS / 1000, message=message)
    return CatalogError(f"catalog {str(path)!r} {text}")


def translated(
    error: BaseException, path: str | os.PathLike[str], replica: bool = False
) -> BaseException:
    """``error`` as a ``CatalogError`` when the file or the machine caused it (a damaged
    replica's copy with the advice for a replica)."""
    found = environment_error(error, path) or error
    if replica and isinstance(found, CatalogDamagedError):
        return found.of_replica()
    return found


class CatalogCursor(sqlite3.Cursor):
    """A cursor whose environmental failures (mid-query too) become ``CatalogError``."""

    def _translated(self, error: sqlite3.DatabaseError) -> BaseException:
        conn: Any = self.connection
        return translated(error, conn.path, conn.replica_of is not None)

    def execute(self, sql: str, parameters: Any = (), /) -> CatalogCursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e

    def executemany(self, sql: str, seq: Iterable[Any], /) -> CatalogCursor:
        try:
            return super().executemany(sql, seq)
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        try:
            return super().fetchmany(size)
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as e:
            raise self._translated(e) from e


class CatalogConnection(sqlite3.Connection):
    """A connection to one catalog file that names it in every environmental error.

    ``replica_of`` names the primary when the file is a read-only replica (store/replica.py).
    """

    path: str = ""
    replica_of: str | None = None
    # (revision label, tools_fts rows logged under it): ``writer.fts_changed``'s count
    fts_logged: tuple[int, int] = (-1, 0)

    def cursor(self, factory: Any = CatalogCursor) -> Any:  # execute() goes through here
        return super().cursor(factory)

    # ``sqlite3.Connection.execute`` makes a plain cursor, whose fetches would not
    # translate a damaged page met mid-query: go through ``cursor()``.
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
        return self.cursor().executemany(sql, parameters)


def rollback_quietly(conn: sqlite3.Connection) -> None:
    """Roll back if a transaction is open, never masking the error that led here.

    After a full disk, an I/O error or a damaged page SQLite may already have rolled the
    transaction back; a plain ``ROLLBACK`` would then fail with "cannot rollback - no
    transaction is active" and hide the real cause.
    """
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error, CatalogError):
            conn.execute("ROLLBACK")


def default_path() -> Path:
    """The catalog used when none is named: ``$TOOLCAT_DB``, else a per-user data file."""
    env = os.environ.get("TOOLCAT_DB")
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "toolcat" / "catalog.db"


def _check_file(path: Path) -> None:
    """Refuse a path that is not a regular file (a FIFO would hang the first read)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise CatalogError(f"cannot open catalog {str(path)!r}: {e.strerror or e}") from e
    if not stat.S_ISREG(mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise CatalogError(f"cannot open catalog {str(path)!r}: it is {kind}, not a catalog file")


def connect(path: str | os.PathLike[str], *, create: bool = True) -> sqlite3.Connection:
    """Open a catalog file in WAL mode; with ``create``, create it (and its folder) if missing.

    Transactions are managed explicitly (``isolation_level=None``): writers take
    ``BEGIN IMMEDIATE`` so two registering processes queue instead of deadlocking, and
    readers see a consistent snapshot without blocking them. A lock held longer than
    ``BUSY_TIMEOUT_MS`` is an error, not an endless wait.

    A replica's file (one whose meta names its primary, store/replica.py) opens read-only
    and ``immutable``: it is only ever replaced whole by a rename, so a connection reads the
    revision it opened, unlocked. The replica state file beside it is never read here.

    Raises:
        CatalogError: The file cannot be opened, is no catalog, or (without ``create``) is
            missing.
    """
    path = Path(path)
    _check_file(path)
    if not path.exists():
        if os.path.lexists(state_path(path)):  # a fresh replica: never create a file there
            raise CatalogError(
                f"replica {str(path)!r} holds no revision yet: `toolcat serve --replica-of` "
                "restores one"
            )
        if not create:
            raise CatalogError(
                f"no catalog at {str(path)!r}: check the path, or create the catalog first "
                "(`toolcat init`, `toolcat register`)"
            )
    conn: CatalogConnection | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = _open(path, replica=False)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if names and "meta" not in names and {"toolkits", "tools"} <= names:
            raise CatalogDamagedError("meta missing", str(path))
        if names and "meta" not in names:  # someone else's database: change nothing in it
            raise CatalogError(f"{str(path)!r} is an SQLite database but not a toolcat catalog")
        # A replica is what its own meta says (written by the restore, store/replica.py),
        # never what a file beside it says.
        query = "SELECT value FROM meta WHERE key = ?"
        row = conn.execute(query, (MARKER,)).fetchone() if names else None
        if row is not None:
            conn.close()
            conn = _open(path, replica=True)
            conn.replica_of = str(row[0])
            return conn
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except CatalogDamagedError as e:
        if conn is not None:
            conn.close()
        # Too damaged to say whether it is a replica: a state file beside it makes it
        # likely, and only changes the advice.
        if os.path.lexists(state_path(path)):
            raise e.of_replica() from e
        raise
    except CatalogError:
        if conn is not None:
            conn.close()
        raise
    except (sqlite3.DatabaseError, OSError) as e:
        if conn is not None:
            conn.close()
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise CatalogError(f"cannot open catalog {str(path)!r}: {reason}") from e
    return conn


def _open(path: Path, *, replica: bool) -> CatalogConnection:
    """A connection to ``path``; a replica's read-only and ``immutable`` (its file is only
    ever replaced whole, so a connection reads the revision it opened, unlocked)."""
    conn = sqlite3.connect(
        path.resolve().as_uri() + "?mode=ro&immutable=1" if replica else str(path),
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
        factory=CatalogConnection,
        uri=replica,
    )
    conn.path = str(path)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn
