"""The public API: register toolkits, list the always-on tools, search all of them.

``Catalog`` is the one object the CLI, the MCP server and Python users talk to. It keeps
the business rules (addresses, versions, cursors, ranking order); storage, search and
manifest parsing live in the packages below it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import contextlib
import dataclasses
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import (
    AmbiguousNameError,
    CatalogError,
    EmbeddingError,
    InvalidQueryError,
    ManifestError,
    UnknownToolError,
    UnknownToolkitError,
    VersionConflictError,
)
from .export import ExportedTools, export_tools, registered_tools, tool_items
from .models import (
    TOOLKIT_NAME_RE,
    RegisteredTool,
    RegistrationResult,
    ReindexReport,
    SearchHit,
    SearchResult,
    Tool,
    Toolkit,
    ToolkitVersion,
    ToolPage,
    ToolResult,
    content_hash,
)
from .policy import Policy
from .runtime.call import Runtime, error_result
from .search import bm25
from .search.embeddings import DEFAULT_MODEL, VectorIndex, embedder, embedding_text, to_blob
from .search.fusion import score_fusion
from .search.regex import regex_search
from .store import reader, writer
from .store.connection import connect, default_path
from .store.migrations import migrate
from .store.reader import Filters

SEARCH_MODES = ("bm25", "embedding", "hybrid", "regex")
# Hybrid: how many hits each ranking contributes, and their weights in score fusion. Chosen
# with scripts/tune_hybrid.py: min-max score fusion at 0.45/0.55 beat reciprocal rank
# fusion on mean R@5 (.707 vs .694) and nDCG@10 (.664 vs .648) over the seven sources.
HYBRID_DEPTH = 50
HYBRID_WEIGHTS = (0.45, 0.55)  # (bm25, embedding)
DEFAULT_LIST_LIMIT = 50
MAX_LIMIT = 1000
MAX_QUERY_CHARS = 100_000


@functools.cache
def embeddings_installed() -> bool:
    """Whether sentence-transformers can be imported (found once per process, not imported)."""
    import importlib.util

    return importlib.util.find_spec("sentence_transformers") is not None


def parse_address(address: str) -> tuple[str | None, str, str | None]:
    """Split a tool address into (toolkit, name, version).

    Accepted forms: ``name``, ``toolkit.name``, ``name@version`` and
    ``toolkit.name@version`` (the last two pin a registered version, active or not).
    """
    base, at, version = address.strip().partition("@")
    toolkit, dot, name = base.partition(".")
    if not dot:
        toolkit, name = "", base
    if (at and not version) or "@" in version or "." in name or not name:
        raise UnknownToolError(address)
    return (toolkit or None), name, (version or None)


def _next_version(version: str) -> str:
    """The version after ``version``: its last release number plus one."""
    from packaging.version import InvalidVersion, Version

    try:
        release = list(Version(version).release)
    except InvalidVersion:
        return f"{version}.1"
    release[-1] += 1
    return ".".join(map(str, release))


def parse_toolkit_ref(ref: str) -> tuple[str, str | None]:
    """Split ``toolkit`` or ``toolkit@version``."""
    name, at, version = ref.strip().partition("@")
    if not TOOLKIT_NAME_RE.match(name) or (at and not version):
        raise UnknownToolkitError(f"{ref!r} is not a toolkit name or toolkit@version")
    return name, (version or None)


def encode_cursor(toolkit: str, name: str) -> str:
    raw = json.dumps([toolkit, name], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        value = None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise InvalidQueryError(f"invalid cursor {cursor!r}: pass back a next_cursor unchanged")
    return value[0], value[1]


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
        self._term_stats = bm25.TermStats()
        self._embedding_model = embedding_model
        self._vectors = VectorIndex()
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
        self, *sources: Toolkit | str | os.PathLike[str], replace: bool = False
    ) -> list[RegistrationResult]:
        """Register toolkits from ``Toolkit`` objects, manifest files or directories of them.

        Everything is validated first and written in one transaction: if any toolkit is
        invalid or conflicts, nothing is registered. Registering the same version with the
        same content again changes nothing; a new version becomes the active one.

        Args:
            sources: ``Toolkit`` objects, manifest paths, or directories of manifests.
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
        for source in sources:
            if isinstance(source, Toolkit):
                batch.append((source, None))
            else:
                batch.extend(load_manifests([source]))
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
        changes = self._tool_changes(built, newest)
        with self._lock:
            try:
                result = writer.register(self._conn, [(built, str(endpoint))], replace=False)[0]
            except VersionConflictError:
                if version is not None or newest is None:
                    raise
                built = built.model_copy(update={"version": _next_version(newest)})
                result = writer.register(self._conn, [(built, str(endpoint))], replace=False)[0]
        forget(endpoint)  # a session kept open from before serves the old tools
        return result.model_copy(update={"changes": changes})

    def _newest_version(self, toolkit: str) -> str | None:
        try:
            return self.versions(toolkit)[-1].version
        except UnknownToolkitError:
            return None

    def _tool_changes(self, toolkit: Toolkit, base: str | None) -> dict[str, builtins.list[str]]:
        """Tools of ``toolkit`` added, changed and removed against version ``base``."""
        keys = ("description", "parameters", "output_schema", "annotations", "implementation")

        def digest(tool: Tool | RegisteredTool) -> str:
            return content_hash(tool.model_dump(mode="json", include=set(keys)))

        old: dict[str, str] = {}
        if base is not None:
            every = self.iter_tools(toolkit=f"{toolkit.name}@{base}", include_denied=True)
            old = {t.name: digest(t) for t in every}
        new = {t.name: digest(t) for t in toolkit.tools}
        return {
            "added": sorted(set(new) - set(old)),
            "changed": sorted(n for n in set(new) & set(old) if new[n] != old[n]),
            "removed": sorted(set(old) - set(new)),
        }

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
        if version is None:
            return dataclasses.replace(base, toolkit=name)
        for row_id, registered, _digest, _deprecated in reader.toolkit_rows(conn, name):
            if writer.same_version(registered, version):
                return dataclasses.replace(base, toolkit_id=row_id)
        raise UnknownToolkitError(f"toolkit {name!r} has no version {version!r}")

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
        if mode is not None and mode not in SEARCH_MODES:
            raise InvalidQueryError(f"unknown search mode {mode!r}; use one of {SEARCH_MODES}")
        if not 1 <= k <= MAX_LIMIT:
            raise InvalidQueryError(f"k must be between 1 and {MAX_LIMIT}, not {k}")
        text = query[:MAX_QUERY_CHARS]
        with self._lock:
            mode = mode or self._best_mode(self._conn)
            model_id = self._model_id(self._conn) if mode in ("embedding", "hybrid") else ""
        if not text.strip():
            page = self.list(tags=tags, toolkit=toolkit, limit=k, include_denied=include_denied)
            hits = [SearchHit(rank=i, score=0.0, tool=t) for i, t in enumerate(page.tools, 1)]
            return SearchResult(revision=page.revision, query=query, mode=mode, hits=hits)
        query_vector = None
        if mode in ("embedding", "hybrid"):
            query_vector = embedder(model_id).encode_query(text)  # outside the lock: ms of CPU
        warnings: builtins.list[str] = []
        with self._snapshot() as conn:
            filters = self._filters(conn, tags, toolkit, include_deferred, include_denied)
            if filters.toolkit_id is not None and not reader.is_active_toolkit(
                conn, filters.toolkit_id
            ):
                raise InvalidQueryError(
                    f"search covers active versions only; {toolkit} is not active. "
                    "List its tools with list(toolkit=...) instead."
                )
            revision = reader.revision(conn)
            if mode == "regex":
                ranked = regex_search(conn, text, filters, k)
                exact = []
            else:
                ranked = self._rank(
                    conn, mode, text, (model_id, query_vector), filters, k, revision, warnings
                )
                exact = self._exact_matches(conn, text, filters)
            tools = reader.tools_by_id(conn, [row_id for row_id, _ in ranked])
        top = ranked[0][1] if ranked else 0.0
        ordered: builtins.list[tuple[RegisteredTool, float]] = [(t, top + 1.0) for _, t in exact]
        exact_ids = {row_id for row_id, _ in exact}
        ordered += [(tools[i], s) for i, s in ranked if i not in exact_ids and i in tools]
        hits = [
            SearchHit.model_construct(rank=rank, score=round(score, 6), tool=tool)
            for rank, (tool, score) in enumerate(ordered[:k], 1)
        ]
        return SearchResult.model_construct(
            revision=revision, query=query, mode=mode, hits=hits, warnings=warnings
        )

    def _rank(
        self,
        conn: sqlite3.Connection,
        mode: str,
        text: str,
        query: tuple[str, Any],
        filters: Filters,
        k: int,
        revision: int,
        warnings: builtins.list[str],
    ) -> builtins.list[tuple[int, float]]:
        """(row id, score) best first, for the bm25, embedding and hybrid modes."""
        depth = max(k, HYBRID_DEPTH) if mode == "hybrid" else k
        lexical: builtins.list[tuple[int, float]] = []
        if mode in ("bm25", "hybrid"):
            self._term_stats.refresh(conn, revision)
            lexical = bm25.search(conn, text, filters, depth, self._term_stats)
            if mode == "bm25":
                return lexical
        model_id, query_vector = query  # (model id, query vector) for the vector modes
        self._vectors.refresh(conn, revision, model_id)
        if self._vectors.missing:
            warnings.append(
                f"{self._vectors.missing} of {self._vectors.active_tools} active tools have no "
                f"vector for {model_id}"
                + (" and are found by BM25 only" if mode == "hybrid" else " and cannot be found")
                + "; run `toolcat reindex` (Catalog.reindex()) to embed them"
            )
        semantic = self._vectors.search(conn, query_vector, filters, depth)
        if mode == "embedding":
            return semantic
        w_lexical, w_semantic = HYBRID_WEIGHTS
        return score_fusion([(w_lexical, lexical), (w_semantic, semantic)], k)

    def _models(self, conn: sqlite3.Connection, asked: str | None = None) -> tuple[Any, str]:
        """(the model the catalog's vectors come from, the model to use)."""
        recorded = reader.meta(conn, "embedding_model")
        return recorded, str(asked or self._embedding_model or recorded or DEFAULT_MODEL)

    def _model_id(self, conn: sqlite3.Connection) -> str:
        """The embedding model in use; refuses one that differs from the catalog's vectors."""
        recorded, wanted = self._models(conn)
        if recorded and wanted != recorded and reader.has_vectors(conn, recorded):
            raise EmbeddingError(
                f"this catalog's vectors come from {recorded!r}, not {wanted!r}: run "
                f"`toolcat reindex --model {wanted}` to switch, or use {recorded!r}"
            )
        return wanted

    def _best_mode(self, conn: sqlite3.Connection) -> str:
        """Hybrid when embeddings are installed and the catalog has vectors, else BM25."""
        if not embeddings_installed():
            return "bm25"
        return "hybrid" if reader.has_vectors(conn, self._models(conn)[1]) else "bm25"

    @staticmethod
    def _exact_matches(
        conn: sqlite3.Connection, text: str, filters: Filters
    ) -> builtins.list[tuple[int, RegisteredTool]]:
        candidate = text.strip()
        if len(candidate) > 130 or any(c.isspace() for c in candidate):
            return []
        toolkit, dot, name = candidate.partition(".")
        if dot:
            return reader.find_tools(
                conn, name, toolkit=toolkit.lower(), nocase=True, filters=filters
            )
        return reader.find_tools(conn, candidate, nocase=True, filters=filters)

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
            if not found:
                raise UnknownToolError(address, self._suggest(conn, name))
        if len(found) > 1:
            raise AmbiguousNameError(address, [t.id for _, t in found])
        return found[0][1]

    def _suggest(self, conn: sqlite3.Connection, name: str) -> builtins.list[str]:
        """Close matches for an unknown name: same name in another case, similar spellings
        (catalogs up to 20k tools), then BM25 over the name's words."""
        import difflib

        exact = reader.find_tools(conn, name, nocase=True)
        if exact:
            return [t.id for _, t in exact][:5]
        suggestions: builtins.list[str] = []
        ids = reader.active_tool_ids(conn, limit=20_000)
        if ids is not None:
            by_name: dict[str, builtins.list[str]] = {}
            for tool_id in ids:
                by_name.setdefault(tool_id.split(".", 1)[1].lower(), []).append(tool_id)
            for close in difflib.get_close_matches(name.lower(), by_name, n=3, cutoff=0.75):
                suggestions += by_name[close]
        self._term_stats.refresh(conn, reader.revision(conn))
        ranked = bm25.search(conn, name, Filters(), 5, self._term_stats)
        suggestions += [t.id for t in reader.tools_by_id(conn, [i for i, _ in ranked]).values()]
        return list(dict.fromkeys(suggestions))[:5]

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
        from packaging.version import InvalidVersion, Version

        name, _ = parse_toolkit_ref(toolkit)
        with self._lock:
            found = reader.toolkit_versions(self._conn, name)
        if not found:
            raise UnknownToolkitError(f"no toolkit named {name!r}")

        def order(v: ToolkitVersion) -> tuple[int, Version | str]:
            try:
                return (0, Version(v.version))
            except InvalidVersion:
                return (1, v.version)

        return sorted(found, key=order)

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
        return self.runtime.call(
            tool, arguments, timeout=timeout, validator=validator, started=started
        )

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
        if batch_size < 1:
            raise InvalidQueryError("batch_size must be at least 1")
        started = time.perf_counter()
        with self._lock:
            recorded, model_id = self._models(self._conn, model)
            stale = reader.stale_vectors(self._conn, model_id, everything=full)
            _, active = reader.vector_coverage(self._conn, model_id)
        dimension = reader.meta(self._conn, "embedding_dim") if recorded == model_id else None
        encoder = None
        if stale or model_id != recorded:
            # Load the model before changing anything: a model that cannot load loses nothing.
            encoder = embedder(model_id)
            dimension = encoder.dimension
        fts_rows = 0
        if full:
            with self._lock:
                fts_rows = writer.rebuild_fts(self._conn)
        done = 0
        for start in range(0, len(stale), batch_size):
            assert encoder is not None
            batch = stale[start : start + batch_size]
            texts = [embedding_text(Tool.model_construct(**json.loads(d))) for _, d in batch]
            vectors = encoder.encode(texts, batch_size=batch_size)
            rows = [(h, to_blob(v)) for (h, _), v in zip(batch, vectors, strict=True)]
            with self._lock:
                writer.store_vectors(self._conn, model_id, rows)
            done += len(batch)
            if progress is not None:
                progress(done, len(stale))
        with self._lock:
            if model_id != recorded or dimension != reader.meta(self._conn, "embedding_dim"):
                writer.set_meta(
                    self._conn, {"embedding_model": model_id, "embedding_dim": dimension}
                )
            # Only now that the new vectors are in: drop other models' and orphans.
            removed = writer.prune_vectors(self._conn, model_id)
        seconds = time.perf_counter() - started
        return ReindexReport(
            model=model_id,
            dimension=int(dimension) if dimension is not None else None,
            embedded=len(stale),
            skipped=active - len(stale),
            removed=removed,
            fts_rebuilt=fts_rows,
            seconds=round(seconds, 3),
            tools_per_second=round(len(stale) / seconds, 1) if stale and seconds else 0.0,
        )

    def status(self) -> dict[str, Any]:
        """Index coverage per mode, the embedding model, the revision."""
        with self._snapshot() as conn:
            _, model = self._models(conn)
            with_vectors, active = reader.vector_coverage(conn, model)
            fts_rows = conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0]
            toolkits = conn.execute("SELECT count(*) FROM toolkits WHERE active = 1").fetchone()[0]
            versions = conn.execute("SELECT count(*) FROM toolkits").fetchone()[0]
            status = {
                "path": str(self.path),
                "revision": reader.revision(conn),
                "schema_version": int(reader.meta(conn, "schema_version")),
                "toolkits": toolkits,
                "toolkit_versions": versions,
                "active_tools": active,
                "default_mode": self._best_mode(conn),
                "embeddings_installed": embeddings_installed(),
                "embedding_model": model,
                "embedding_dim": reader.meta(conn, "embedding_dim"),
                "coverage": {
                    "bm25": {"indexed": fts_rows, "of": active},
                    "embedding": {"indexed": with_vectors, "of": active},
                    "regex": {"indexed": active, "of": active},
                },
            }
        return status
