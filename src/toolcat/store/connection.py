"""Opening the catalog file: where it lives, and the connection settings every user shares."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..errors import CatalogError

BUSY_TIMEOUT_MS = 30_000


def default_path() -> Path:
    """The catalog used when none is named: ``$TOOLCAT_DB``, else a per-user data file."""
    env = os.environ.get("TOOLCAT_DB")
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    return Path(data_home).expanduser() / "toolcat" / "catalog.db"


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) a catalog file in WAL mode.

    Transactions are managed explicitly (``isolation_level=None``): writers take
    ``BEGIN IMMEDIATE`` so two registering processes queue instead of deadlocking, and
    readers see a consistent snapshot without blocking them.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path),
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except (sqlite3.DatabaseError, OSError) as e:
        raise CatalogError(f"cannot open catalog {str(path)!r}: {e}") from e
    return conn
