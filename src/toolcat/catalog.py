"""The public API: register toolkits, list the always-on tools, search all of them.

``Catalog`` is the one object the CLI, the MCP server and Python users talk to. It keeps
the business rules (addresses, versions, cursors, ranking order); storage, search and
manifest parsing live in the packages below it.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .addresses import decode_cursor, encode_cursor, parse_address, parse_toolkit_ref
from .errors import (
    AmbiguousNameError,
    CatalogError,
    DeprecatedToolError,
    InvalidQueryError,
    ManifestError,
    UnknownToolError,
    UnknownToolkitError,
    VersionConflictError,
)
from .export import ExportedTools, export_tools, registered_tools, tool_items
from .models import (
    RegisteredTool,
    RegistrationResult,
    ReindexReport,
    SearchHit,
    SearchResult,
    Toolkit,
    ToolkitVersion,
    ToolPage,
    ToolResult,
)
from .policy import Policy
from .registry.versions import next_version, sort_versions, tool_changes
from .runtime.call import Runtime, error_result
from .search import reindex as reindexing
from .search.engine import SEARCH_MODES, SearchEngine
from .search.split import split_request
from .store import reader, writer
from .store.connection import connect, default_path
from .store.migrations import migrate
from .store.reader import Filters

__all__ = ["DEFAULT_LIST_LIMIT", "MAX_LIMIT", "SEARCH_MODES", "Catalog"]

DEFAULT_LIST_LIMIT = 50
MAX_LIMIT = 1000
RECENT_HITS = 256  # tools of recent searches remembered for learning from use
LEARNED_PER_TOOL = 20  # newest distinct queries kept per tool
MAX_LEARNED_CHARS = 500
# Hybrid search splits compound requests (search/split.py); README, "Multi-tool requests".
SPLIT_REQUESTS = True


def _flatten(sources: Iterable[Any]) -> Iterator[Any]:
    for source in sources:
        if isinstance(source, (list, tuple)):
            yield from source
        else:
            yield source


def unknown_toolkit(name: str, known: Iterable[str]) -> UnknownToolkitError:
    """The error for a toolkit name nobody registered, with close matches."""
    import difflib

    close = difflib.get_close_matches(name, builtins.list(known), n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return UnknownToolkitError(f"no toolkit named {name!r}.{hint}")


class Catalog:
    """A catalog of tool definitions stored in one SQLite file.

    Args:
        path: The catalog file; created (with its parent folders) if missing. Defaults to
            ``$TOOLCAT_DB``, else ``~/.local/share/toolcat/catalog.db``.
        policy: Allow/deny rules and guards for calls. Tools its rules deny are also left
            out of list and search unless ``include_denied=True``.
        default_timeout: Seconds a call may run when neither the call nor the tool says.
        max_result_bytes: Results larger than this (as JSON) are truncated, unless the tool
            sets its own ``max_result_bytes``.
        embedding_model: The sentence-transformers model (name or folder) for embedding
            search. Default: the one the catalog was indexed with, else all-MiniLM-L6-v2
            (bundled, offline). Asking for another than the catalog's vectors came from is
            an error until ``reindex(model=...)``.

    Raises:
        CatalogError: The file is not a toolcat catalog, or comes from a newer toolcat.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        policy: Policy | None = None,
        default_timeout: float = 60.0,
        max_result_bytes: int = 1_000_000,
        embedding_model: str | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.policy = policy or Policy()
        self.default_timeout = default_timeout
        self.max_result_bytes = max_result_bytes
        self._runtime: Runtime | None = None
        self._resolved: dict[str, tuple[RegisteredTool, Any]] = {}
        self._resolved_revision = -1
        self._conn = connect(self.path)
        self._lock = threading.RLock()
        self._search = SearchEngine(embedding_model)
        # Learning from use: tool id -> the latest query whose search returned it.
        self._recent_hits: collections.OrderedDict[str, str] = collections.OrderedDict()
        try:
            migrate(self._conn)
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise CatalogError(f"cannot use {str(self.path)!r} as a catalog: {e}") from e
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        """Close the catalog file and stop the threads tools ran on."""
        if self._runtime is not None:
            self._runtime.close()
        self._conn.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({str(self.path)!r})"

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: everything read inside it comes from one revision."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    @property
    def revision(self) -> int:
        """A counter bumped by every change to the catalog."""
        with self._lock:
            return reader.revision(self._conn)

    # -- registration ---------------------------------------------------------------------

    def register(
        self,
        *sources: Toolkit | str | os.PathLike[str] | Iterable[Toolkit | str | os.PathLike[str]],
        replace: bool = False,
    ) -> list[RegistrationResult]:
        """Register toolkits from ``Toolkit`` objects, manifest files or directories of them.

        Everything is validated first and written in one transaction: if any toolkit is
        invalid or conflicts, nothing is registered. Registering the same version with the
        same content again changes nothing; a new version becomes the active one.

        Args:
            sources: ``Toolkit`` objects, manifest paths, or directories of manifests
                (or lists and tuples of them).
            replace: Overwrite a registered version whose content differs.

        Returns:
            One result per toolkit: ``added``, ``unchanged`` or ``replaced``.

        Raises:
            ManifestError: A manifest is malformed (the message names file, toolkit,
                tool and field).
            VersionConflictError: A version is registered with other content and
                ``replace`` is false.
        """
        from .registry.manifest import load_manifests

        batch: list[tuple[Toolkit, str | None]] = []
        for source in _flatten(sources):
            if isinstance(source, Toolkit):
                batch.append((source, None))
            elif isinstance(source, (str, os.PathLike)):
                batch.extend(load_manifests([source]))
            else:
                raise TypeError(
                    "register() takes Toolkit objects, manifest paths or directories "
                    f"(or lists of them), not {type(source).__name__}"
                )
        if not batch:
            raise ManifestError("nothing to register")
        with self._lock:
            return writer.register(self._conn, batch, replace=replace)

    def register_mcp(
        self,
        server: str,
        *,
        toolkit: str,
        version: str | None = None,
        http: bool = False,
        description: str | None = None,
        tags: Iterable[str] = (),
        defer_loading: bool = True,
        timeout: float = 30.0,
    ) -> RegistrationResult:
        """Register the tools an MCP server lists as a toolkit whose tools forward calls to it.

        The server is started (or the URL opened) to read its tools, then closed; it is
        started again on the first call of one of its tools. Registering again picks up
        added, changed and removed tools: without ``version``, unchanged tools keep the
        newest version and changed ones get the next (last number + 1; ``1.0.0`` at first).

        Args:
            server: The command that starts a stdio server (``"npx -y server-x"``), or with
                ``http`` the URL of a streamable HTTP server.
            toolkit: The toolkit's name in this catalog.
            version: The version to register (default: see above).
            http: ``server`` is a URL.
            description: The toolkit's description (default: from the server's name).
            tags: Tags for every tool (``mcp`` is always added).
            defer_loading: Whether the tools are deferred (found by search, not listed).
            timeout: Seconds to wait for the server to start and list its tools.

        Returns:
            The registration, with ``changes`` listing added, changed and removed tools
            against the newest registered version.

        Raises:
            ImportFailedError: The server cannot be started, or does not answer in time.
            ManifestError: The server lists an invalid tool, or none.
            VersionConflictError: ``version`` is registered with other tools.
        """
        from .mcpclient import Endpoint, forget
        from .registry.mcp import toolkit_from_mcp

        endpoint = Endpoint("http" if http else "stdio", server.strip())
        newest = self._newest_version(toolkit)
        built = toolkit_from_mcp(
            endpoint,
            toolkit,
            version or newest or "1.0.0",
            description=description,
            tags=tags,
            defer_loading=defer_loading,
            timeout=timeout,
        )
        old = (
            ()
            if newest is None
            else self.iter_tools(toolkit=f"{toolkit}@{newest}", include_denied=True)
        )
        changes = tool_changes(built.tools, old)
        with self._lock:
            try:
                result = writer.register(self._conn, [(built, str(endpoint))], replace=False)[0]
            except VersionConflictError:
                if version is not None or newest is None:
                    raise
                built = built.model_copy(update={"version": next_version(newest)})
                result = writer.register(self._conn, [(built, str(endpoint))], replace=False)[0]
        forget(endpoint)  # a session kept open from before serves the old tools
        return result.model_copy(update={"changes": changes})

    def _newest_version(self, toolkit: str) -> str | None:
        try:
            return self.versions(toolkit)[-1].version
        except UnknownToolkitError:
            return None

    def deprecate(self, toolkit: str, version: str | None = None) -> int:
        """Deprecate one version (``toolkit@version`` or ``version=``); returns the revision.

        The active version becomes the newest one not deprecated.
        """
        name, pinned = parse_toolkit_ref(toolkit)
        version = version or pinned
        if version is None:
            raise UnknownToolkitError("deprecate needs a version: toolkit@version")
        with self._lock:
            return writer.deprecate(self._conn, name, version)

    def remove(self, toolkit: str, version: str | None = None) -> int:
        """Remove one version of a toolkit (``toolkit@version``) or all of it; returns the
        number of versions removed."""
        name, pinned = parse_toolkit_ref(toolkit)
        with self._lock:
            removed, _revision = writer.remove(self._conn, name, version or pinned)
        return removed

    # -- reading --------------------------------------------------------------------------

    def _filters(
        self,
        conn: sqlite3.Connection,
        tags: Iterable[str],
        toolkit: str | None,
        include_deferred: bool,
        include_denied: bool,
    ) -> Filters:
        base = Filters(
            tags=tuple(dict.fromkeys(t.strip() for t in tags if t.strip())),
            include_deferred=include_deferred,
            hide=None if include_denied or not self.policy.deny else self.policy,
        )
        if toolkit is None:
            return base
        name, version = parse_toolkit_ref(toolkit)
        rows = reader.toolkit_rows(conn, name)
        if not rows:
            raise unknown_toolkit(name, reader.toolkit_names(conn))
        if version is None:
            if all(deprecated for *_, deprecated in rows):
                pins = ", ".join(
                    f"{name}@{v.version}"
                    for v in sort_versions(reader.toolkit_versions(conn, name))
                )
                raise UnknownToolkitError(
                    f"every version of toolkit {name!r} is deprecated; pin one: {pins}"
                )
            return dataclasses.replace(base, toolkit=name)
        for row_id, registered, _digest, _deprecated in rows:
            if writer.same_version(registered, version):
                return dataclasses.replace(base, toolkit_id=row_id)
        known = ", ".join(v.version for v in sort_versions(reader.toolkit_versions(conn, name)))
        raise UnknownToolkitError(
            f"toolkit {name!r} has no version {version!r}; registered: {known}"
        )

    def list(
        self,
        *,
        tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = False,
        limit: int = DEFAULT_LIST_LIMIT,
        cursor: str | None = None,
        include_denied: bool = False,
    ) -> ToolPage:
        """List mode: the active, non-deferred tools, ordered by toolkit then name.

        Args:
            tags: Only tools carrying every one of these tags (their own or their toolkit's).
            toolkit: Only this toolkit (``name`` or a pinned ``name@version``).
            include_deferred: Include deferred tools too.
            limit: Page size, 1 to 1000.
            cursor: ``next_cursor`` from the previous page.
            include_denied: Include tools the catalog's policy denies.

        Returns:
            A page of tools with the catalog revision and the cursor of the next page
            (``None`` on the last page).
        """
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidQueryError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
        after = decode_cursor(cursor) if cursor else None
        with self._snapshot() as conn:
            filters = self._filters(conn, tags, toolkit, include_deferred, include_denied)
            tools = reader.list_tools(conn, filters, after, limit + 1)
            revision = reader.revision(conn)
        next_cursor = None
        if len(tools) > limit:
            tools = tools[:limit]
            next_cursor = encode_cursor(tools[-1].toolkit, tools[-1].name)
        return ToolPage.model_construct(revision=revision, tools=tools, next_cursor=next_cursor)

    def iter_tools(
        self,
        *,
        tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = True,
        include_denied: bool = False,
    ) -> Iterator[RegisteredTool]:
        """Every tool ``list`` would return for these filters, deferred ones included by
        default, page after page (each page is one read)."""
        cursor: str | None = None
        while True:
            page = self.list(
                tags=tags,
                toolkit=toolkit,
                include_deferred=include_deferred,
                include_denied=include_denied,
                limit=MAX_LIMIT,
                cursor=cursor,
            )
            yield from page.tools
            cursor = page.next_cursor
            if cursor is None:
                return

    def search(
        self,
        query: str,
        *,
        mode: str | None = None,
        k: int = 10,
        tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = True,
        include_denied: bool = False,
    ) -> SearchResult:
        """Search mode: rank every matching tool, deferred ones included.

        Any text is a valid query. A query that names a tool exactly (``name`` or
        ``toolkit.name``, any case) puts that tool first. An empty query is list mode.

        Args:
            query: What the agent is looking for, in its own words.
            mode: ``bm25``, ``embedding``, ``hybrid`` or ``regex``. Default: ``hybrid``
                when embeddings are installed and the catalog has vectors, else ``bm25``.
            k: How many hits to return, 1 to 1000.
            tags: Only tools carrying every one of these tags.
            toolkit: Only this toolkit (``name`` or ``name@version``).
            include_deferred: Include deferred tools (the default).
            include_denied: Include tools the catalog's policy denies.

        Returns:
            Hits best first, with higher-is-better scores, and the catalog revision.
        """
        if not 1 <= k <= MAX_LIMIT:
            raise InvalidQueryError(f"k must be between 1 and {MAX_LIMIT}, not {k}")
        with self._lock:
            mode, model_id = self._search.plan(self._conn, mode)
        if not query.strip():
            page = self.list(tags=tags, toolkit=toolkit, limit=k, include_denied=include_denied)
            hits = [SearchHit(rank=i, score=0.0, tool=t) for i, t in enumerate(page.tools, 1)]
            return SearchResult(revision=page.revision, query=query, mode=mode, hits=hits)
        query_vector = self._search.encode_query(model_id, query) if model_id else None
        parts = []
        if mode == "hybrid" and SPLIT_REQUESTS:
            parts = [(p, self._search.encode_query(model_id, p)) for p in split_request(query)]
        with self._snapshot() as conn:
            filters = self._filters(conn, tags, toolkit, include_deferred, include_denied)
            result = self._search.search(
                conn,
                query,
                mode=mode,
                model_id=model_id,
                query_vector=query_vector,
                filters=filters,
                k=k,
                parts=parts,
            )
        if mode != "regex":
            self.searched(query, [h.tool.id for h in result.hits])
        return result

    # -- learning from use ----------------------------------------------------------------

    def searched(self, query: str, tool_ids: Iterable[str]) -> None:
        """Remember that a search for ``query`` returned these tools, so that a later
        ``used`` (or ``call``) of one of them records the use. ``search`` does this itself;
        a server with one ``Catalog`` for many clients keeps its own per-connection memory
        and calls ``record_use`` instead."""
        with self._lock:
            for tool_id in tool_ids:
                self._recent_hits[tool_id] = query
                self._recent_hits.move_to_end(tool_id)
            while len(self._recent_hits) > RECENT_HITS:
                self._recent_hits.popitem(last=False)

    def used(self, tool_id: str) -> bool:
        """A tool was called: record (query, tool) when a recent search returned it."""
        with self._lock:
            query = self._recent_hits.pop(tool_id, None)
        return query is not None and self.record_use(query, tool_id)

    def record_use(self, query: str, tool: str) -> bool:
        """Record that ``query`` was answered by ``tool`` (an address); the next reindex
        adds the query to the tool's search documents. Returns False when learning from use
        is off or the query is empty.

        Raises:
            UnknownToolError: No such tool.
        """
        query = query.strip()[:MAX_LEARNED_CHARS]
        found = self.get(tool)
        if not query:
            return False
        with self._lock:
            return writer.record_use(self._conn, found.toolkit, found.name, query, LEARNED_PER_TOOL)

    def usage(self, toolkit: str | None = None) -> builtins.list[dict[str, Any]]:
        """Recorded uses, newest first: ``{"tool", "query", "recorded_at"}``."""
        with self._snapshot() as conn:
            rows = conn.execute(
                "SELECT toolkit, name, query, recorded_at FROM usage "
                + ("WHERE toolkit = ? " if toolkit else "")
                + "ORDER BY id DESC",
                (toolkit,) if toolkit else (),
            ).fetchall()
        return [{"tool": f"{t}.{n}", "query": q, "recorded_at": at} for t, n, q, at in rows]

    def clear_usage(self, toolkit: str | None = None) -> int:
        """Forget recorded uses (of one toolkit, or all); returns how many. Run reindex to
        take them out of the search documents."""
        with self._lock:
            return writer.clear_usage(self._conn, toolkit)

    @property
    def learning(self) -> bool:
        """Whether uses are recorded and folded into search (a catalog setting, on by
        default)."""
        with self._snapshot() as conn:
            return bool(reader.meta(conn, "learn_from_use"))

    @learning.setter
    def learning(self, enabled: bool) -> None:
        with self._lock:
            writer.set_learning(self._conn, enabled)

    def get(self, address: str) -> RegisteredTool:
        """The tool at ``address``: ``name``, ``toolkit.name``, or either with ``@version``.

        Raises:
            UnknownToolError: No such tool (close matches are suggested).
            AmbiguousNameError: A bare name matches tools in several toolkits.
        """
        toolkit, name, version = parse_address(address)
        with self._snapshot() as conn:
            found = reader.find_tools(conn, name, toolkit=toolkit, active_only=version is None)
            if version is not None:
                found = [(i, t) for i, t in found if writer.same_version(t.version, version)]
            if not found and version is None:
                inactive = reader.find_tools(conn, name, toolkit=toolkit, active_only=False)
                if inactive:
                    raise DeprecatedToolError(address, [f"{t.id}@{t.version}" for _, t in inactive])
            if not found:
                raise UnknownToolError(address, self._search.suggest(conn, name))
        if len(found) > 1:
            raise AmbiguousNameError(address, [t.id for _, t in found])
        return found[0][1]

    def short_names(self, tools: Iterable[RegisteredTool]) -> dict[str, str]:
        """Tool id → the shortest address that names the tool among active tools: the bare
        name, or ``toolkit.name`` where another active toolkit has a tool of that name."""
        tools = builtins.list(tools)
        with self._snapshot() as conn:
            shared = reader.shared_names(conn, sorted({t.name for t in tools}))
        return {t.id: t.id if t.name in shared else t.name for t in tools}

    def export(self, tools: Iterable[Any], format: str) -> ExportedTools:
        """Tool definitions in an LLM API's format, with names fitted to its rules.

        Args:
            tools: ``RegisteredTool`` objects, search hits, a ``SearchResult``, a ``ToolPage``
                or tool addresses.
            format: ``openai-chat``, ``openai-responses``, ``anthropic``, ``gemini`` or
                ``mcp``.

        Returns:
            The provider's ``tools`` payload, and ``address(exported_name)`` to turn a call
            that comes back into an address for ``call`` (``arguments(...)`` undoes Gemini's
            argument rewriting).

        Raises:
            InvalidQueryError: Unknown format.
            UnknownToolError: An address names no tool.
        """
        items = [tools] if isinstance(tools, str) else tool_items(tools)
        found = registered_tools([self.get(t) if isinstance(t, str) else t for t in items])
        return export_tools(found, format, self.short_names(found))

    def versions(self, toolkit: str) -> builtins.list[ToolkitVersion]:
        """Every registered version of ``toolkit``, oldest first (PEP 440 order)."""
        name, _ = parse_toolkit_ref(toolkit)
        with self._lock:
            found = reader.toolkit_versions(self._conn, name)
        if not found:
            with self._lock:
                raise unknown_toolkit(name, reader.toolkit_names(self._conn))
        return sort_versions(found)

    def toolkits(self) -> builtins.list[ToolkitVersion]:
        """The active version of every toolkit, by name."""
        with self._lock:
            return reader.toolkit_versions(self._conn)

    # -- calling --------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """The call machinery (worker threads, validators), created on first use."""
        with self._lock:
            if self._runtime is None:
                self._runtime = Runtime(
                    self.policy,
                    default_timeout=self.default_timeout,
                    max_result_bytes=self.max_result_bytes,
                )
            return self._runtime

    def _resolve(self, address: str) -> tuple[RegisteredTool, Any]:
        """The tool at ``address`` and its argument validator, cached for this revision."""
        with self._lock:
            revision = reader.revision(self._conn)
            if revision != self._resolved_revision:
                self._resolved.clear()
                self._resolved_revision = revision
            found = self._resolved.get(address)
            if found is None:
                tool = self.get(address)
                found = (tool, self.runtime.validator(tool))
                if len(self._resolved) > 10_000:
                    self._resolved.clear()
                self._resolved[address] = found
            return found

    def load(self, address: str) -> Any:
        """Import and return the tool's implementation (cached per process).

        Raises:
            UnknownToolError: No such tool.
            ImportFailedError: The implementation cannot be imported or called.
        """
        return self.runtime.load(self._resolve(address)[0])

    def call(
        self,
        address: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call a tool by name; never raises for the tool's or the caller's mistakes.

        The path: resolve the address (the active version, or a pinned ``@version``) →
        policy rules → validate ``arguments`` against the tool's JSON Schema, filling
        defaults → import the implementation (first call only) → run it (sync tools in a
        worker thread, async ones on an event loop) within the timeout → make the result
        JSON and truncate it if too large.

        Args:
            address: ``name``, ``toolkit.name``, or either with ``@version``.
            arguments: The tool's arguments as a JSON object.
            timeout: Seconds to wait; default the tool's ``timeout``, else the catalog's.

        Returns:
            A ``ToolResult``: ``success`` and ``data``, or ``error`` and ``error_code``
            (``UNKNOWN_TOOL``, ``INVALID_ARGUMENTS``, ``TOOL_DENIED``, ``IMPORT_FAILED``,
            ``TOOL_ERROR``, ``TIMEOUT``).
        """
        started = time.perf_counter()
        try:
            tool, validator = self._resolve(address)
        except Exception as e:
            return error_result(e, started)
        result = self.runtime.call(
            tool, arguments, timeout=timeout, validator=validator, started=started
        )
        if result.success and self._recent_hits:
            with contextlib.suppress(Exception):  # learning must never fail a call
                self.used(tool.id)
        return result

    async def acall(
        self,
        address: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """``call`` for async code: runs the call without blocking the event loop."""
        return await asyncio.to_thread(self.call, address, arguments, timeout=timeout)

    def check(self, toolkit: str | None = None) -> builtins.list[dict[str, Any]]:
        """Import every active tool's implementation (of one toolkit, or all) in a child
        process and check it is callable with the schema's arguments.

        Returns:
            ``{"id", "ok", "problems"}`` per tool.
        """
        import subprocess
        import sys

        tools = []
        cursor = None
        while True:
            page = self.list(
                toolkit=toolkit,
                include_deferred=True,
                include_denied=True,
                limit=MAX_LIMIT,
                cursor=cursor,
            )
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        entries = [
            {"id": t.id, "implementation": t.implementation, "parameters": t.parameters}
            for t in tools
        ]
        child = subprocess.run(
            [sys.executable, "-m", "toolcat.runtime.check"],
            input=json.dumps(entries),
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            raise CatalogError(f"the check process failed: {child.stderr.strip()[-2000:]}")
        result: builtins.list[dict[str, Any]] = json.loads(child.stdout)
        return result

    # -- indexing ------------------------------------------------------------------------

    def reindex(
        self,
        *,
        model: str | None = None,
        batch_size: int = 64,
        full: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> ReindexReport:
        """Bring the search indexes up to date, embedding only what changed.

        Embeds active tools whose definition has no vector for the model (in batches, each
        committed, so an interrupted reindex keeps its work and the next run resumes), then
        deletes vectors of other models and of definitions no tool has. ``full`` rebuilds
        the FTS5 index and re-embeds everything. Nothing is loaded when nothing is stale.

        Args:
            model: Switch the catalog to this sentence-transformers model (name or folder).
            batch_size: Texts per ``encode`` call and per commit.
            full: Rebuild everything from the stored definitions.
            progress: Called with (done, total) after each batch.
        """
        return reindexing.reindex(
            self._conn,
            self._lock,
            self._search,
            model=model,
            batch_size=batch_size,
            full=full,
            progress=progress,
        )

    def status(self) -> dict[str, Any]:
        """Index coverage per mode, the embedding model, the revision."""
        with self._snapshot() as conn:
            return {"path": str(self.path), **reindexing.status(conn, self._search)}
