"""Inspect and query SQLite database files inside the workspace."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

from toolcat import tool

from .workspace import resolve

__toolcat__ = {
    "toolkit": "sqlite",
    "version": "1.0.0",
    "tags": ["sql", "database"],
    "defer_loading": True,
}


# Informational pragmas a tool may run (those here may name a table or index); every other
# pragma, and any pragma that sets a value, is refused by the authorizer.
_PRAGMAS_WITH_ARGUMENT = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
}
_READ_PRAGMAS = _PRAGMAS_WITH_ARGUMENT | {
    "user_version",
    "application_id",
    "page_count",
    "page_size",
    "encoding",
    "collation_list",
    "function_list",
    "data_version",
    "freelist_count",
}
# SQL functions that reach the file system or the process, should an extension provide them.
_DENIED_FUNCTIONS = {
    "load_extension",
    "readfile",
    "writefile",
    "edit",
    "fts3_tokenizer",
    "zipfile",
    "sqlar_compress",
    "sqlar_uncompress",
}
_READ_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_RECURSIVE,
    sqlite3.SQLITE_TRANSACTION,
    sqlite3.SQLITE_SAVEPOINT,
}
_REFUSED = {
    sqlite3.SQLITE_ATTACH: "ATTACH (and VACUUM, which attaches)",
    sqlite3.SQLITE_DETACH: "DETACH",
}


class _Guard:
    """The authorizer: what a statement may do, and why the last refusal happened."""

    def __init__(self, write: bool) -> None:
        self.write = write
        self.refused: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, database: str | None, _: object
    ) -> int:
        reason = self.reason(action, arg1, arg2, database)
        if reason is None:
            return sqlite3.SQLITE_OK
        self.refused = self.refused or reason
        return sqlite3.SQLITE_DENY

    def reason(
        self, action: int, arg1: str | None, arg2: str | None, database: str | None
    ) -> str | None:
        if action in _REFUSED:
            return _REFUSED[action]
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name not in _READ_PRAGMAS or (
                arg2 is not None and name not in _PRAGMAS_WITH_ARGUMENT
            ):
                return f"PRAGMA {name}" + ("" if arg2 is None else " with a value")
            return None
        if action == sqlite3.SQLITE_FUNCTION:
            return f"the function {arg2}()" if (arg2 or "").lower() in _DENIED_FUNCTIONS else None
        if database not in (None, "main", "temp") and action != sqlite3.SQLITE_FUNCTION:
            return f"schema {database!r}"
        if action in _READ_ACTIONS or self.write:
            return None
        return "writing (this tool is read-only; sqlite_execute changes databases)"


def _open(database: str, *, write: bool = False) -> tuple[sqlite3.Connection, _Guard]:
    """A connection to a workspace database, by its resolved path (never a URI the caller
    wrote), read-only at the SQLite level unless ``write``, with ATTACH, VACUUM, file-reaching
    functions and pragma writes refused by an authorizer."""
    path = resolve(database)
    if path.exists() and not path.is_file():
        raise IsADirectoryError(f"{database!r} is not a database file")
    if not path.is_file():
        if not write:
            raise FileNotFoundError(f"no database {database!r} in the workspace")
        path.parent.mkdir(parents=True, exist_ok=True)
    mode = "rwc" if write else "ro"
    conn = sqlite3.connect(f"{path.as_uri()}?mode={mode}", uri=True, timeout=5)
    guard = _Guard(write)
    setlimit = getattr(conn, "setlimit", None)  # Python 3.11+: no attached databases at all
    if setlimit is not None:
        setlimit(getattr(sqlite3, "SQLITE_LIMIT_ATTACHED", 7), 0)
    conn.set_authorizer(guard)
    return conn, guard


def _run(
    conn: sqlite3.Connection, guard: _Guard, sql: str, params: list[Any] | None
) -> sqlite3.Cursor:
    try:
        return conn.execute(sql, params or [])
    except sqlite3.DatabaseError as e:
        if guard.refused:
            raise PermissionError(f"refused: {guard.refused} is not allowed here") from None
        if "too many attached databases" in str(e):
            raise PermissionError("refused: ATTACH and VACUUM are not allowed here") from None
        raise


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@tool(
    tags=["read-only"],
    defer_loading=False,
    idempotent=True,
    read_only=True,
    examples=["what tables are in this database"],
)
def sqlite_tables(database: str) -> list[dict[str, Any]]:
    """List the tables and views of an SQLite database file with their row counts.

    Args:
        database: Database file relative to the workspace root.
    """
    conn, _ = _open(database)
    with closing(conn):
        objects = conn.execute(
            "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        return [
            {
                "name": name,
                "type": kind,
                "rows": conn.execute(f"SELECT count(*) FROM {_quote(name)}").fetchone()[0],
            }
            for name, kind in objects
        ]


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["describe the columns of the orders table"],
)
def sqlite_schema(database: str, table: str) -> dict[str, Any]:
    """The CREATE statements and column names and types of one table in an SQLite database.

    Args:
        database: Database file relative to the workspace root.
        table: Table or view name.
    """
    conn, _ = _open(database)
    with closing(conn):
        sql = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ? AND type IN ('table', 'view')", (table,)
        ).fetchone()
        if sql is None:
            raise LookupError(f"no table {table!r}; sqlite_tables lists them")
        columns = [
            {"name": r[1], "type": r[2], "not_null": bool(r[3]), "primary_key": bool(r[5])}
            for r in conn.execute(f"PRAGMA table_info({_quote(table)})")
        ]
        return {"table": table, "sql": sql[0], "columns": columns}


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["how many orders were placed last month", "run a sql select"],
)
def sqlite_query(
    database: str, sql: str, params: list[Any] | None = None, max_rows: int = 500
) -> dict[str, Any]:
    """Run a read-only SQL SELECT against an SQLite database and return the rows as records.

    Args:
        database: Database file relative to the workspace root.
        sql: A single SELECT (or WITH ... SELECT) statement.
        params: Values for ? placeholders.
        max_rows: Most rows to return.
    """
    conn, guard = _open(database)  # read-only at the SQLite level, and by the authorizer
    with closing(conn):
        cursor = _run(conn, guard, sql, params)
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchmany(max_rows + 1)
    return {
        "columns": columns,
        "rows": [dict(zip(columns, row, strict=True)) for row in rows[:max_rows]],
        "truncated": len(rows) > max_rows,
    }


@tool(
    tags=["destructive"],
    destructive=True,
    examples=["insert a row into the customers table", "delete rows from a table"],
)
def sqlite_execute(database: str, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
    """Run a statement that changes an SQLite database (INSERT, UPDATE, DELETE, CREATE) and report the rows affected.

    Args:
        database: Database file relative to the workspace root (created if missing).
        sql: One SQL statement.
        params: Values for ? placeholders.
    """
    conn, guard = _open(database, write=True)
    with closing(conn):
        with conn:
            cursor = _run(conn, guard, sql, params)
        return {"rows_affected": cursor.rowcount, "last_row_id": cursor.lastrowid}
