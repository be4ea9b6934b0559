"""Numbered schema migrations, applied in order when a catalog is opened.

Never edit a migration that has shipped: add a new one. Each runs in its own
transaction together with the bump of ``schema_version``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ..errors import CatalogDamagedError, CatalogError
from .connection import rollback_quietly
from .counts import ACTIVE_TOOLS, TRIGGER_NAMES

Migration = Callable[[Any], None]  # takes a sqlite_utils.Database
# A tool row deleted takes its FTS5 row with it, and says so in the change log (m006).
TOOLS_FTS_DELETE = """
    CREATE TRIGGER tools_fts_delete AFTER DELETE ON tools BEGIN
        DELETE FROM tools_fts WHERE rowid = old.id;
        INSERT INTO fts_changes (revision, row)
            SELECT value + 1, old.id FROM meta WHERE key = 'revision';
    END
"""
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: Any) -> None:
    db.execute(
        """
        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value
        )
        """
    )
    db["meta"].insert_all([{"key": "revision", "value": 0}, {"key": "schema_version", "value": 0}])
    db.execute(
        """
        CREATE TABLE toolkits (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            version TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '[]',
            defer_loading INTEGER NOT NULL DEFAULT 0,
            module TEXT,
            content_hash TEXT NOT NULL,
            deprecated INTEGER NOT NULL DEFAULT 0,
            active INTEGER NOT NULL DEFAULT 0,
            source TEXT,
            registered_at TEXT NOT NULL,
            UNIQUE (name, version)
        )
        """
    )
    db.execute("CREATE INDEX toolkits_active ON toolkits (active, name)")
    db.execute(
        """
        CREATE TABLE tools (
            id INTEGER PRIMARY KEY,
            toolkit_id INTEGER NOT NULL REFERENCES toolkits (id) ON DELETE CASCADE,
            toolkit TEXT NOT NULL,
            name TEXT NOT NULL,
            defer_loading INTEGER NOT NULL,
            tags TEXT NOT NULL,
            definition TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            UNIQUE (toolkit_id, name)
        )
        """
    )
    db.execute("CREATE INDEX tools_order ON tools (toolkit, name)")
    db.execute("CREATE INDEX tools_name ON tools (name COLLATE NOCASE)")
    db.execute("CREATE INDEX tools_hash ON tools (content_hash)")
    db.execute(
        """
        CREATE TABLE tool_tags (
            tag TEXT NOT NULL,
            tool_id INTEGER NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
            PRIMARY KEY (tag, tool_id)
        ) WITHOUT ROWID
        """
    )
    db.execute("CREATE INDEX tool_tags_tool ON tool_tags (tool_id)")
    db.execute(
        """
        CREATE TABLE embeddings (
            content_hash TEXT NOT NULL,
            model TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (content_hash, model)
        )
        """
    )
    # Columns hold text we tokenized ourselves; unicode61 only splits it on spaces.
    db.execute(
        """
        CREATE VIRTUAL TABLE tools_fts USING fts5 (
            name, hint, description, params, tags,
            tokenize = 'unicode61 remove_diacritics 0'
        )
        """
    )
    db.execute("CREATE VIRTUAL TABLE tools_fts_vocab USING fts5vocab (tools_fts, 'row')")
    db.execute(
        """
        CREATE TRIGGER tools_fts_delete AFTER DELETE ON tools BEGIN
            DELETE FROM tools_fts WHERE rowid = old.id;
        END
        """
    )


@migration
def m002_usage(db: Any) -> None:
    """Learning from use: (query, tool) pairs, keyed by ``toolkit.name`` so they survive new
    versions; ``vector`` is the query's embedding under ``model``, filled in by reindex."""
    db.execute(
        """
        CREATE TABLE usage (
            id INTEGER PRIMARY KEY,
            toolkit TEXT NOT NULL,
            name TEXT NOT NULL,
            query TEXT NOT NULL,
            query_key TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            model TEXT,
            vector BLOB,
            UNIQUE (toolkit, name, query_key)
        )
        """
    )
    db.execute("CREATE INDEX usage_tool ON usage (toolkit, name, id)")
    db["meta"].insert_all(
        [{"key": "learn_from_use", "value": 1}, {"key": "usage_revision", "value": 0}]
    )


@migration
def m003_usage_principal(db: Any) -> None:
    """Uses are kept per principal (``''``: the catalog's own caller, the Python API and
    the CLI), so that one server caller's uses never change what another finds."""
    db.execute(
        """
        CREATE TABLE usage_by_principal (
            id INTEGER PRIMARY KEY,
            principal TEXT NOT NULL DEFAULT '',
            toolkit TEXT NOT NULL,
            name TEXT NOT NULL,
            query TEXT NOT NULL,
            query_key TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            model TEXT,
            vector BLOB,
            UNIQUE (principal, toolkit, name, query_key)
        )
        """
    )
    db.execute(
        "INSERT INTO usage_by_principal (id, toolkit, name, query, query_key, recorded_at, "
        "model, vector) SELECT id, toolkit, name, query, query_key, recorded_at, model, vector "
        "FROM usage"
    )
    db.execute("DROP TABLE usage")
    db.execute("ALTER TABLE usage_by_principal RENAME TO usage")
    db.execute("CREATE INDEX usage_tool ON usage (principal, toolkit, name, id)")


@migration
def m004_scale(db: Any) -> None:
    """What list and status read stops growing with the catalog.

    List mode's own index: only tools that are not deferred, in list order. With the
    whole-table index, a page of always-on tools walked past every deferred tool before it
    (every tool, when none is always-on: 645 ms at 1M tools); with this one a page costs
    what the always-on tools cost. SQLite picks it for any query whose WHERE says
    ``t.defer_loading = 0`` (``Filters.sql``). And the counts status reads instead of
    counting every tool (store/counts.py).
    """
    db.execute("CREATE INDEX tools_listed ON tools (toolkit, name) WHERE defer_loading = 0")
    from .counts import TRIGGERS, recount

    for trigger in TRIGGERS:
        db.execute(trigger)
    recount(db.conn)


@migration
def m005_kind(db: Any) -> None:
    """Each toolkit version records the path its registration took (``kind``: ``manifest``,
    ``python``, ``mcp`` or ``openapi``), written by the writer from the API entry point. What
    a toolkit may do (take over another kind, resolve ``${NAME}`` references: see
    ``toolcat.remote.secrets``) follows it, never the toolkit's own tags or file name.

    Versions registered before it are classified once, from what older toolcats stored:
    no source is Python code; ``MCP server '<target>'`` is an MCP import when every tool
    forwards to that target; ``OpenAPI document ...`` (or, older still, a document path with
    the ``openapi`` tag every import added) is an OpenAPI import when every tool is an
    ``openapi+http:`` operation; anything else is a manifest. A manifest registered before
    this migration that imitated an import that closely is read as one: re-register such a
    toolkit with ``--replace`` if you did not write it.
    """
    db.execute("ALTER TABLE toolkits ADD COLUMN kind TEXT NOT NULL DEFAULT 'manifest'")
    rows = db.execute("SELECT id, source, tags FROM toolkits").fetchall()
    for toolkit_id, source, tags in rows:
        implementations = [
            _implementation(definition)
            for (definition,) in db.execute(
                "SELECT definition FROM tools WHERE toolkit_id = ?", (toolkit_id,)
            ).fetchall()
        ]
        kind = _legacy_kind(source, tags, implementations)
        db.execute("UPDATE toolkits SET kind = ? WHERE id = ?", (kind, toolkit_id))


@migration
def m006_fts_changes(db: Any) -> None:
    """Which ``tools_fts`` rows each revision changed, so that the BM25 index saved at an
    earlier revision is brought forward by what changed instead of rebuilt (a minute or
    three at 1M tools): ``fts_changes`` holds a row id for every insert into or delete from
    ``tools_fts``, with a revision the writing transaction reaches (the one after what it
    read: never below it), and ``meta.fts_changes_from`` the revision after which the log
    is whole (``store/writer.py`` trims it and moves this on)."""
    db.execute("CREATE TABLE fts_changes (revision INTEGER NOT NULL, row INTEGER NOT NULL)")
    db.execute("CREATE INDEX fts_changes_revision ON fts_changes (revision)")
    db.execute("DROP TRIGGER tools_fts_delete")
    db.execute(TOOLS_FTS_DELETE)
    db.execute(
        "INSERT INTO meta (key, value) "
        "SELECT 'fts_changes_from', value FROM meta WHERE key = 'revision'"
    )


@migration
def m007_vector_changes(db: Any) -> None:
    """Which definitions' vectors each revision stored, so that a process's vector matrix
    at an earlier revision is brought forward by the rows that changed instead of read
    whole again (``embeddings.VectorIndex``, a second or more a change at 100k tools):
    ``vector_changes`` holds (revision, model, content hash) for every vector stored, with
    the revision the storing transaction reaches, and ``meta.vector_changes_from`` the
    revision after which the log is whole. Which tools joined or left the active set is
    ``fts_changes``'s: a tool has a ``tools_fts`` row exactly while its version is active."""
    db.execute(
        "CREATE TABLE vector_changes (revision INTEGER NOT NULL, model TEXT NOT NULL, "
        "content_hash TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX vector_changes_revision ON vector_changes (revision)")
    db.execute(
        "INSERT INTO meta (key, value) "
        "SELECT 'vector_changes_from', value FROM meta WHERE key = 'revision'"
    )


def _implementation(definition: Any) -> str:
    try:
        found = json.loads(definition).get("implementation")
    except (TypeError, ValueError, AttributeError):
        return ""
    return found if isinstance(found, str) else ""


def _legacy_kind(source: Any, tags: Any, implementations: list[str]) -> str:
    """The kind of a version registered before ``m005_kind`` (see there)."""
    if source is None:
        return "python"
    if not isinstance(source, str) or not implementations:
        return "manifest"
    for transport in ("stdio", "http"):
        for target in {i.partition(":")[2].rpartition("#")[0] for i in implementations}:
            if source == f"MCP server {target!r}" and all(
                i.startswith(f"mcp+{transport}:{target}#") for i in implementations
            ):
                return "mcp"
    if all(i.startswith("openapi+http:") for i in implementations):
        try:
            tagged = "openapi" in json.loads(tags)
        except (TypeError, ValueError):
            tagged = False
        if source.startswith("OpenAPI document ") or tagged:
            return "openapi"
    return "manifest"


SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of an open catalog; 0 for an empty file."""
    try:
        if not conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone():
            return 0
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as e:
        raise CatalogError(f"{_name(conn)} is not a toolcat catalog: {e}") from e
    if row is None:
        raise CatalogDamagedError("meta 'schema_version' is missing", _path(conn))
    return _whole_number(conn, "schema_version", row[0])


def _whole_number(conn: sqlite3.Connection, key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise CatalogDamagedError(f"meta {key!r} is {value!r}, not a whole number", _path(conn))


# What every catalog holds once migrated: the tables, FTS5 shadow tables and triggers the
# readers touch (tests/store/test_migrations.py compares this with a fresh catalog), and the
# meta values they read, with what each must be.
SCHEMA_OBJECTS = frozenset(
    {
        "meta",
        "toolkits",
        "tools",
        "tool_tags",
        "embeddings",
        "tools_fts",
        "tools_fts_data",
        "tools_fts_idx",
        "tools_fts_content",
        "tools_fts_docsize",
        "tools_fts_config",
        "tools_fts_vocab",
        "tools_fts_delete",
        "fts_changes",
        "vector_changes",
        "usage",
        *TRIGGER_NAMES,
    }
)
REQUIRED_META = ("revision", "learn_from_use", "usage_revision")
OPTIONAL_META = (
    "usage_folded",
    "embedding_dim",
    "fts_changes_from",
    "vector_changes_from",
    ACTIVE_TOOLS,
)


def check_schema(conn: sqlite3.Connection) -> None:
    """Refuse a catalog edited or damaged by hand in ways every command would trip on: a
    table gone, a counter missing or not a number.

    Raises:
        CatalogDamagedError: naming the file and what is wrong.
    """
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    missing = sorted(SCHEMA_OBJECTS - present)
    if missing:
        raise CatalogDamagedError(f"{', '.join(missing)} missing", _path(conn))
    values = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    for key in REQUIRED_META:
        if key not in values:
            raise CatalogDamagedError(f"meta {key!r} is missing", _path(conn))
        _whole_number(conn, key, values[key])
    for key in OPTIONAL_META:
        if values.get(key) is not None:
            _whole_number(conn, key, values[key])
    model = values.get("embedding_model")
    if model is not None and not isinstance(model, str):
        raise CatalogDamagedError(f"meta 'embedding_model' is {model!r}, not a name", _path(conn))
    folded = values.get("usage_toolkits")
    if folded is not None:
        try:
            names = json.loads(folded)
        except (TypeError, ValueError):
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CatalogDamagedError(
                "meta 'usage_toolkits' is not a JSON list of names", _path(conn)
            )


def _path(conn: sqlite3.Connection) -> str | None:
    return getattr(conn, "path", None) or None


def _name(conn: sqlite3.Connection) -> str:
    """The catalog file, for messages (``CatalogConnection`` knows it)."""
    return repr(getattr(conn, "path", None) or "(this file)")


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the catalog up to ``SCHEMA_VERSION``. Cheap when it already is."""
    current = schema_version(conn)
    if current == SCHEMA_VERSION:
        check_schema(conn)
        return
    if current > SCHEMA_VERSION:
        raise CatalogError(
            f"catalog {_name(conn)} has schema version {current}; this toolcat knows up to "
            f"{SCHEMA_VERSION}. Upgrade toolcat to open it."
        )
    if (
        current == 0
        and conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchone()[0]
    ):
        raise CatalogError(f"{_name(conn)} is an SQLite database but not a toolcat catalog")
    import sqlite_utils  # only needed to create or upgrade a catalog

    db = sqlite_utils.Database(conn)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have migrated while we waited for the lock.
            version = schema_version(conn)
            if version >= SCHEMA_VERSION:
                conn.execute("COMMIT")
                check_schema(conn)
                return
            MIGRATIONS[version](db)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version + 1,))
            conn.execute("COMMIT")
        except BaseException:
            rollback_quietly(conn)
            raise
