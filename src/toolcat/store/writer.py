"""Write operations. Each public function is one transaction that bumps the revision.

A registration writes all of a batch's toolkits or none of them: any error rolls the whole
transaction back, so the catalog is exactly as it was (same rows, same revision).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    CatalogDamagedError,
    ManifestError,
    ReadOnlyReplicaError,
    SourceKindError,
    ToolcatError,
    UnknownToolkitError,
    VersionConflictError,
)
from ..models import RegistrationResult, Tool, Toolkit, ToolkitHead
from ..text.documents import index_fields, toolkit_terms
from ..text.tokenize import tokenize_all
from .connection import BUSY_TIMEOUT_MS, CatalogConnection, rollback_quietly
from .reader import decode_definition, decode_tags, toolkit_rows
from .reader import meta as read_meta
from .reader import revision as read_revision
from .rows import ToolkitRows, rows_of

if TYPE_CHECKING:
    from packaging.version import Version

OPTIMIZE_AFTER = 1000
# SQLite's page cache while a registration writes (KiB; SQLite's default is 2 MiB): every
# tool adds a row at a random place of four indexes (content hash, name, toolkit and name,
# tags) and of FTS5's segments; once those outgrow the cache, each insert reads its pages
# back and the transaction spills dirty pages to the WAL, so the CPU a tool costs grew with
# the catalog (measured: docs/benchmarks.md, "Registration at 1M"). Pages are taken only
# as they are used, and given back when the registration ends.
REGISTER_CACHE_KIB = 512 * 1024
MERGE_PAGES = 1000  # FTS5 pages an incremental merge may write (``merge_segments``)
# FTS5's merge settings while a registration fills an empty index (``_filling``): no merging
# as rows come (``automerge`` 0), and up to this many segments of a level before FTS5 merges
# them anyway (its default 16). The registration's ``optimize`` then merges the whole index
# once, instead of FTS5 merging the same rows again and again: 1M tools' rows into an empty
# index 20.4 -> 14.6 s of SQLite (docs/benchmarks.md).
FILLING_CRISISMERGE = 64
FTS_MERGE_DEFAULTS = {"automerge": 4, "crisismerge": 16}  # FTS5's own
FTS_BATCH_ROWS = 20_000  # a registration's tools_fts rows inserted at a time (PendingFts)
INSERT_FTS = (
    "INSERT INTO tools_fts (rowid, name, hint, description, params, tags) VALUES (?, ?, ?, ?, ?, ?)"
)
# Rows of the ``tools_fts`` change log kept: a saved BM25 index more changes behind than
# ``lexical_index.bring_forward`` takes up is rebuilt whole, so older ones serve nothing.
FTS_CHANGES_KEPT = 100_000
# Rows of the stored-vectors change log kept (``m007_vector_changes``): more than a matrix
# is brought forward by (``embeddings.VectorIndex``), which reads it whole instead.
VECTOR_CHANGES_KEPT = 100_000


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception.

    Raises:
        ReadOnlyReplicaError: The file is a replica: every write belongs on its primary.
    """
    refuse_on_replica(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        rollback_quietly(conn)  # never hide the cause behind "cannot rollback"
        raise


def refuse_on_replica(conn: sqlite3.Connection) -> None:
    """Every write path passes here: a replica names its primary instead of writing."""
    primary = getattr(conn, "replica_of", None)
    if primary is not None:
        raise ReadOnlyReplicaError(
            f"catalog {getattr(conn, 'path', '')!r} is a read-only replica of {primary}: "
            "register, remove, deprecate and reindex on the primary"
        )


def bump_revision(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value"
    ).fetchone()
    _trim_log(conn, "fts_changes", FTS_CHANGES_KEPT, _fts_changes_from)
    _trim_log(conn, "vector_changes", VECTOR_CHANGES_KEPT, _vector_changes_from)
    # The revision's mark in the change log (``reader.fts_history``): a random negative
    # "row", so that a saved BM25 index is brought forward only along the history it was
    # saved in, not along another one that reached the same revision numbers (a catalog
    # restored from a backup, with the index the other history saved still beside it).
    conn.execute(
        "INSERT INTO fts_changes (revision, row) VALUES (?, ?)",
        (row[0], -1 - secrets.randbits(62)),
    )
    return int(row[0])


def fts_changed(conn: sqlite3.Connection, rows: Sequence[int]) -> None:
    """Log that these ``tools_fts`` rows were inserted or deleted (``m006_fts_changes``):
    every write to ``tools_fts`` calls this in its transaction, so that a saved BM25 index
    is brought forward by the rows that changed (``lexical_index.bring_forward``). More
    rows than the log keeps, in this call or added up over a transaction's calls (a bulk
    registration), are not logged: the log starts after this transaction."""
    upcoming = read_revision(conn) + 1
    if read_meta(conn, "fts_changes_from") == upcoming:
        return  # the log already starts after this transaction: nothing of it is read
    label, logged = getattr(conn, "fts_logged", (-1, 0))
    # A count left by a transaction rolled back under the same label only stops the log
    # early (an index rebuilt), never skips a row: the skip above reads the database.
    logged = (logged if label == upcoming else 0) + len(rows)
    if logged > FTS_CHANGES_KEPT:
        _fts_changes_from(conn, upcoming)
        return
    if isinstance(conn, CatalogConnection):
        conn.fts_logged = (upcoming, logged)
    conn.executemany(
        "INSERT INTO fts_changes (revision, row) VALUES (?, ?)",
        zip(itertools.repeat(upcoming), rows),
    )


def _trim_log(
    conn: sqlite3.Connection,
    table: str,
    kept: int,
    forget: Callable[[sqlite3.Connection, int], None],
) -> None:
    """Keep a change log (``fts_changes``, ``vector_changes``) to its newest ``kept`` rows
    (whole revisions), ``forget`` moving its start past what goes: what is further behind
    is made again whole anyway."""
    cut = conn.execute(
        f"SELECT revision FROM {table} ORDER BY revision DESC LIMIT 1 OFFSET ?", (kept,)
    ).fetchone()
    if cut is not None:
        forget(conn, cut[0])


def _whole_after(conn: sqlite3.Connection, key: str, revision: int) -> None:
    """Record in ``meta[key]`` that a change log is whole only after ``revision`` (never
    moved back)."""
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, "
        "max(?, coalesce((SELECT value FROM meta WHERE key = ?), 0)))",
        (key, revision, key),
    )


def _fts_changes_from(conn: sqlite3.Connection, revision: int) -> None:
    """Forget the log up to ``revision``: from now on it is whole only after it. The mark
    of ``revision`` itself stays (an index saved there is still brought forward)."""
    conn.execute(
        "DELETE FROM fts_changes WHERE revision < ? OR (revision = ? AND row >= 0)",
        (revision, revision),
    )
    _whole_after(conn, "fts_changes_from", revision)


def _vectors_changed(conn: sqlite3.Connection, model: str, hashes: Sequence[str]) -> None:
    """Log that ``model``'s vectors of these definitions were stored (``m007_vector_changes``),
    in the storing transaction; more than the log keeps are not logged: it starts after
    this transaction."""
    upcoming = read_revision(conn) + 1
    if len(hashes) > VECTOR_CHANGES_KEPT:
        _vector_changes_from(conn, upcoming)
        return
    conn.executemany(
        "INSERT INTO vector_changes (revision, model, content_hash) VALUES (?, ?, ?)",
        zip(itertools.repeat(upcoming), itertools.repeat(model), hashes),
    )


def _vector_changes_from(conn: sqlite3.Connection, revision: int) -> None:
    """Forget the stored-vectors log up to ``revision``: from now on it is whole only after it."""
    conn.execute("DELETE FROM vector_changes WHERE revision <= ?", (revision,))
    _whole_after(conn, "vector_changes_from", revision)


def same_version(a: str, b: str) -> bool:
    """PEP 440 equality ("1.2" is "1.2.0"); a string that is no version only equals itself."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except (InvalidVersion, TypeError):
        return a == b


def stored_version(toolkit: str, version: Any) -> Version:
    """A registered version, parsed (registration accepts PEP 440 versions only).

    Raises:
        CatalogDamagedError: the version was edited by hand into something else.
    """
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version)
    except (InvalidVersion, TypeError):
        raise CatalogDamagedError(
            f"toolkit {toolkit!r}: its version {version!r:.40} is not a version"
        ) from None


def refresh_active(
    conn: sqlite3.Connection,
    name: str,
    fresh: tuple[int, ToolkitHead, int, ToolkitRows] | None = None,
    pending: PendingFts | None = None,
) -> None:
    """Mark the toolkit's active version and keep the search index on it.

    Active is the newest non-deprecated final release, else the newest non-deprecated
    pre-release; none when every version is deprecated. Only active versions are in the
    FTS5 index, so old versions never slow search down or need filtering out.

    ``fresh`` is (toolkit row id, toolkit, first tool row id, rows) of a version just
    inserted, so its index text comes from its rows instead of being read back; with
    ``pending`` they are inserted with the batch's next ones.
    """
    candidates = [
        (stored_version(name, version), row_id)
        for row_id, version, _hash, deprecated in toolkit_rows(conn, name)
        if not deprecated
    ]
    finals = [c for c in candidates if not c[0].is_prerelease] or candidates
    active_id = max(finals)[1] if finals else None
    old = conn.execute("SELECT id FROM toolkits WHERE name = ? AND active = 1", (name,)).fetchone()
    old_id = old[0] if old else None
    if old_id == active_id:
        return
    conn.execute("UPDATE toolkits SET active = (id IS ?) WHERE name = ?", (active_id, name))
    if old_id is not None:
        if pending is not None:
            pending.flush()  # the old version's rows may be among them
        conn.execute(
            "DELETE FROM tools_fts WHERE rowid IN (SELECT id FROM tools WHERE toolkit_id = ?)",
            (old_id,),
        )
        gone = conn.execute("SELECT id FROM tools WHERE toolkit_id = ?", (old_id,))
        fts_changed(conn, [row[0] for row in gone])
    if active_id is None:
        return
    if fresh is not None and fresh[0] == active_id:
        _, toolkit, first_id, rows = fresh
        _index_rows(conn, toolkit.name, first_id, rows, pending)
    else:
        _index(conn, *_stored_toolkit(conn, active_id))


def _index_rows(
    conn: sqlite3.Connection,
    toolkit: str,
    first_id: int,
    rows: ToolkitRows,
    pending: PendingFts | None = None,
) -> None:
    """``_index`` for a version just inserted, from its rows: the same text, with the
    queries recorded for its tools (learning from use) joining the tags column; with
    ``pending``, inserted with the batch's next ones."""
    learned = learned_queries(conn, toolkit)
    fts = [
        (tool_id, *row.fts[:4], _with_learned(row.fts[4], learned.get(row.name, ())))
        for tool_id, row in enumerate(rows.tools, first_id)
    ]
    if pending is None:
        conn.executemany(INSERT_FTS, fts)
    else:
        pending.add(fts)
    fts_changed(conn, range(first_id, first_id + len(rows.tools)))


class PendingFts:
    """A registration's ``tools_fts`` rows, inserted ``FTS_BATCH_ROWS`` at a time.

    FTS5 holds the rows inserted since its last write in memory and writes them as a new
    segment whenever a statement opens a savepoint, as the UPDATE of ``toolkits.active``
    does for each toolkit: inserting each toolkit's rows as it came made a segment of a few
    dozen tools per toolkit, and FTS5 merged those again and again (measured:
    docs/benchmarks.md, "Registration at 1M"). Anything in the transaction that reads or
    deletes ``tools_fts`` rows must ``flush`` first."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._rows: list[tuple[Any, ...]] = []

    def add(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows += rows
        if len(self._rows) >= FTS_BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._conn.executemany(INSERT_FTS, self._rows)
            self._rows = []


def _with_learned(tags: str, learned: Sequence[str]) -> str:
    """The tags column of ``index_fields`` from the one made without learned queries."""
    if not learned:
        return tags
    return " ".join(text for text in (tags, " ".join(tokenize_all(learned))) if text)


def _index(conn: sqlite3.Connection, toolkit: Toolkit, tools: Sequence[tuple[int, Tool]]) -> None:
    """Add tools (with their row ids) to the FTS5 index, with the queries they were
    recorded for (learning from use) when that is on."""
    learned = learned_queries(conn, toolkit.name)
    shared = toolkit_terms(toolkit)
    conn.executemany(
        INSERT_FTS,
        [
            (tool_id, *index_fields(tool, toolkit, learned.get(tool.name, ()), shared))
            for tool_id, tool in tools
        ],
    )
    fts_changed(conn, [tool_id for tool_id, _ in tools])


def learned_queries(conn: sqlite3.Connection, toolkit: str) -> dict[str, list[str]]:
    """Tool name -> the queries the catalog's own caller recorded (newest first) for one
    toolkit: what the shared index learns. A server caller's uses (a principal, or the
    anonymous one) stay its own (``principal_uses``). Empty when learning from use is off."""
    if not read_meta(conn, "learn_from_use"):
        return {}
    found: dict[str, list[str]] = {}
    for name, query in conn.execute(
        "SELECT name, query FROM usage WHERE principal = '' AND toolkit = ? ORDER BY id DESC",
        (toolkit,),
    ):
        found.setdefault(name, []).append(query)
    return found


def query_key(query: str) -> str:
    """What makes two recorded queries the same (case and spacing aside)."""
    return " ".join(query.casefold().split())


def recorded_for(
    conn: sqlite3.Connection, keys: Sequence[str], principal: str = ""
) -> list[tuple[str, str, str]]:
    """(toolkit, tool name, query) of ``principal``'s uses recorded under these query keys,
    oldest first."""
    found: list[tuple[str, str, str]] = []
    for start in range(0, len(keys), 500):
        chunk = list(keys[start : start + 500])
        found += conn.execute(
            "SELECT toolkit, name, query FROM usage "
            f"WHERE principal = ? AND query_key IN ({','.join('?' * len(chunk))}) ORDER BY id",
            (principal, *chunk),
        ).fetchall()
    return found


def record_uses(
    conn: sqlite3.Connection,
    uses: Iterable[tuple[str, str, str]],
    keep: int,
    forget: Iterable[tuple[str, str, str]] = (),
    principal: str = "",
) -> int:
    """Record (toolkit, tool name, query) uses of ``principal`` (``''``: the catalog's own
    caller) in order, in one transaction, after forgetting its (toolkit, tool name, query)
    uses in ``forget``; the newest ``keep`` distinct queries of each tool are kept per
    principal. Returns how many were recorded (0 when learning is off)."""
    if not read_meta(conn, "learn_from_use"):
        return 0
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    count = 0
    touched: set[tuple[str, str]] = set()
    with write_transaction(conn):
        conn.executemany(
            "DELETE FROM usage WHERE principal = ? AND toolkit = ? AND name = ? AND query_key = ?",
            [(principal, toolkit, name, query_key(query)) for toolkit, name, query in forget],
        )
        for toolkit, name, query in uses:
            key = query_key(query)
            conn.execute(
                "DELETE FROM usage WHERE principal = ? AND toolkit = ? AND name = ? "
                "AND query_key = ?",
                (principal, toolkit, name, key),
            )
            conn.execute(
                "INSERT INTO usage (principal, toolkit, name, query, query_key, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (principal, toolkit, name, query, key, now),
            )
            touched.add((toolkit, name))
            count += 1
        conn.executemany(
            "DELETE FROM usage WHERE principal = ? AND toolkit = ? AND name = ? AND id NOT IN "
            "(SELECT id FROM usage WHERE principal = ? AND toolkit = ? AND name = ? "
            "ORDER BY id DESC LIMIT ?)",
            [
                (principal, toolkit, name, principal, toolkit, name, keep)
                for toolkit, name in sorted(touched)
            ],
        )
        if count and not principal:  # only the catalog's own uses are folded in (reindex)
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'usage_revision'")
    return count


def fold_usage(conn: sqlite3.Connection) -> int:
    """Re-index the FTS5 rows of toolkits whose recorded uses changed since the last fold
    (those with uses now, and those folded last time); returns the tools re-indexed."""
    if read_meta(conn, "usage_folded") == read_meta(conn, "usage_revision"):
        return 0
    with write_transaction(conn):
        now = {
            r[0] for r in conn.execute("SELECT DISTINCT toolkit FROM usage WHERE principal = ''")
        }
        if not read_meta(conn, "learn_from_use"):
            now = set()
        before = set(json.loads(read_meta(conn, "usage_toolkits") or "[]"))
        count = 0
        for name in sorted(now | before):
            row = conn.execute(
                "SELECT id FROM toolkits WHERE name = ? AND active = 1", (name,)
            ).fetchone()
            if row is None:
                continue
            toolkit, tools = _stored_toolkit(conn, row[0])
            conn.executemany(
                "DELETE FROM tools_fts WHERE rowid = ?", [(tool_id,) for tool_id, _ in tools]
            )
            fts_changed(conn, [tool_id for tool_id, _ in tools])
            _index(conn, toolkit, tools)
            count += len(tools)
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('usage_toolkits', ?), "
            "('usage_folded', (SELECT value FROM meta WHERE key = 'usage_revision'))",
            (json.dumps(sorted(now)),),
        )
        bump_revision(conn)
    return count


def set_learning(conn: sqlite3.Connection, enabled: bool) -> None:
    """Turn learning from use on or off; the next reindex adds or drops what was learned."""
    with write_transaction(conn):
        conn.execute("UPDATE meta SET value = ? WHERE key = 'learn_from_use'", (int(enabled),))
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'usage_revision'")
        bump_revision(conn)


def clear_usage(conn: sqlite3.Connection, toolkit: str | None = None) -> int:
    """Forget recorded uses (of one toolkit, or all); reindex drops them from the index."""
    with write_transaction(conn):
        if toolkit is None:
            removed = conn.execute("DELETE FROM usage").rowcount
        else:
            removed = conn.execute("DELETE FROM usage WHERE toolkit = ?", (toolkit,)).rowcount
        if removed:
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'usage_revision'")
    return int(removed)


def store_usage_vectors(
    conn: sqlite3.Connection, model: str, rows: Sequence[tuple[int, bytes]]
) -> None:
    with write_transaction(conn):
        conn.executemany(
            "UPDATE usage SET model = ?, vector = ? WHERE id = ?",
            [(model, blob, row_id) for row_id, blob in rows],
        )
        bump_revision(conn)


def _stored_toolkit(
    conn: sqlite3.Connection, toolkit_id: int
) -> tuple[Toolkit, list[tuple[int, Tool]]]:
    """A registered toolkit version and its tools with their row ids, as stored."""
    name, description, tags = conn.execute(
        "SELECT name, description, tags FROM toolkits WHERE id = ?", (toolkit_id,)
    ).fetchone()
    toolkit = Toolkit.model_construct(
        name=name, description=description, tags=decode_tags(tags, f"toolkit {name!r}")
    )
    rows = conn.execute(
        "SELECT id, name, definition FROM tools WHERE toolkit_id = ? ORDER BY id", (toolkit_id,)
    )
    return toolkit, [
        (i, Tool.model_construct(**decode_definition(d, f"{name}.{tool}")))
        for i, tool, d in rows.fetchall()
    ]


KINDS = ("manifest", "python", "mcp", "openapi")


def entry_kind(kind: str | None, source: str | None) -> str:
    """The kind a registration records: ``kind`` as the entry point gave it, or for
    ``Catalog.register`` (``None``) a manifest when the toolkit was read from a file and
    Python code when it came as a ``Toolkit`` object (which has no file)."""
    if kind is not None:
        return kind
    return "manifest" if source is not None else "python"


def stored_kind(conn: sqlite3.Connection, name: str) -> tuple[str, str | None] | None:
    """(kind, source) of the version of ``name`` registered last; ``None`` if there is none."""
    row = conn.execute(
        "SELECT kind, source FROM toolkits WHERE name = ? ORDER BY id DESC LIMIT 1", (name,)
    ).fetchone()
    if row is None:
        return None
    if row[0] not in KINDS:
        raise CatalogDamagedError(f"toolkit {name!r}: its kind is {row[0]!r:.40}")
    if row[1] is not None and not isinstance(row[1], str):
        raise CatalogDamagedError(f"toolkit {name!r}: its source is {row[1]!r:.40}")
    return row[0], row[1]


def _check_source_kind(conn: sqlite3.Connection, toolkit: ToolkitHead, kind: str) -> None:
    stored = stored_kind(conn, toolkit.name)
    if stored is None:
        return
    old_kind, old_source = stored
    if old_kind != kind:
        came = _KIND_PHRASE[old_kind]
        if old_kind == "manifest" and old_source:
            came += f" ({old_source})"
        raise SourceKindError(
            f"toolkit {toolkit.name!r} comes from {came}, this registration from "
            f"{_KIND_PHRASE[kind]}; pass --replace (replace=True) to let it take the "
            "toolkit over"
        )


_KIND_PHRASE = {
    "manifest": "a manifest",
    "python": "Python code",
    "mcp": "an MCP server",
    "openapi": "an OpenAPI document",
}


Entry = tuple[ToolkitHead, str | None, ToolkitRows]


def register(
    conn: sqlite3.Connection,
    batch: Sequence[tuple[Toolkit, str | None]],
    *,
    replace: bool,
    change_kind: bool | None = None,
    kind: str | None = None,
) -> list[RegistrationResult]:
    """Register ``(toolkit, source)`` pairs in one transaction (``register_stream``).

    Raises:
        ManifestError: The batch defines one toolkit version twice, differently.
        VersionConflictError: See ``register_stream``.
    """
    return register_stream(
        conn,
        ((toolkit.head(), source, rows_of(toolkit)) for toolkit, source in batch),
        replace=replace,
        change_kind=change_kind,
        kind=kind,
    )


def register_stream(
    conn: sqlite3.Connection,
    entries: Iterable[Entry | ManifestError],
    *,
    replace: bool,
    change_kind: bool | None = None,
    check: Callable[[ToolkitHead, str | None], None] | None = None,
    kind: str | None = None,
    checkpoint: bool = True,
) -> list[RegistrationResult]:
    """Register toolkits as they come, in one transaction: all of them or none.

    Each entry is ``(toolkit, source, rows)`` (rows from ``rows.rows_of``; made elsewhere,
    checked by ``rows.check_rows``), or the ``ManifestError`` of a source that could not be
    read. Writing starts with the first entry, so whatever produces the next ones (workers
    reading manifests) runs meanwhile. Every entry is still taken and checked, and what is
    raised is what checking the whole batch first would raise: every source's problems,
    then every problem ``check`` finds (import roots), then a version defined twice with
    different content, then the first conflict with the catalog. Any of them leaves the
    catalog as it was.

    Each version records its ``kind``: what the entry point says the registration is
    (``mcp``, ``openapi``), or with ``None`` (``Catalog.register``) ``entry_kind``'s
    manifest-or-Python. It never comes from the toolkit's content or file name, and never
    changes silently: a version of another kind than the one registered last is a
    ``VersionConflictError`` unless ``change_kind`` (by default ``replace``) allows it.

    With ``checkpoint`` False the commit leaves the log for the caller to copy into the
    file (``checkpoint_beside``) instead of copying it itself.
    """
    if change_kind is None:
        change_kind = replace
    problems: list[ManifestError] = []
    refused: list[ManifestError] = []
    twice: ManifestError | None = None
    conflict: ToolcatError | None = None
    seen: dict[tuple[str, Any], tuple[str | None, str]] = {}
    results: list[RegistrationResult] = []
    written = 0  # tools indexed by this batch: an unchanged toolkit's are not
    changed = False
    with (
        _autocheckpoint(conn, checkpoint),
        write_transaction(conn),
        _page_cache(conn, REGISTER_CACHE_KIB),
    ):
        pending = PendingFts(conn)
        with _filling(conn):
            for entry in entries:
                if isinstance(entry, ManifestError):
                    problems.append(entry)
                    continue
                toolkit, source, made = entry
                if check is not None:
                    try:
                        check(toolkit, source)
                    except ManifestError as e:
                        refused.append(e)
                twice = twice or _defined_twice(seen, toolkit, source, made.digest)
                if problems or refused or twice or conflict:
                    continue  # nothing more is written; the rest is still checked
                try:
                    result = _register_one(
                        conn,
                        toolkit,
                        source,
                        made,
                        entry_kind(kind, source),
                        replace,
                        change_kind,
                        pending,
                    )
                except ToolcatError as e:  # raised below unless a problem above outranks it
                    conflict = e
                    continue
                if result.status != "unchanged":
                    changed, written = True, written + len(made.tools)
                results.append(result)
            for found in (problems, refused):
                if found:
                    raise ManifestError.of(found)
            if twice or conflict:
                raise twice or conflict  # type: ignore[misc]
            pending.flush()
        # Registering an unchanged folder again writes nothing: no merge of FTS5's index
        # (a whole one, when the folder is as big as the catalog), no new revision.
        merge_segments(conn, written)
        revision = bump_revision(conn) if changed else read_revision(conn)
    return [r.model_copy(update={"revision": revision}) for r in results]


def _register_one(
    conn: sqlite3.Connection,
    toolkit: ToolkitHead,
    source: str | None,
    made: ToolkitRows,
    kind: str,
    replace: bool,
    change_kind: bool,
    pending: PendingFts | None = None,
) -> RegistrationResult:
    digest = made.digest
    existing = [
        row for row in toolkit_rows(conn, toolkit.name) if same_version(row[1], toolkit.version)
    ]
    status = "added"
    if not change_kind and not (existing and existing[0][2] == digest):
        _check_source_kind(conn, toolkit, kind)
    if existing:
        row_id, version, old_digest, _deprecated = existing[0]
        if old_digest == digest:
            return _result(toolkit, "unchanged", 0)
        if not replace:
            raise VersionConflictError(
                (f"{source}: " if source else "")
                + f"toolkit {toolkit.name!r} version {version} is already registered "
                "with different content; bump the version, or pass --replace "
                "(replace=True) to overwrite it"
            )
        if pending is not None:
            # A trigger deletes the old version's rows: none of them can be pending (a batch
            # defines a version once), but no delete runs before the batch's rows
            pending.flush()
        conn.execute("DELETE FROM toolkits WHERE id = ?", (row_id,))
        status = "replaced"
    toolkit_id, first_tool_id = _insert(conn, toolkit, made, source, kind)
    refresh_active(conn, toolkit.name, (toolkit_id, toolkit, first_tool_id, made), pending)
    return _result(toolkit, status, 0)


@contextlib.contextmanager
def _filling(conn: sqlite3.Connection) -> Iterator[None]:
    """Within the block, FTS5 merges no segments as rows come, if its index was empty: the
    registration then ends with ``optimize`` (``merge_segments``: whatever it adds is at
    least a quarter of the index), which merges the whole index once. Its settings are put
    back as they were when the block ends (a failed registration rolls them back anyway)."""
    from .counts import index_totals

    if index_totals(conn)[0]:
        yield
        return
    before = dict(
        conn.execute(
            "SELECT k, v FROM tools_fts_config WHERE k IN ('automerge', 'crisismerge')"
        ).fetchall()
    )
    setting = "INSERT INTO tools_fts (tools_fts, rank) VALUES (?, ?)"

    def put_back() -> None:
        for key, default in FTS_MERGE_DEFAULTS.items():
            value = before.get(key, default)
            # FTS5 ignores a stored value it would refuse (its default applies) but refuses
            # it when set: that default is put back instead
            if type(value) is not int or value < 0 or (key == "automerge" and value > 64):
                value = default
            conn.execute(setting, (key, value))

    conn.execute(setting, ("automerge", 0))
    conn.execute(setting, ("crisismerge", FILLING_CRISISMERGE))
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # rolled back anyway: the error is what counts
            put_back()
        raise
    put_back()


@contextlib.contextmanager
def _autocheckpoint(conn: sqlite3.Connection, on: bool) -> Iterator[None]:
    """SQLite's checkpoint at commit off within the block unless ``on``, then as it was."""
    if on:
        yield
        return
    (before,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(before)}")


@contextlib.contextmanager
def checkpoint_beside(path: str) -> Iterator[None]:
    """Copy the write-ahead log into the catalog file on a thread of its own while the block
    runs, and wait for it when the block ends.

    A registration's commit would copy it itself (SQLite's checkpoint at commit): 7.5 s of
    a 1M-tool registration, before the BM25 index's save could start. SQLite copies without
    Python's lock, so beside the save it costs the save's caller little (measured:
    docs/benchmarks.md, "Registration at 1M"). A checkpoint that fails or finds the log in
    use leaves it whole and valid: the next commit's copies it."""

    if path in ("", ":memory:"):
        yield
        return

    def copy() -> None:
        # the registration has committed: nothing here may raise into it (a working
        # folder gone makes a relative path unresolvable)
        with contextlib.suppress(sqlite3.Error, OSError, ValueError):
            uri = Path(path).resolve().as_uri() + "?mode=rw"  # never makes a file that is gone
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                conn.close()

    thread = threading.Thread(target=copy, name="toolcat-checkpoint", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: the next commit's checkpoint copies it
        yield
        return
    try:
        yield
    finally:
        thread.join()


@contextlib.contextmanager
def _page_cache(conn: sqlite3.Connection, kib: int) -> Iterator[None]:
    """SQLite's page cache at ``kib`` KiB within the block, then as it was."""
    (before,) = conn.execute("PRAGMA cache_size").fetchone()
    conn.execute(f"PRAGMA cache_size = {-int(kib)}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size = {int(before)}")


def _defined_twice(
    seen: dict[tuple[str, Any], tuple[str | None, str]],
    toolkit: ToolkitHead,
    source: str | None,
    digest: str,
) -> ManifestError | None:
    """A batch may not define one toolkit version twice with different content: no
    ``replace`` can say which of the two is meant. The error names both sources."""
    from packaging.version import Version

    first_source, first_digest = seen.setdefault(
        (toolkit.name, Version(toolkit.version)), (source, digest)
    )
    if first_digest == digest:
        return None
    return ManifestError(
        f"version {toolkit.version} is also defined, differently, by "
        f"{first_source or 'an earlier toolkit of this batch'}; register one of them "
        "(or give one another version)",
        file=source,
        toolkit=toolkit.name,
    )


def merge_segments(conn: sqlite3.Connection, added: int) -> None:
    """Tidy FTS5's segments after ``added`` tools were indexed, at a cost in step with them.

    A bulk load leaves many small segments; merging them into one makes every later FTS5
    query faster (measured: p50 2.7 -> 2.3 ms at 10k tools). But ``optimize`` rewrites the
    whole index: done after every registration into a large catalog it made registration
    quadratic (2,500 tools into 10k: 4.4 s, 2.4 s without it; at 1M tools each call rewrote
    a million tools' postings). So the whole index is merged only when the batch is at least
    a quarter of it (the rewrites then add up to a few times the catalog, however it grew);
    otherwise segments of one level are merged, a bounded piece of work (13 ms).
    """
    if added < OPTIMIZE_AFTER:
        return
    from .counts import index_totals

    indexed, _ = index_totals(conn)
    if added * 4 >= indexed:
        conn.execute("INSERT INTO tools_fts (tools_fts) VALUES ('optimize')")
    else:
        conn.execute("INSERT INTO tools_fts (tools_fts, rank) VALUES ('merge', ?)", (MERGE_PAGES,))


def _result(toolkit: ToolkitHead, status: str, revision: int) -> RegistrationResult:
    return RegistrationResult.model_construct(
        toolkit=toolkit.name,
        version=toolkit.version,
        status=status,
        tools=len(toolkit.tools),
        revision=revision,
    )


def _insert(
    conn: sqlite3.Connection, toolkit: ToolkitHead, rows: ToolkitRows, source: str | None, kind: str
) -> tuple[int, int]:
    """Insert a toolkit version's rows; returns (toolkit row id, first tool row id).

    Plain ``executemany``: sqlite-utils' row building (a dict per row, each value checked
    for JSON) cost a fifth of a bulk registration, and importing it 0.16 s per CLI call."""
    toolkit_id: int = conn.execute(
        "INSERT INTO toolkits (name, version, description, tags, defer_loading, module, "
        "content_hash, source, kind, registered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            toolkit.name,
            toolkit.version,
            toolkit.description,
            json.dumps(toolkit.tags),
            toolkit.defer_loading,
            toolkit.module,
            rows.digest,
            source,
            kind,
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
        ),
    ).lastrowid  # type: ignore[assignment]
    first_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM tools").fetchone()[0]
    conn.executemany(
        "INSERT INTO tools (id, toolkit_id, toolkit, name, defer_loading, tags, definition, "
        "content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                tool_id,
                toolkit_id,
                toolkit.name,
                row.name,
                row.defer_loading,
                row.tags_json,
                row.definition,
                row.content_hash,
            )
            for tool_id, row in enumerate(rows.tools, first_id)
        ],
    )
    conn.executemany(
        "INSERT INTO tool_tags (tag, tool_id) VALUES (?, ?)",
        [(tag, tool_id) for tool_id, row in enumerate(rows.tools, first_id) for tag in row.tags],
    )
    return toolkit_id, first_id


def deprecate(conn: sqlite3.Connection, name: str, version: str) -> int:
    """Mark ``name@version`` deprecated; the active version moves to the next newest."""
    with write_transaction(conn):
        row_id, deprecated = _find_version(conn, name, version)
        if deprecated:
            return read_revision(conn)
        conn.execute("UPDATE toolkits SET deprecated = 1 WHERE id = ?", (row_id,))
        refresh_active(conn, name)
        return bump_revision(conn)


def activate(conn: sqlite3.Connection, name: str, version: str) -> int:
    """Take back the deprecation of ``name@version``; the active version becomes the newest
    one not deprecated again (this one, unless a newer one is in use)."""
    with write_transaction(conn):
        row_id, deprecated = _find_version(conn, name, version)
        if not deprecated:
            return read_revision(conn)
        conn.execute("UPDATE toolkits SET deprecated = 0 WHERE id = ?", (row_id,))
        refresh_active(conn, name)
        return bump_revision(conn)


def remove(conn: sqlite3.Connection, name: str, version: str | None) -> tuple[int, int]:
    """Remove one version of a toolkit, or every version. Returns (versions removed, revision)."""
    with write_transaction(conn):
        if version is None:
            count = conn.execute("DELETE FROM toolkits WHERE name = ?", (name,)).rowcount
            if not count:
                raise UnknownToolkitError(f"no toolkit named {name!r}")
        else:
            row_id, _ = _find_version(conn, name, version)
            conn.execute("DELETE FROM toolkits WHERE id = ?", (row_id,))
            count = 1
            refresh_active(conn, name)
        return count, bump_revision(conn)


def _find_version(conn: sqlite3.Connection, name: str, version: str) -> tuple[int, bool]:
    rows = toolkit_rows(conn, name)
    if not rows:
        raise UnknownToolkitError(f"no toolkit named {name!r}")
    for row_id, registered, _digest, deprecated in rows:
        if same_version(registered, version):
            return row_id, deprecated
    known = ", ".join(sorted(r[1] for r in rows))
    raise UnknownToolkitError(f"toolkit {name!r} has no version {version!r} (known: {known})")


def set_meta(conn: sqlite3.Connection, values: dict[str, Any]) -> int:
    """Set catalog-wide settings (such as the embedding model); returns the revision."""
    with write_transaction(conn):
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )
        return bump_revision(conn)


def store_vectors(conn: sqlite3.Connection, model: str, rows: Sequence[tuple[str, bytes]]) -> int:
    """Save (content hash, vector blob) rows for ``model`` in one transaction."""
    with write_transaction(conn):
        conn.executemany(
            # An upsert, not INSERT OR REPLACE: its implicit delete would fire no trigger,
            # and the kept counts (store/counts.py) would count a replaced vector twice.
            "INSERT INTO embeddings (content_hash, model, vector) VALUES (?, ?, ?) "
            "ON CONFLICT (content_hash, model) DO UPDATE SET vector = excluded.vector",
            [(digest, model, blob) for digest, blob in rows],
        )
        _vectors_changed(conn, model, [digest for digest, _ in rows])
        return bump_revision(conn)


def reset_vectors(conn: sqlite3.Connection, model: str, producer: str) -> int:
    """Delete ``model``'s vectors and record ``producer`` as what makes them from now on,
    in one transaction; returns the revision."""
    with write_transaction(conn):
        conn.execute("DELETE FROM embeddings WHERE model = ?", (model,))
        _vector_changes_from(conn, read_revision(conn) + 1)  # every vector of it changed
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('embedding_producer', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (producer,),
        )
        return bump_revision(conn)


def prune_vectors(conn: sqlite3.Connection, keep_model: str) -> int:
    """Delete vectors of other models and of definitions no tool has any more. Returns how
    many were deleted."""
    with write_transaction(conn):
        # Rows found in the primary key's index (hash, model, rowid), not by walking the
        # table: that read every vector (1.5 GB at 1M tools) to delete a few.
        removed = conn.execute(
            "DELETE FROM embeddings WHERE rowid IN (SELECT e.rowid FROM embeddings e "
            "WHERE e.model != ? OR e.content_hash NOT IN (SELECT content_hash FROM tools))",
            (keep_model,),
        ).rowcount
        if removed:
            # Another model's vectors, which a process may still hold, went with them.
            _vector_changes_from(conn, read_revision(conn) + 1)
            bump_revision(conn)
        return removed


def rebuild_fts(conn: sqlite3.Connection) -> int:
    """Rebuild the FTS5 index from the stored definitions of active versions."""
    with write_transaction(conn):
        conn.execute("DELETE FROM tools_fts")
        active = [r[0] for r in conn.execute("SELECT id FROM toolkits WHERE active = 1")]
        with _filling(conn):  # the index is empty now, and merged whole below
            for toolkit_id in active:
                _index(conn, *_stored_toolkit(conn, toolkit_id))
        conn.execute("INSERT INTO tools_fts (tools_fts) VALUES ('optimize')")
        _fts_changes_from(conn, bump_revision(conn))  # every row changed: nothing to log
        return int(conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0])
