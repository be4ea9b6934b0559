"""Catalog-wide counts kept in ``meta`` and changed in the transactions that change what
they count, so that ``status`` reads two rows instead of scanning every tool (its counts
took 6 s at 1M tools, a join over every active tool and a count of the FTS5 table).

- ``active_tools``: the tools of active toolkit versions.
- ``vectors:<model>``: the active tools that have a vector from ``<model>``; absent: none.

Every change of which version is active goes through ``toolkit_activated`` (or its
opposite, before the active version is deleted), every new vector through
``vectors_stored``; migration 3 counted what was there before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

ACTIVE_TOOLS = "active_tools"
VECTORS = "vectors:"


def _add(conn: sqlite3.Connection, key: str, amount: int) -> None:
    if amount:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value",
            (key, amount),
        )


def toolkit_activated(conn: sqlite3.Connection, toolkit_id: int, sign: int = 1) -> None:
    """Count a toolkit version's tools (and their vectors) in (``sign`` 1) or out (-1: it
    stopped being active, or is about to be deleted while active)."""
    tools = conn.execute(
        "SELECT count(*) FROM tools WHERE toolkit_id = ?", (toolkit_id,)
    ).fetchone()[0]
    _add(conn, ACTIVE_TOOLS, sign * tools)
    for model, count in conn.execute(
        "SELECT e.model, count(*) FROM tools t JOIN embeddings e "
        "ON e.content_hash = t.content_hash WHERE t.toolkit_id = ? GROUP BY e.model",
        (toolkit_id,),
    ):
        _add(conn, VECTORS + model, sign * count)


def active_deleted(conn: sqlite3.Connection, toolkit_ids: Sequence[int]) -> None:
    """Before deleting these toolkit versions: count out the one that is active, if any."""
    for toolkit_id in toolkit_ids:
        row = conn.execute("SELECT active FROM toolkits WHERE id = ?", (toolkit_id,)).fetchone()
        if row and row[0]:
            toolkit_activated(conn, toolkit_id, -1)


def vectors_stored(conn: sqlite3.Connection, model: str, hashes: Sequence[str]) -> None:
    """Before storing vectors of ``model`` for these content hashes: count in the active
    tools of each hash that has none yet."""
    added = 0
    for digest in dict.fromkeys(hashes):
        if conn.execute(
            "SELECT 1 FROM embeddings WHERE content_hash = ? AND model = ?", (digest, model)
        ).fetchone():
            continue
        added += conn.execute(
            "SELECT count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
            "WHERE t.content_hash = ? AND k.active = 1",
            (digest,),
        ).fetchone()[0]
    _add(conn, VECTORS + model, added)


def models_pruned(conn: sqlite3.Connection, keep_model: str) -> None:
    """Every model's vectors but ``keep_model``'s were deleted."""
    conn.execute(
        "DELETE FROM meta WHERE substr(key, 1, ?) = ? AND key != ?",
        (len(VECTORS), VECTORS, VECTORS + keep_model),
    )


def active_tools(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (ACTIVE_TOOLS,)).fetchone()
    return int(row[0]) if row else 0


def vectors(conn: sqlite3.Connection, model: str) -> int:
    """Active tools with a vector from ``model``."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (VECTORS + model,)).fetchone()
    return int(row[0]) if row else 0


def recount(conn: sqlite3.Connection) -> None:
    """Count everything from the tables (migration 3; tests compare the kept counts)."""
    conn.execute(
        "DELETE FROM meta WHERE key = ? OR substr(key, 1, ?) = ?",
        (ACTIVE_TOOLS, len(VECTORS), VECTORS),
    )
    active = conn.execute(
        "SELECT count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
    ).fetchone()[0]
    _add(conn, ACTIVE_TOOLS, active)
    for model, count in conn.execute(
        "SELECT e.model, count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
        "JOIN embeddings e ON e.content_hash = t.content_hash WHERE k.active = 1 "
        "GROUP BY e.model"
    ).fetchall():
        _add(conn, VECTORS + model, count)
