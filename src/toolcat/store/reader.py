"""Read queries over the catalog tables, in plain ``sqlite3`` (no sqlite-utils on the read path).

Models are imported where they are built: list mode can render rows as plain dicts
(``row_to_summary``) and so never imports pydantic (tests/test_imports.py).
"""

from __future__ import annotations

import functools
import json
import json.scanner
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..definitions.construct import construct
from ..errors import CatalogDamagedError
from ..policy.tags import TagFilter

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..models import RegisteredTool, ToolkitVersion
    from ..policy.rules import Policy, Rule

T = TypeVar("T")
TOOL_COLUMNS = (
    "t.id, t.name, t.toolkit, k.version, t.defer_loading, t.tags, t.definition, k.deprecated, "
    "k.module, k.kind"
)
TOOL_FROM = "tools t JOIN toolkits k ON k.id = t.toolkit_id"
# A lookup by name starts from the name index (NOCASE: an exact match is checked on top)
# and joins each found tool's toolkit. Left to itself SQLite's planner walks every active
# toolkit and probes (toolkit, name) in each: 18 ms a lookup at 100k tools, not 0.05 ms.
TOOL_BY_NAME_FROM = "tools t CROSS JOIN toolkits k ON k.id = t.toolkit_id"


@dataclass(frozen=True)
class Filters:
    """Which tools a list or search may return. Applied inside the SQL, before ranking.

    ``toolkit_id`` pins one toolkit version; otherwise only active versions are seen.
    """

    tags: TagFilter = field(default_factory=TagFilter)
    toolkit: str | None = None
    toolkit_id: int | None = None
    include_deferred: bool = True
    hide: tuple[Policy, ...] = ()  # leave out the tools any of these policies' rules deny

    @property
    def narrows(self) -> bool:
        """Whether these filters leave out any active tool."""
        hides = any(policy.deny for policy in self.hide)
        return bool(self.tags or self.toolkit or self.toolkit_id is not None or hides) or (
            not self.include_deferred
        )

    @functools.cached_property
    def key(self) -> tuple[str, tuple[Any, ...]] | None:
        """What decides which active tools these filters let through (their SQL), hashable:
        search keeps what it derives from filters (allowed row ids, answers) under it.
        ``None`` when they let every active tool through."""
        if not self.narrows:
            return None
        where, params = self.sql(active_only=True)
        return where, tuple(params)

    def sql(self, *, active_only: bool = True) -> tuple[str, list[Any]]:
        """A WHERE expression over ``t`` (tools) and, with ``active_only``, ``k`` (toolkits).

        The FTS5 index holds active tools only, so search passes ``active_only=False``.
        """
        clauses: list[str] = ["1"]
        params: list[Any] = []
        if self.toolkit_id is not None:
            clauses.append("t.toolkit_id = ?")
            params.append(self.toolkit_id)
        else:
            if active_only:
                clauses.append("k.active = 1")
            if self.toolkit is not None:
                clauses.append("t.toolkit = ?")
                params.append(self.toolkit)
        if not self.include_deferred:
            clauses.append("t.defer_loading = 0")
        tag_clauses, tag_params = self.tags.sql()
        clauses.extend(tag_clauses)
        params.extend(tag_params)
        for policy in self.hide:
            if policy.deny:
                denied, denied_params = policy.sql()  # the policy's own rules, as SQL GLOB
                clauses.append(f"NOT {denied}")
                params.extend(denied_params)
        return " AND ".join(clauses), params


def meta(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def stale_vectors(
    conn: sqlite3.Connection, model: str, *, everything: bool = False
) -> list[tuple[str, str]]:
    """(content hash, definition) of active tools with no vector for ``model`` (or, with
    ``everything``, of all active tools), one per hash, in the order the tools came.

    Without ``everything``, the tools are walked in the ``tools_hash`` index (hash and row
    id only) and each hash is looked up in the vectors' primary key: a tool's row, with its
    definition, is read only once its hash has no vector. Walking the table itself read
    every definition (a 1M-tool catalog's 2 GB) to find a few changed tools."""
    if everything:
        return conn.execute(
            "SELECT t.content_hash, min(t.definition) FROM tools t "
            "JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1 "
            "GROUP BY t.content_hash ORDER BY min(t.id)"
        ).fetchall()
    missing = conn.execute(
        # CROSS JOIN keeps tools the outer loop, so the NOT EXISTS on the hash (in the
        # index) is tested before the row is read for its toolkit.
        "SELECT t.content_hash, min(t.id) FROM tools t INDEXED BY tools_hash "
        "CROSS JOIN toolkits k ON k.id = t.toolkit_id "
        "WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
        "WHERE e.content_hash = t.content_hash AND e.model = ?) AND k.active = 1 "
        "GROUP BY t.content_hash",
        (model,),
    ).fetchall()
    missing.sort(key=lambda row: row[1])
    found = []
    for digest, tool_id in missing:
        row = conn.execute("SELECT definition FROM tools WHERE id = ?", (tool_id,)).fetchone()
        found.append((digest, row[0]))
    return found


def vector_coverage(conn: sqlite3.Connection, model: str) -> tuple[int, int]:
    """(active tools with a vector for ``model``, active tools)."""
    row = conn.execute(
        "SELECT count(e.content_hash), count(*) FROM tools t "
        "JOIN toolkits k ON k.id = t.toolkit_id "
        "LEFT JOIN embeddings e ON e.content_hash = t.content_hash AND e.model = ? "
        "WHERE k.active = 1",
        (model,),
    ).fetchone()
    return int(row[0]), int(row[1])


def has_vectors(conn: sqlite3.Connection, model: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM embeddings WHERE model = ? LIMIT 1", (model,)).fetchone()
        is not None
    )


def revision(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()
    if row is None or not isinstance(row[0], int):
        found = "missing" if row is None else f"{row[0]!r}, not a whole number"
        raise CatalogDamagedError(f"meta 'revision' is {found}", getattr(conn, "path", None))
    return row[0]


def fts_changes(conn: sqlite3.Connection, after: int, limit: int) -> list[int] | None:
    """The ``tools_fts`` rows inserted or deleted since revision ``after`` (the change log:
    ``migrations.m006_fts_changes``), each once; None when the log does not reach back that
    far (a catalog from before it, a log trimmed past ``after``, or one that was never
    kept) or holds more than ``limit`` rows since."""
    return _logged(
        conn,
        "fts_changes_from",
        "SELECT DISTINCT row FROM fts_changes WHERE revision > ? AND NOT row < 0 LIMIT ?",
        (after, limit + 1),
        after,
        limit,
        int,
    )


def vector_changes(
    conn: sqlite3.Connection, after: int, model: str, limit: int
) -> list[str] | None:
    """The definitions whose ``model`` vectors were stored since revision ``after`` (the log
    of ``migrations.m007_vector_changes``), each once; None when the log does not reach
    back that far or holds more than ``limit`` of them since."""
    return _logged(
        conn,
        "vector_changes_from",
        "SELECT DISTINCT content_hash FROM vector_changes WHERE revision > ? AND model = ? LIMIT ?",
        (after, model, limit + 1),
        after,
        limit,
        str,
    )


def _logged(
    conn: sqlite3.Connection,
    start_key: str,
    sql: str,
    params: tuple[Any, ...],
    after: int,
    limit: int,
    kind: type[T],
) -> list[T] | None:
    """A change log's entries since ``after`` (``sql``), when the log is whole from there
    (``meta[start_key]``, a whole number at most ``after``), there are at most ``limit``
    and each is a ``kind``; else None (the file is input: anything else means read whole)."""
    try:
        start = meta(conn, start_key)
        if type(start) is not int or after < start:
            return None
        rows = conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # no such table: not migrated (a read-only catalog)
        return None
    if len(rows) > limit or not all(type(row[0]) is kind for row in rows):
        return None
    return [row[0] for row in rows]


def fts_history(conn: sqlite3.Connection, revision: int) -> int | None:
    """The change log's random mark of ``revision`` (``writer.bump_revision``: a negative
    row): which history of the catalog reached that revision. None when there is none (a
    catalog from before the log, a revision no write of this toolcat made, a log trimmed
    past it)."""
    try:
        row = conn.execute(
            "SELECT min(row) FROM fts_changes WHERE revision = ? AND row < 0", (revision,)
        ).fetchone()
    except sqlite3.OperationalError:  # no such table: not migrated (a read-only catalog)
        return None
    return row[0] if row is not None and type(row[0]) is int else None


# A stored definition's fields and the JSON types each may hold (``description`` and
# ``parameters`` always present): what readers rely on without building a model.
_DEFINITION_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "description": str,
    "parameters": dict,
    "output_schema": dict,
    "tags": list,
    "defer_loading": bool,
    "idempotent": bool,
    "streaming": bool,
    "annotations": dict,
    "implementation": str,
    "examples": list,
    "search_hint": str,
    "timeout": (int, float),
    "max_concurrency": int,
    "max_result_bytes": int,
}
_REQUIRED = ("description", "parameters")


# The C scanner ``json.loads`` ends in, without its wrapper's regex passes (two decodes a
# tool built, up to ten tools a search): ``_json`` falls back to ``json.loads`` for anything
# it does not parse from the first character to the last.
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed
# Stored tag lists (one text is shared by many tools: a toolkit's tags and a few of its own),
# decoded once per process: this many at most, each of at most this many characters.
TAGS_CACHE = 4096
MAX_CACHED_TAGS_CHARS = 1000
_tags_cache: dict[str, tuple[str, ...]] = {}


def _json(text: Any) -> Any:
    """``json.loads(text)``, the same value or the same error."""
    if type(text) is str:
        try:
            value, end = _scan_json(text, 0)
        except (StopIteration, ValueError):
            pass  # json.loads says why
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _strings(values: list[Any]) -> bool:
    """Whether every item is a ``str`` (``join`` checks each in C)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def decode_definition(text: Any, tool: str) -> dict[str, Any]:
    """A tool's stored definition (JSON), checked for the fields and types readers use.

    Raises:
        CatalogDamagedError: the definition was edited or damaged (names the tool).
    """
    try:
        data = _json(text)
    except (TypeError, ValueError, RecursionError):  # nested past the parser: forged
        raise CatalogDamagedError(f"tool {tool!r}: its definition is not JSON") from None
    if not isinstance(data, dict):
        raise CatalogDamagedError(f"tool {tool!r}: its definition is not a JSON object")
    for name in _REQUIRED:
        if name not in data:
            raise CatalogDamagedError(f"tool {tool!r}: its definition has no {name!r}")
    for name, value in data.items():  # a definition holds ~8 of the 15 fields
        kind = _DEFINITION_TYPES.get(name)
        if kind is None or (value is None and name not in _REQUIRED):
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CatalogDamagedError(
                f"tool {tool!r}: field {name!r} of its definition is {value!r:.40}"
            )
        if isinstance(value, list) and not _strings(value):
            raise CatalogDamagedError(f"tool {tool!r}: field {name!r} holds a non-string")
    return data


def decode_tags(text: Any, owner: str) -> list[str]:
    """Tags stored as a JSON list of strings.

    Raises:
        CatalogDamagedError: they were edited or damaged (names their tool or toolkit).
    """
    kept = _tags_cache.get(text) if type(text) is str else None
    if kept is not None:
        return list(kept)
    try:
        tags = _json(text)
    except (TypeError, ValueError, RecursionError):
        tags = None
    if not isinstance(tags, list) or not _strings(tags):
        raise CatalogDamagedError(f"{owner}: its tags are not a JSON list of strings")
    if type(text) is str and len(text) <= MAX_CACHED_TAGS_CHARS and len(_tags_cache) < TAGS_CACHE:
        _tags_cache[text] = tuple(tags)
    return tags


def _checked_row(row: tuple[Any, ...]) -> str:
    """The id of a row selected with ``TOOL_COLUMNS``, once its columns are checked."""
    _id, name, toolkit, version = row[:4]
    if not (isinstance(name, str) and isinstance(toolkit, str) and isinstance(version, str)):
        raise CatalogDamagedError(
            f"tool row {_id}: name {name!r:.40}, toolkit {toolkit!r:.40} and version "
            f"{version!r:.40} must be text"
        )
    module, kind = row[8:10]
    if module is not None and not isinstance(module, str):
        raise CatalogDamagedError(f"toolkit {toolkit!r}: its module is {module!r:.40}")
    if not isinstance(kind, str):
        raise CatalogDamagedError(f"toolkit {toolkit!r}: its kind is {kind!r:.40}")
    return f"{toolkit}.{name}"


def is_active_toolkit(conn: sqlite3.Connection, toolkit_id: int) -> bool:
    row = conn.execute("SELECT active FROM toolkits WHERE id = ?", (toolkit_id,)).fetchone()
    return bool(row and row[0])


def allowed_ids(conn: sqlite3.Connection, filters: Filters) -> frozenset[int]:
    """Row ids of the active tools ``filters`` lets through: how search's in-memory
    indexes (BM25's, the vectors') apply filters that SQL applies elsewhere."""
    where, params = filters.sql(active_only=True)
    return frozenset(
        row[0]
        for row in conn.execute(
            f"SELECT t.id FROM {TOOL_FROM} WHERE {where}",
            params,
        )
    )


def row_to_tool(row: tuple[Any, ...]) -> RegisteredTool:
    """Build a ``RegisteredTool`` from a row selected with ``TOOL_COLUMNS``.

    The definition was validated when it was registered, so it is not validated again
    (``construct``: search builds up to ten of these a query).
    """
    from ..models import RegisteredTool, ToolAnnotations

    definition, deprecated, module, kind = row[6:10]
    data = decode_definition(definition, _checked_row(row))
    annotations = data.get("annotations")
    get = data.get
    values = _summary(row, data)  # the summary's fields first: a model dumps in this order
    values.update(
        output_schema=get("output_schema"),
        idempotent=get("idempotent", False),
        streaming=get("streaming", False),
        annotations=ToolAnnotations.model_construct(**annotations) if annotations else None,
        implementation=get("implementation"),
        examples=get("examples", []),
        search_hint=get("search_hint"),
        timeout=get("timeout"),
        max_concurrency=get("max_concurrency"),
        max_result_bytes=get("max_result_bytes"),
        deprecated=bool(deprecated),
        module=module,
        kind=kind,
    )
    return construct(RegisteredTool, values)


def row_to_summary(row: tuple[Any, ...]) -> dict[str, Any]:
    """``row_to_tool(row).summary()``, without building the model (list mode's JSON)."""
    return _summary(row, decode_definition(row[6], _checked_row(row)))


def _summary(row: tuple[Any, ...], data: dict[str, Any]) -> dict[str, Any]:
    """The summary fields of a row and its parsed definition (``data``)."""
    _id, name, toolkit, version, defer_loading, tags = row[:6]
    return {
        "id": f"{toolkit}.{name}",
        "name": name,
        "toolkit": toolkit,
        "version": version,
        "description": data["description"],
        "parameters": data["parameters"],
        "tags": decode_tags(tags, f"tool {f'{toolkit}.{name}'!r}"),
        "defer_loading": bool(defer_loading),
    }


def list_rows(
    conn: sqlite3.Connection, filters: Filters, after: tuple[str, str] | None, limit: int
) -> list[tuple[Any, ...]]:
    """Rows (``TOOL_COLUMNS``) of the tools matching ``filters`` in (toolkit, name) order,
    starting after ``after``."""
    where, params = filters.sql()
    if after is not None:
        where += " AND (t.toolkit, t.name) > (?, ?)"
        params.extend(after)
    # CROSS JOIN keeps tools as the outer loop, so rows come in index order and LIMIT stops
    # the scan early instead of sorting every active tool (measured: 0.1 ms, not 7 ms, at 10k).
    rows = conn.execute(
        f"SELECT {TOOL_COLUMNS} FROM tools t CROSS JOIN toolkits k ON k.id = t.toolkit_id "
        f"WHERE {where} ORDER BY t.toolkit, t.name LIMIT ?",
        [*params, limit],
    ).fetchall()
    return rows


def active_tool_ids(
    conn: sqlite3.Connection, limit: int, filters: Filters | None = None
) -> list[str] | None:
    """Ids of every active tool (that ``filters`` let through), or ``None`` when there are
    more than ``limit``."""
    where, params = (filters or Filters()).sql()
    rows = conn.execute(
        f"SELECT t.toolkit || '.' || t.name FROM {TOOL_FROM} WHERE {where} LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    return None if len(rows) > limit else [r[0] for r in rows]


def shared_names(
    conn: sqlite3.Connection,
    names: list[str],
    filters: Filters | None = None,
    admits: Callable[[RegisteredTool], bool] | None = None,
) -> set[str]:
    """Which of ``names`` more than one active toolkit (that ``filters`` let through, and
    ``admits`` accepts, when given) has a tool called. Each name is looked up through the
    name index and only until a second tool is found: the cost follows how common the
    name is, not how large the catalog is."""
    where, params = (filters or Filters()).sql()
    columns = TOOL_COLUMNS if admits is not None else "1"
    found: set[str] = set()
    for name in names:
        rows = conn.execute(
            f"SELECT {columns} FROM {TOOL_BY_NAME_FROM} "
            f"WHERE t.name = ? COLLATE NOCASE AND t.name = ? AND {where}"
            + (" LIMIT 2" if admits is None else ""),
            (name, name, *params),
        )
        seen = 0
        for row in rows:
            if admits is None or admits(row_to_tool(row)):
                seen += 1
                if seen > 1:
                    found.add(name)
                    break
    return found


def tools_by_id(conn: sqlite3.Connection, ids: list[int]) -> dict[int, RegisteredTool]:
    """Tools with these row ids, keyed by id."""
    return {i: row_to_tool(row) for i, row in rows_by_id(conn, ids).items()}


def rows_by_id(conn: sqlite3.Connection, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """Rows (``TOOL_COLUMNS``) of the tools with these row ids, keyed by id."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT {TOOL_COLUMNS} FROM {TOOL_FROM} WHERE t.id IN ({marks})", ids
    ).fetchall()
    return {row[0]: row for row in rows}


def find_tools(
    conn: sqlite3.Connection, name: str, **where: Any
) -> list[tuple[int, RegisteredTool]]:
    """Tools called ``name``, with their row ids (``where``: ``find_rows``'s keywords)."""
    return [(row[0], row_to_tool(row)) for row in find_rows(conn, name, **where)]


def find_rows(
    conn: sqlite3.Connection,
    name: str,
    *,
    toolkit: str | None = None,
    active_only: bool = True,
    nocase: bool = False,
    filters: Filters | None = None,
) -> list[tuple[Any, ...]]:
    """Rows (``TOOL_COLUMNS``) of the tools called ``name`` (optionally in ``toolkit``;
    ``filters``, else the active versions unless ``active_only`` is off)."""
    clauses = (
        ["t.name = ? COLLATE NOCASE"] if nocase else ["t.name = ? COLLATE NOCASE", "t.name = ?"]
    )
    params: list[Any] = [name] if nocase else [name, name]
    if toolkit is not None:
        clauses.append("t.toolkit = ?")
        params.append(toolkit)
    if filters is not None:
        where, more = filters.sql()
        clauses.append(where)
        params.extend(more)
    elif active_only:
        clauses.append("k.active = 1")
    rows: list[tuple[Any, ...]] = conn.execute(
        f"SELECT {TOOL_COLUMNS} FROM {TOOL_BY_NAME_FROM} WHERE {' AND '.join(clauses)} "
        "ORDER BY t.toolkit, k.id",
        params,
    ).fetchall()
    return rows


def toolkit_versions(
    conn: sqlite3.Connection,
    name: str | None = None,
    *,
    after: str | None = None,
    limit: int | None = None,
) -> list[ToolkitVersion]:
    """Registered toolkit versions, one toolkit's or (``name=None``) the active ones of all;
    of those, the first ``limit`` named after ``after`` (keyset: any page costs the same)."""
    where, params = ("k.name = ?", [name]) if name is not None else ("k.active = 1", [])
    if after is not None:
        where, params = f"{where} AND k.name > ?", [*params, after]
    rows = conn.execute(
        "SELECT k.name, k.version, k.description, k.tags, k.active, k.deprecated, "
        "k.registered_at, k.source, (SELECT count(*) FROM tools t WHERE t.toolkit_id = k.id) "
        f"FROM toolkits k WHERE {where} ORDER BY k.name, k.id LIMIT ?",
        [*params, -1 if limit is None else limit],
    ).fetchall()
    from ..models import ToolkitVersion

    for r in rows:
        if not all(isinstance(text, str) for text in r[:3]) or not isinstance(r[6], str):
            raise CatalogDamagedError(
                f"toolkit row {r[0]!r:.40} {r[1]!r:.40}: name, version, description and "
                "registration time must be text"
            )
    return [
        ToolkitVersion.model_construct(
            toolkit=r[0],
            version=r[1],
            description=r[2],
            tags=decode_tags(r[3], f"toolkit {r[0]!r}"),
            active=bool(r[4]),
            deprecated=bool(r[5]),
            registered_at=r[6],
            source=r[7],
            tools=r[8],
        )
        for r in rows
    ]


def toolkit_names(conn: sqlite3.Connection) -> list[str]:
    """Every registered toolkit's name, active or not."""
    return [r[0] for r in conn.execute("SELECT DISTINCT name FROM toolkits ORDER BY name")]


def toolkit_rows(conn: sqlite3.Connection, name: str) -> list[tuple[int, str, str, bool]]:
    """(id, version, content_hash, deprecated) of every registered version of ``name``."""
    rows = conn.execute(
        "SELECT id, version, content_hash, deprecated FROM toolkits WHERE name = ?", (name,)
    ).fetchall()
    for r in rows:
        if not isinstance(r[1], str) or not isinstance(r[2], str):
            raise CatalogDamagedError(
                f"toolkit {name!r}: version {r[1]!r:.40} and content hash {r[2]!r:.40} must be text"
            )
    return [(r[0], r[1], r[2], bool(r[3])) for r in rows]


def fts_rows(conn: sqlite3.Connection, ids: list[int]) -> dict[int, tuple[str, ...]]:
    """Row id -> the tool's tokenized FTS5 columns (name, hint, description, params, tags)."""
    found: dict[int, tuple[str, ...]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for row in conn.execute(
            "SELECT rowid, name, hint, description, params, tags FROM tools_fts "
            f"WHERE rowid IN ({','.join('?' * len(chunk))})",
            chunk,
        ):
            found[row[0]] = tuple(row[1:])
    return found


def principal_uses(
    conn: sqlite3.Connection, principal: str, tool_ids: Sequence[int]
) -> dict[int, list[str]]:
    """Tool row id -> the queries ``principal`` recorded for it (newest first), for the given
    active tools; empty when learning from use is off."""
    if not tool_ids or not meta(conn, "learn_from_use"):
        return {}
    # A principal that recorded nothing (every new caller, and `anonymous` on most servers):
    # one probe of the index, not a row and an index probe per hit (45 of a new search's
    # ~650 us at 10k tools, more where the hits' rows are not in the page cache).
    if (
        conn.execute("SELECT 1 FROM usage WHERE principal = ? LIMIT 1", (principal,)).fetchone()
        is None
    ):
        return {}
    found: dict[int, list[str]] = {}
    for start in range(0, len(tool_ids), 500):
        chunk = list(tool_ids[start : start + 500])
        for tool_id, query in conn.execute(
            # The hits first (CROSS JOIN keeps SQLite to that order whatever ANALYZE found),
            # then each one's uses by index: never every use the principal recorded.
            "SELECT t.id, u.query FROM tools t CROSS JOIN usage u ON t.toolkit = u.toolkit "
            f"AND t.name = u.name WHERE u.principal = ? AND t.id IN ({','.join('?' * len(chunk))}) "
            "ORDER BY u.id DESC",
            (principal, *chunk),
        ):
            found.setdefault(tool_id, []).append(query)
    return found


# Longer than any tool id (64 + 1 + 64): such a query cannot name a tool exactly.
MAX_ADDRESS_CHARS = 130


def _named(text: str) -> tuple[str | None, str] | None:
    """(toolkit, or None for a bare name; tool name) of the address ``text`` may be, any
    case; None when it cannot be one."""
    candidate = text.strip()
    if len(candidate) > MAX_ADDRESS_CHARS or any(c.isspace() for c in candidate):
        return None
    toolkit, dot, name = candidate.partition(".")
    return (toolkit.lower(), name) if dot else (None, candidate)


def exact_matches(conn: sqlite3.Connection, text: str, filters: Filters) -> list[int]:
    """Row ids of the tools ``text`` names exactly (``name`` or ``toolkit.name``)."""
    named = _named(text)
    if named is None:
        return []
    toolkit, name = named
    return [row[0] for row in find_rows(conn, name, toolkit=toolkit, nocase=True, filters=filters)]


def exact_among(conn: sqlite3.Connection, text: str, ids: Sequence[int]) -> set[int]:
    """Which of the tools with row ids ``ids`` ``text`` names exactly (``exact_matches``'
    rule): only those rows are read, however many tools share the name."""
    named = _named(text)
    if not ids or named is None:
        return set()
    toolkit, name = named
    clause, params = (
        ("t.name = ? COLLATE NOCASE", [name])
        if toolkit is None
        else ("t.name = ? COLLATE NOCASE AND t.toolkit = ?", [name, toolkit])
    )
    marks = ",".join("?" * len(ids))  # a ranking's ids: at most k (``rows_by_id`` alike)
    rows = conn.execute(
        f"SELECT t.id FROM tools t WHERE t.id IN ({marks}) AND {clause}", (*ids, *params)
    )
    return {row[0] for row in rows}


def rule_matches_a_tool(conn: sqlite3.Connection, rule: Rule) -> bool:
    """Whether ``rule`` matches any registered tool, of any version."""
    sql, value = rule.sql()
    return (
        conn.execute(f"SELECT 1 FROM tools t WHERE {sql} LIMIT 1", (value,)).fetchone() is not None
    )


def rule_meant(conn: sqlite3.Connection, rule: Rule) -> str | None:
    """``tag:PATTERN`` or ``toolkit:PATTERN`` when ``rule``'s pattern matches a tag or a
    toolkit name (what a bare tool-name rule that matches no tool was likely meant as)."""
    if conn.execute("SELECT 1 FROM tool_tags WHERE tag GLOB ? LIMIT 1", (rule.glob,)).fetchone():
        return f"tag:{rule.text}"
    if conn.execute("SELECT 1 FROM toolkits WHERE name GLOB ? LIMIT 1", (rule.glob,)).fetchone():
        return f"toolkit:{rule.text}"
    return None
