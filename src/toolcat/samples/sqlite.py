"""Inspect and query SQLite database files inside the workspace."""

from __future__ import annotations

import sqlite3
from typing import Any

from toolcat import tool

from .workspace import resolve

__toolcat__ = {
    "toolkit": "sqlite",
    "version": "1.0.0",
    "tags": ["sql", "database"],
    "defer_loading": True,
}


def _open(database: str, *, write: bool = False) -> sqlite3.Connection:
    path = resolve(database)
    if not path.is_file():
        if not write:
            raise FileNotFoundError(f"no database {database!r} in the workspace")
        path.parent.mkdir(parents=True, exist_ok=True)
    mode = "rwc" if write else "ro"
    return sqlite3.connect(f"file:{path}?mode={mode}", uri=True)


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
    with _open(database) as conn:
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
    with _open(database) as conn:
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
    with _open(database) as conn:  # opened read-only: writes fail whatever the SQL says
        cursor = conn.execute(sql, params or [])
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
    conn = _open(database, write=True)
    try:
        with conn:
            cursor = conn.execute(sql, params or [])
        return {"rows_affected": cursor.rowcount, "last_row_id": cursor.lastrowid}
    finally:
        conn.close()
