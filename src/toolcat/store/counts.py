"""Catalog-wide counts kept in ``meta``, so that ``status`` reads two rows instead of
scanning every tool (its counts took 107 ms of CPU at 100k tools, a join over every active
tool and a count of the FTS5 table, and grew with the catalog).

- ``active_tools``: the tools of active toolkit versions.
- ``vectors:<model>``: the active tools that have a vector from ``<model>``; absent: none.

SQLite triggers (``TRIGGERS``, created by migration 4) keep them in the same transaction as
every change that moves them: a toolkit version becoming active or not, an active version
deleted, a vector stored or deleted. Being triggers, they hold for every write path, those
written later included, as long as vectors are stored without ``INSERT OR REPLACE`` (whose
implicit delete fires no trigger: ``writer.store_vectors`` upserts instead).

The FTS5 index keeps its own totals (``index_totals``), read from its record, not counted.
"""

from __future__ import annotations

import sqlite3

ACTIVE_TOOLS = "active_tools"
VECTORS = "vectors:"

_ADD = "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value"


def _toolkit_counts(row: str, sign: str) -> str:
    """SQL adding ``sign`` times toolkit ``row``'s tools and their vectors to the counts."""
    return f"""
        INSERT INTO meta (key, value)
            SELECT '{ACTIVE_TOOLS}', {sign} count(*) FROM tools WHERE toolkit_id = {row}.id
            {_ADD};
        INSERT INTO meta (key, value)
            SELECT '{VECTORS}' || e.model, {sign} count(*) FROM tools t JOIN embeddings e
            ON e.content_hash = t.content_hash WHERE t.toolkit_id = {row}.id
            GROUP BY e.model {_ADD};
    """


def _vector_counts(row: str, sign: str) -> str:
    """SQL adding ``sign`` times the active tools holding vector ``row``'s definition."""
    return f"""
        INSERT INTO meta (key, value)
            SELECT '{VECTORS}' || {row}.model, {sign} count(*) FROM tools t
            JOIN toolkits k ON k.id = t.toolkit_id
            WHERE t.content_hash = {row}.content_hash AND k.active = 1
            {_ADD};
    """


TRIGGERS = (
    f"""CREATE TRIGGER counts_activated AFTER UPDATE OF active ON toolkits
        WHEN new.active AND NOT old.active BEGIN {_toolkit_counts("new", "")} END""",
    f"""CREATE TRIGGER counts_deactivated AFTER UPDATE OF active ON toolkits
        WHEN old.active AND NOT new.active BEGIN {_toolkit_counts("old", "-")} END""",
    f"""CREATE TRIGGER counts_active_deleted BEFORE DELETE ON toolkits
        WHEN old.active BEGIN {_toolkit_counts("old", "-")} END""",
    f"""CREATE TRIGGER counts_vector_stored AFTER INSERT ON embeddings
        BEGIN {_vector_counts("new", "")} END""",
    f"""CREATE TRIGGER counts_vector_deleted AFTER DELETE ON embeddings
        BEGIN {_vector_counts("old", "-")} END""",
)
# Their names: a catalog missing one is damaged (``migrations.check_schema``).
TRIGGER_NAMES = tuple(trigger.split()[2] for trigger in TRIGGERS)


def active_tools(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (ACTIVE_TOOLS,)).fetchone()
    return int(row[0]) if row else 0


def vectors(conn: sqlite3.Connection, model: str) -> int:
    """Active tools with a vector from ``model``."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (VECTORS + model,)).fetchone()
    return int(row[0]) if row else 0


def recount(conn: sqlite3.Connection) -> None:
    """Count everything from the tables (migration 4; tests compare the kept counts)."""
    conn.execute(
        "DELETE FROM meta WHERE key = ? OR substr(key, 1, ?) = ?",
        (ACTIVE_TOOLS, len(VECTORS), VECTORS),
    )
    conn.execute(
        f"INSERT INTO meta (key, value) SELECT '{ACTIVE_TOOLS}', count(*) FROM tools t "
        "JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
    )
    conn.execute(
        f"INSERT INTO meta (key, value) SELECT '{VECTORS}' || e.model, count(*) FROM tools t "
        "JOIN toolkits k ON k.id = t.toolkit_id JOIN embeddings e "
        "ON e.content_hash = t.content_hash WHERE k.active = 1 GROUP BY e.model"
    )


def _varints(blob: bytes) -> list[int]:
    """Decode SQLite-format varints (big-endian 7-bit groups; a 9th byte carries 8 bits)."""
    values: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def index_totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens in all columns) of the FTS5 index, read from its "averages" record.

    That record (id 1 of ``tools_fts_data``) holds the row count then one token total per
    column, as varints; it is what FTS5's own ``bm25()`` uses, so reading it is exact and
    costs no scan.
    """
    row = conn.execute("SELECT block FROM tools_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = _varints(row[0])
    return values[0], sum(values[1:])


def tool_states(conn: sqlite3.Connection) -> dict[str, int]:
    """Tools by state: ``active`` (listed: an active version's, not deferred), ``deferred``
    (an active version's, found by search) and ``deprecated`` (of a deprecated version).
    A scan of every tool: callers keep the answer per revision."""
    row = conn.execute(
        "SELECT coalesce(sum(k.active AND NOT t.defer_loading), 0),"
        " coalesce(sum(k.active AND t.defer_loading), 0), coalesce(sum(k.deprecated), 0)"
        " FROM tools t JOIN toolkits k ON k.id = t.toolkit_id"
    ).fetchone()
    return {"active": int(row[0]), "deferred": int(row[1]), "deprecated": int(row[2])}
