"""The public API: register toolkits, list the always-on tools, search all of them.

``Catalog`` is the one object the CLI, the MCP server and Python users talk to. It keeps
the business rules (addresses, versions, cursors, ranking order); storage, search and
manifest parsing live in the packages below it.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import dataclasses
import functools
import inspect
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar

from .definitions.addresses import (
    check_text,
    decode_cursor,
    encode_cursor,
    parse_address,
    parse_toolkit_ref,
)
from .errors import (
    AmbiguousNameError,
    CatalogDamagedError,
    CatalogError,
    DeprecatedToolError,
    DeprecatedToolkitError,
    InvalidQueryError,
    ManifestError,
    SourceKindError,
    ToolcatError,
    UnknownToolError,
    UnknownToolkitError,
    VersionConflictError,
)
from .policy.rules import Policy
from .policy.tags import TagFilter
from .policy.trust import check_import_roots
from .registry.versions import next_version, sort_versions, tool_changes
from .runtime.settings import Isolation, check_isolation, check_timeout
from .search.modes import SEARCH_MODES
from .search.scope import Scope
from .store import reader
from .store.connection import connect, default_path, rollback_quietly
from .store.migrations import migrate
from .store.reader import Filters

# Imported where used: a command loads only what it runs, and list mode's plain-dict path
# (``list_summaries``) never imports pydantic (tests/test_imports.py).
if TYPE_CHECKING:
    from .export.providers import ExportedTools
    from .models import (
        EvalResult,
        RegisteredTool,
        RegistrationResult,
        ReindexReport,
        SearchResult,
        ToolEvent,
        Toolkit,
        ToolkitHead,
        ToolkitVersion,
        ToolPage,
        ToolResult,
    )
    from .runtime.call import Runtime
    from .search.engine import Ranking, SearchEngine

__all__ = ["DEFAULT_LIST_LIMIT", "MAX_LIMIT", "SEARCH_MODES", "Catalog"]

DEFAULT_LIST_LIMIT = 50
MAX_LIMIT = 1000
RECENT_HITS = 256  # tools of recent searches remembered for learning from use
LEARNED_PER_TOOL = 20  # newest distinct queries kept per tool
MAX_LEARNED_CHARS = 500
# What a search builds: a ``SearchResult`` (``search``) or plain data (``search_summaries``).
Answer = TypeVar("Answer")


Owner = TypeVar("Owner")
Checked = TypeVar("Checked")
Returned = TypeVar("Returned")
Arguments = ParamSpec("Arguments")


class _Page(NamedTuple):
    """The checked arguments of ``list`` and ``list_summaries``."""

    scope: Scope
    limit: int
    after: tuple[str, str] | None  # the decoded cursor


class _Query(NamedTuple):
    """The checked arguments of ``search`` and ``search_summaries``."""

    text: str
    mode: str | None
    k: int
    scope: Scope
    principal: str | None


def _arguments_of(
    check: Callable[Concatenate[Owner, Arguments], Checked],
) -> Callable[
    [Callable[[Owner, Checked], Returned]], Callable[Concatenate[Owner, Arguments], Returned]
]:
    """A method that takes the arguments of ``check``, which checks them, and answers from
    what it returns: parallel methods (``search`` and ``search_summaries``) written with
    one signature. ``inspect.signature`` and ``help()`` show ``check``'s parameters."""

    def method(
        answer: Callable[[Owner, Checked], Returned],
    ) -> Callable[Concatenate[Owner, Arguments], Returned]:
        @functools.wraps(answer)
        def asked(self: Owner, /, *args: Arguments.args, **kwargs: Arguments.kwargs) -> Returned:
            return answer(self, check(self, *args, **kwargs))

        returns = inspect.signature(answer).return_annotation
        asked.__signature__ = inspect.signature(check).replace(  # type: ignore[attr-defined]
            return_annotation=returns
        )
        return asked

    return method


def _flatten(sources: Iterable[Any]) -> Iterator[Any]:
    for source in sources:
        if isinstance(source, (list, tuple)):
            yield from source
        else:
            yield source


def _policies(policies: Iterable[Policy]) -> tuple[Policy, ...]:
    """The policies that deny anything (search leaves out what they deny), each checked."""
    found = tuple(policies)
    for policy in found:
        if not isinstance(policy, Policy):
            raise InvalidQueryError(f"policies must be Policy objects, not {type(policy).__name__}")
    return tuple(policy for policy in found if policy.deny)


class Selection(Protocol):
    """A part of the catalog that is all there is for one caller (the MCP server's
    ``Scope``): ``get`` and ``short_names`` see nothing outside it. The catalog filters by
    ``tag_filter``, ``single_toolkit`` and ``search_policies`` in SQL; ``allows`` decides."""

    @property
    def tag_filter(self) -> TagFilter: ...

    @property
    def single_toolkit(self) -> str | None: ...

    @property
    def search_policies(self) -> tuple[Policy, ...]: ...

    @property
    def exact_in_search(self) -> bool:
        """Whether those filters leave out every tool ``allows`` refuses (then rows the SQL
        lets through need no ``allows``)."""
        ...

    def allows(self, tool: RegisteredTool) -> bool: ...


def unknown_toolkit(name: str, known: Iterable[str]) -> UnknownToolkitError:
    """The error for a toolkit name nobody registered, with close matches."""
    import difflib

    close = difflib.get_close_matches(name, builtins.list(known), n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return UnknownToolkitError(f"no toolkit named {name!r}.{hint}")


class _Unresolved(Exception):
    """A search's toolkit is not registered, not active or not that version: its error
    (``Catalog._filters``) is left to ``search`` to explain."""


class _CatalogLock:
    """The lock every use of the catalog's connection holds. A ``CatalogDamagedError``
    raised while it is held (by a reader that sees only rows) leaves it naming the file."""

    def __init__(self, path: str) -> None:
        self._lock = threading.RLock()
        self._path = path

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, kind: object, error: BaseException | None, _tb: object) -> None:
        self._lock.release()
        if isinstance(error, CatalogDamagedError) and not error.path:
            raise error.at(self._path) from error


class Catalog:
    """A catalog of tool definitions stored in one SQLite file.

    Args:
        path: The catalog file; created (with its parent folders) if missing, unless
            ``create`` is false. Defaults to ``$TOOLCAT_DB``, else
            ``~/.local/share/toolcat/catalog.db``.
        policy: Allow/deny rules and guards for calls. Tools its rules deny are also left
            out of list and search unless ``include_denied=True``.
        default_timeout: Seconds a call may run when neither the call nor the tool says.
        isolation: How tools run: ``"thread"`` (fast; at a timeout the caller's wait stops but
            a sync tool's work may go on, and a tool holding the GIL in one long C call holds
            the wait until that call returns), ``"process"`` (a worker subprocess that a timeout
            kills, so the work stops), or a mapping of toolkit names to either (``"*"`` for
            the rest). Tools of imported MCP servers always run in this process.
        max_result_bytes: Results larger than this (as JSON) are truncated, unless the tool
            sets its own ``max_result_bytes``.
        embedding_model: The embedding model: ``toolcat-tool-retriever-v1`` (packaged,
            offline, no torch), ``all-MiniLM-L6-v2`` (the base model), or a
            sentence-transformers model (name or folder). Default: the one the catalog was
            indexed with, else the packaged retriever. Asking for another than the catalog's
            vectors came from is an error until ``reindex(model=...)``.
        trust_any_module: Let Python implementations lie anywhere, the standard library
            included (``os:system``). By default every implementation must lie under its
            toolkit's ``module``, at registration and again at call time; and only
            ``register_mcp`` may register implementations that start a command
            (``mcp+stdio:``), and only ``register_mcp``/``register_openapi`` ones whose
            headers or env reference this process's environment (``${NAME}``), not
            manifests or ``Toolkit`` objects (refused at registration and at call time).
            See ``toolcat.policy.trust``.
        create: Create the file when it is missing (else that is a ``CatalogError``: how
            reading commands tell a mistyped path from an empty catalog).

    Raises:
        CatalogError: The file is not a toolcat catalog, comes from a newer toolcat, is
            damaged (``CatalogDamagedError``), or is missing and ``create`` is false.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        policy: Policy | None = None,
        default_timeout: float = 60.0,
        max_result_bytes: int = 1_000_000,
        embedding_model: str | None = None,
        isolation: Isolation = "thread",
        trust_any_module: bool = False,
        create: bool = True,
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.trust_any_module = trust_any_module
        self.policy = policy or Policy()
        self.default_timeout = check_timeout(default_timeout, "default_timeout")
        self.isolation = check_isolation(isolation)
        self.max_result_bytes = max_result_bytes
        self._runtime: Runtime | None = None
        self._resolved: dict[str, tuple[RegisteredTool, Any]] = {}
        self._resolved_revision = -1
        self._conn = connect(self.path, create=create)
        self._lock = _CatalogLock(str(self.path))
        self.embedding_model = embedding_model
        self._engine: SearchEngine | None = None
        # Open ``bulk()`` blocks: while any is, writes leave saving the search index to its end.
        self._bulk = 0
        self.index_error = ""  # why the search index was not saved after the last write
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
            except BaseException:
                rollback_quietly(self._conn)  # the read's own error, not "cannot commit"
                raise
            self._conn.execute("COMMIT")

    @property
    def _search(self) -> SearchEngine:
        """The search machinery (BM25 statistics, vectors), created on first use."""
        if self._engine is None:  # the lock only the first time, not at every access
            with self._lock:
                if self._engine is None:
                    from .search.engine import SearchEngine

                    self._engine = SearchEngine(self.embedding_model)
        return self._engine

    def share_indexes(self, other: Catalog) -> None:
        """Search with the in-memory BM25 index and vector matrix ``other`` keeps (both open
        the same file), and with its kept BM25 answers, built hit tools and shared names
        (``short_names``): a server's pooled readers hold one of each, built once per
        revision, not one each (at 1M tools ~700 MB of BM25 index and 1.5 GB of vectors
        apiece), and a request one reader answered is kept for all. Each is stamped with
        its revision, so no search is answered from another revision's."""
        mine, theirs = self._search, other._search
        mine.postings, mine.vectors = theirs.postings, theirs.vectors
        mine.answers, mine.built = theirs.answers, theirs.built
        mine.namesakes, mine.modes = theirs.namesakes, theirs.modes

    def forget_kept(self, revision: int | None = None) -> None:
        """Forget the kept search answers, built hit tools and shared names
        (``share_indexes`` shares them): the file was replaced by another copy. With the
        ``revision`` that copy is at (it replaced one found damaged), the vector matrix and
        BM25 index held too, and the BM25 index saved beside the file is unstamped: every
        one of them may have been made from the damaged copy."""
        self._search.forget_kept(revision)
        if revision is not None:
            from .search import lexical_file

            lexical_file.forget_saved(str(self.path))

    @property
    def replica_of(self) -> str | None:
        """The primary this catalog is a read-only replica of; None on a primary."""
        return getattr(self._conn, "replica_of", None)

    def _writable(self) -> None:
        """Refuse an admin verb on a replica before doing any of its work."""
        from .store.writer import refuse_on_replica

        refuse_on_replica(self._conn)

    @property
    def revision(self) -> int:
        """A counter bumped by every change to the catalog."""
        with self._lock:
            return reader.revision(self._conn)

    @contextlib.contextmanager
    def bulk(self, *, save_index: bool = True) -> Iterator[None]:
        """Save the search index once, when the block ends, instead of after each write.

        Every write (``register``, ``remove``, ``deprecate``, ``reindex``...) saves the BM25
        index beside the catalog at its new revision before it returns (from 1,000 tools
        on), so that a server started next answers at full speed from its first query; a
        full build, ~10 s of one core per 100k tools. Registering many toolkits one call at a
        time, do it inside ``with catalog.bulk():`` to build it once, at the end (even when
        the block raises: what was committed is indexed). Blocks may nest.

        Args:
            save_index: False leaves it to a later write, or to the first server, which
                builds it while answering from SQLite (``toolcat register --no-index``).
        """
        with self._lock:
            self._bulk += 1
        try:
            yield
        finally:
            with self._lock:
                self._bulk -= 1
                last = self._bulk == 0
            if last and save_index:
                self._save_index()

    def _changed(self) -> None:
        """After a write committed: save the search index at the new revision, unless a
        ``bulk()`` block saves it when it ends."""
        with self._lock:
            if self._bulk:
                return
        self._save_index()

    def _save_index(self) -> None:
        """Save the BM25 index at the catalog's revision (``lexical_index.save_current``);
        an index the search engine of this catalog then serves too. A failure leaves the
        catalog as written (the next server builds the index) and says so on stderr."""
        from .search.lexical_file import SAVED_FROM
        from .store.counts import index_totals

        with self._lock:
            indexed, _ = index_totals(self._conn)
        if indexed < SAVED_FROM:  # served without a saved index: nothing to import or read
            return
        from .search.bm25 import DEFAULT_WEIGHTS
        from .search.lexical_index import save_current

        try:
            built = save_current(str(self.path), DEFAULT_WEIGHTS, SAVED_FROM)
        except OSError as e:
            self.index_error = str(e)
            print(
                f"toolcat: warning: the catalog is written, but its search index was not saved "
                f"({e}); the first server to search it builds it, answering from SQLite "
                "meanwhile",
                file=sys.stderr,
            )
            return
        self.index_error = ""
        if built is not None and self._engine is not None:
            self._engine.postings.adopt(built)

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
            replace: Overwrite a registered version whose content differs, and let a
                toolkit change the kind of source it comes from.

        It returns with the search index saved at the new revision (see ``bulk()``).

        A toolkit keeps its kind of source: a manifest, Python code (a ``Toolkit`` object,
        ``--module``, plugins), an MCP server or an OpenAPI document. Registering it from
        another kind is a ``VersionConflictError`` (``SourceKindError``) unless ``replace``.

        Returns:
            One result per toolkit: ``added``, ``unchanged`` or ``replaced``.

        Raises:
            ManifestError: A manifest is malformed (the message names file, toolkit,
                tool and field), or carries an implementation that starts a command
                (``mcp+stdio:``) in a catalog not opened with ``trust_any_module``.
            VersionConflictError: A version is registered with other content, or the
                toolkit came from another kind of source, and ``replace`` is false.
        """
        self._writable()
        from .models import Toolkit
        from .registry.manifest import check_toolkit, manifest_paths
        from .registry.parallel import load_each
        from .store import writer
        from .store.rows import rows_of

        # Toolkits, manifest files (read while the first are written, on every core when
        # there are many) and the problems of sources, in the order given: every source's
        # problems are reported together, and nothing is written unless all are valid.
        items: builtins.list[Toolkit | Path | ManifestError] = []
        for source in _flatten(sources):
            if not isinstance(source, (Toolkit, str, os.PathLike)):
                raise TypeError(
                    "register() takes Toolkit objects, manifest paths or directories "
                    f"(or lists of them), not {type(source).__name__}"
                )
            try:
                if isinstance(source, Toolkit):
                    check_toolkit(source)
                    items.append(source)
                else:
                    items.extend(manifest_paths([source]))
            except ManifestError as e:
                items.append(e)
        loaded = load_each([item for item in items if isinstance(item, Path)])

        def entries() -> Iterator[writer.Entry | ManifestError]:
            for item in items:
                if isinstance(item, Path):
                    yield next(loaded)
                elif isinstance(item, ManifestError):
                    yield item
                else:
                    yield item.head(), None, rows_of(item)

        def check(toolkit: ToolkitHead, source: str | None) -> None:
            if not self.trust_any_module:
                from .remote.secrets import check_references

                check_import_roots([(toolkit, source)])
                check_references([(toolkit, source)])

        with self._lock, contextlib.closing(loaded):
            results = writer.register_stream(
                self._conn, entries(), replace=replace, check=check, checkpoint=False
            )
        if not results:
            raise ManifestError("nothing to register")
        # The log copied into the file beside the index's save, not before it
        with writer.checkpoint_beside(str(self.path)):
            self._changed()
        return results

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
        headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        on_change: str = "refuse",
        replace: bool = False,
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
            headers: HTTP headers sent to an ``http`` server (``{"Authorization": "Bearer
                ${GITHUB_TOKEN}"}``).
            env: Environment variables of a stdio server. It gets these and a few safe
                defaults (``PATH``, ``HOME``, ``LANG``...), never this process's whole
                environment.
            cwd: The working directory of a stdio server.
            on_change: When a tool's definition on the server no longer matches the
                registered one at its first call on a connection: ``refuse`` the call
                (``DefinitionChangedError``) or ``warn`` (logged) and call it.
            replace: Let this import take over a toolkit that came from elsewhere (a
                manifest, Python code, an OpenAPI document); refused otherwise.

        Values of ``headers``, ``env`` and ``cwd`` may reference environment variables as
        ``${NAME}``: the catalog stores the reference, never the secret, and the process that
        makes a call resolves it (a variable that is not set is an ``ImportFailedError``
        naming it).

        Returns:
            The registration, with ``changes`` listing added, changed and removed tools
            against the newest registered version.

        Raises:
            ImportFailedError: The server cannot be started, refuses the credentials, or
                does not answer in time; a referenced variable is not set.
            ManifestError: The server lists an invalid tool, or none.
            VersionConflictError: ``version`` is registered with other tools, or the
                toolkit came from elsewhere and ``replace`` is false.
            ToolcatError: Options that do not fit the transport (``headers`` for a stdio
                server, ``env``/``cwd`` for an HTTP one) or malformed names.
        """
        self._writable()
        from .registry.mcp import check_on_change, toolkit_from_mcp
        from .remote.credentials import references
        from .remote.mcp import forget, make_endpoint

        if cwd is not None:
            cwd = os.fspath(cwd)
            if not references(cwd):  # stored absolute: calls come from any directory
                cwd = str(Path(cwd).expanduser().resolve())
        endpoint = make_endpoint(
            "http" if http else "stdio",
            server,
            headers=dict(headers or {}),
            env=dict(env or {}),
            cwd=cwd,
        )
        newest = self._newest_version(toolkit)
        built = toolkit_from_mcp(
            endpoint,
            toolkit,
            version or newest or "1.0.0",
            description=description,
            tags=tags,
            defer_loading=defer_loading,
            timeout=timeout,
            on_change=check_on_change(on_change),
        )
        result = self._register_import(
            built, str(endpoint), "mcp", newest, pinned=version is not None, replace=replace
        )
        forget(endpoint)  # a session kept open from before serves the old tools
        return result

    def register_openapi(
        self,
        spec: str | os.PathLike[str] | dict[str, Any],
        *,
        toolkit: str,
        base_url: str | None = None,
        headers: dict[str, str] | None = None,
        include_tags: Iterable[str] = (),
        operations: Iterable[str] = (),
        version: str | None = None,
        description: str | None = None,
        tags: Iterable[str] = (),
        defer_loading: bool = True,
        timeout: float = 30.0,
        replace: bool = False,
    ) -> RegistrationResult:
        """Register the operations of an OpenAPI 3.0/3.1 document as a toolkit whose tools
        send HTTP requests to the API (one tool per operation; see README "Importing OpenAPI").

        Versions work as in ``register_mcp``: without ``version``, the newest registered one
        is kept when nothing changed, else the next is made (``1.0.0`` at first).

        Args:
            spec: A JSON or YAML file, an http(s) URL (fetched with httpx), or the parsed
                document.
            toolkit: The toolkit's name in this catalog.
            base_url: The API's URL (default: the document's first ``servers`` entry).
            headers: Sent with every call, e.g. ``{"Authorization": "Bearer ${API_TOKEN}"}``:
                ``${NAME}`` is stored as written and resolved from the environment of the
                process making the call.
            include_tags: Only operations carrying one of these tags.
            operations: Only these ``operationId``s.
            version: The version to register (default: see above).
            description: The toolkit's description (default: the document's title).
            tags: Tags for every tool (``openapi`` is always added).
            defer_loading: Whether the tools are deferred (found by search, not listed).
            timeout: Seconds each call may take (and to fetch a ``spec`` URL).
            replace: Let this import take over a toolkit that came from elsewhere (a
                manifest, Python code, an MCP server); refused otherwise.

        Returns:
            The registration, with ``changes`` against the newest registered version.

        Raises:
            ImportFailedError: The document cannot be read or fetched.
            ManifestError: The document is not OpenAPI 3.x, a ``$ref`` points to nothing, an
                operation has no ``operationId``, or a filter selects nothing (every
                problem of the document, one line each).
            VersionConflictError: ``version`` is registered with other tools, or the
                toolkit came from elsewhere and ``replace`` is false.
        """
        self._writable()
        from .registry.openapi import toolkit_from_openapi

        source = spec if isinstance(spec, dict) else os.fspath(spec)
        newest = self._newest_version(toolkit)
        built = toolkit_from_openapi(
            source,
            toolkit,
            version or newest or "1.0.0",
            base_url=base_url,
            headers=headers,
            include_tags=include_tags,
            operations=operations,
            description=description,
            tags=tags,
            defer_loading=defer_loading,
            timeout=timeout,
        )
        label = "(parsed)" if isinstance(source, dict) else repr(str(source))
        return self._register_import(
            built,
            f"OpenAPI document {label}",
            "openapi",
            newest,
            pinned=version is not None,
            replace=replace,
        )

    def _register_import(
        self,
        built: Toolkit,
        source: str,
        kind: str,
        newest: str | None,
        *,
        pinned: bool,
        replace: bool,
    ) -> RegistrationResult:
        """Register an imported toolkit as ``kind`` (``mcp``, ``openapi``: its ``${NAME}``
        references were typed by the admin, see ``toolcat.remote.secrets``): a changed one becomes
        the next version unless the version was given (``pinned``); ``changes`` compares
        with the newest registered.
        ``replace`` lets it take over a toolkit of another source kind, and overwrite a
        version only when that version was given."""
        from .store import writer

        old = (
            ()
            if newest is None
            else self.iter_tools(toolkit=f"{built.name}@{newest}", include_denied=True)
        )
        changes = tool_changes(built.tools, old)
        with self._lock:
            try:
                result = writer.register(
                    self._conn,
                    [(built, source)],
                    replace=replace and pinned,
                    change_kind=replace,
                    kind=kind,
                )[0]
            except VersionConflictError as e:
                if pinned or newest is None or isinstance(e, SourceKindError):
                    raise
                built = built.model_copy(update={"version": next_version(newest)})
                result = writer.register(
                    self._conn, [(built, source)], replace=False, change_kind=replace, kind=kind
                )[0]
        self._changed()
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
        from .store import writer

        name, version = _pinned(toolkit, version, "deprecate")
        with self._lock:
            revision = writer.deprecate(self._conn, name, version)
        self._changed()
        return revision

    def activate(self, toolkit: str, version: str | None = None) -> int:
        """Take back the deprecation of one version (``toolkit@version`` or ``version=``);
        returns the revision.

        The active version becomes the newest one not deprecated: this one, unless a newer
        version is in use (``versions()`` says which is active). Undoes ``deprecate``.

        Raises:
            UnknownToolkitError: No such toolkit or version, or no version given.
        """
        from .store import writer

        name, version = _pinned(toolkit, version, "activate")
        with self._lock:
            revision = writer.activate(self._conn, name, version)
        self._changed()
        return revision

    def remove(self, toolkit: str, version: str | None = None) -> int:
        """Remove one version of a toolkit (``toolkit@version``) or all of it; returns the
        number of versions removed."""
        from .store import writer

        name, pinned = parse_toolkit_ref(toolkit)
        with self._lock:
            removed, _revision = writer.remove(self._conn, name, version or pinned)
        self._changed()
        return removed

    def check_policy(self, policy: Policy | None = None) -> builtins.list[str]:
        """Check a policy's rules against the tools registered now (the catalog's own by
        default); see ``toolcat.policy.rules.check_rules``.

        Returns:
            One warning per rule that matches no tool today (it may match one registered
            later), naming the rule.

        Raises:
            PolicyError: A bare tool-name rule matches no tool but matches a tag or a
                toolkit (``destructive`` meant as ``tag:destructive``).
        """
        from .policy.rules import check_rules

        with self._snapshot() as conn:
            return check_rules(
                policy or self.policy,
                lambda rule: reader.rule_matches_a_tool(conn, rule),
                lambda rule: reader.rule_meant(conn, rule),
            )

    # -- reading --------------------------------------------------------------------------

    def _scope_filters(
        self, conn: sqlite3.Connection, scope: Scope, *, explain: bool = True
    ) -> Filters:
        """The filters of a search's ``scope`` (``SearchEngine.search`` asks in its snapshot;
        ``explain``: ``_filters``')."""
        return self._filters(
            conn,
            scope.tags,
            scope.toolkit,
            scope.include_deferred,
            scope.include_denied,
            scope.policies,
            explain=explain,
        )

    def _filters(
        self,
        conn: sqlite3.Connection,
        tags: TagFilter,
        toolkit: str | None,
        include_deferred: bool,
        include_denied: bool,
        policies: Iterable[Policy] = (),
        *,
        explain: bool = True,
    ) -> Filters:
        """Raises the toolkit's error (close matches, its versions); without ``explain``,
        ``_Unresolved`` instead, having read nothing more (``search_kept``: what every
        toolkit is called is a reader's to read, not the event loop's)."""
        own = () if include_denied or not self.policy.deny else (self.policy,)
        base = Filters(
            tags=tags,
            include_deferred=include_deferred,
            hide=(*own, *_policies(policies)),
        )
        if toolkit is None:
            return base
        name, version = parse_toolkit_ref(toolkit)
        rows = reader.toolkit_rows(conn, name)
        if not rows:
            if not explain:
                raise _Unresolved
            raise unknown_toolkit(name, reader.toolkit_names(conn))
        if version is None:
            if all(deprecated for *_, deprecated in rows):
                if not explain:
                    raise _Unresolved
                pins = ", ".join(
                    f"{name}@{v.version}"
                    for v in sort_versions(reader.toolkit_versions(conn, name))
                )
                raise DeprecatedToolkitError(
                    f"every version of toolkit {name!r} is deprecated; pin one: {pins}"
                )
            return dataclasses.replace(base, toolkit=name)
        from .store import writer

        for row_id, registered, _digest, _deprecated in rows:
            if writer.same_version(registered, version):
                return dataclasses.replace(base, toolkit_id=row_id)
        if not explain:
            raise _Unresolved
        known = ", ".join(v.version for v in sort_versions(reader.toolkit_versions(conn, name)))
        raise UnknownToolkitError(
            f"toolkit {name!r} has no version {version!r}; registered: {known}"
        )

    def _list_arguments(
        self,
        *,
        tags: Iterable[str] | TagFilter = (),
        any_tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = False,
        limit: int = DEFAULT_LIST_LIMIT,
        cursor: str | None = None,
        include_denied: bool = False,
    ) -> _Page:
        """The arguments of ``list`` and ``list_summaries`` (documented on ``list``), checked."""
        scope = Scope.of(tags, any_tags, exclude_tags, toolkit, include_deferred, include_denied)
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidQueryError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
        return _Page(scope, limit, decode_cursor(cursor) if cursor else None)

    @_arguments_of(_list_arguments)
    def list(self, page: _Page) -> ToolPage:
        """List mode: the active, non-deferred tools, ordered by toolkit then name.

        Args:
            tags: Only tools carrying every one of these tags (their own or their toolkit's),
                or a ``TagFilter``.
            any_tags: Only tools carrying at least one of these tags.
            exclude_tags: Only tools carrying none of these tags.
            toolkit: Only this toolkit (``name`` or a pinned ``name@version``).
            include_deferred: Include deferred tools too.
            limit: Page size, 1 to 1000.
            cursor: ``next_cursor`` from the previous page.
            include_denied: Include tools the catalog's policy denies.

        Returns:
            A page of tools with the catalog revision and the cursor of the next page
            (``None`` on the last page).
        """
        from .models import ToolPage

        tools, revision, next_cursor = self._list_rows(page, reader.row_to_tool)
        return ToolPage.model_construct(revision=revision, tools=tools, next_cursor=next_cursor)

    @_arguments_of(_list_arguments)
    def list_summaries(self, page: _Page) -> dict[str, Any]:
        """``list`` as plain data, the shape ``toolcat list --json`` prints:
        ``{"revision", "tools": [RegisteredTool.summary(), ...], "next_cursor"}``.

        Builds no models (pydantic is not even imported), so a one-shot process that only
        lists starts fast. Arguments and errors are those of ``list``.
        """
        summaries, revision, next_cursor = self._list_rows(page, reader.row_to_summary)
        return {"revision": revision, "tools": summaries, "next_cursor": next_cursor}

    def _list_rows(
        self, page: _Page, decode: Callable[[tuple[Any, ...]], Answer]
    ) -> tuple[builtins.list[Answer], int, str | None]:
        """(one page of rows, each decoded, revision, next cursor) for ``list`` and
        ``list_summaries``. Rows are decoded in the read, so a damaged one names the file."""
        with self._snapshot() as conn:
            filters = self._scope_filters(conn, page.scope)
            rows = reader.list_rows(conn, filters, page.after, page.limit + 1)
            revision = reader.revision(conn)
            next_cursor = None
            if len(rows) > page.limit:
                rows = rows[: page.limit]
                _id, name, toolkit_name, *_ = rows[-1]  # reader.TOOL_COLUMNS
                next_cursor = encode_cursor(toolkit_name, name)
            return [decode(row) for row in rows], revision, next_cursor

    def iter_tools(
        self,
        *,
        tags: Iterable[str] | TagFilter = (),
        any_tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = True,
        include_denied: bool = False,
    ) -> Iterator[RegisteredTool]:
        """Every tool ``list`` would return for these filters, deferred ones included by
        default, page after page (each page is one read)."""
        cursor: str | None = None
        tag_filter = TagFilter.of(tags, any_tags, exclude_tags)
        while True:
            page = self.list(
                tags=tag_filter,
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

    def _search_arguments(
        self,
        query: str,
        *,
        mode: str | None = None,
        k: int = 10,
        tags: Iterable[str] | TagFilter = (),
        any_tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
        toolkit: str | None = None,
        include_deferred: bool = True,
        include_denied: bool = False,
        policies: Iterable[Policy] = (),
        principal: str | None = None,
    ) -> _Query:
        """The arguments of ``search`` and ``search_summaries`` (documented on ``search``),
        checked (the mode is checked against the catalog when the search is planned)."""
        scope = Scope.of(
            tags, any_tags, exclude_tags, toolkit, include_deferred, include_denied, policies
        )
        if not 1 <= k <= MAX_LIMIT:
            raise InvalidQueryError(f"k must be between 1 and {MAX_LIMIT}, not {k}")
        check_text(query)
        return _Query(query, mode, k, scope, principal)

    @_arguments_of(_search_arguments)
    def search(self, query: _Query) -> SearchResult:
        """Search mode: rank every matching tool, deferred ones included.

        Any text is a valid query. A query that names a tool exactly (``name`` or
        ``toolkit.name``, any case) puts that tool first. An empty query is list mode.

        Args:
            query: What the agent is looking for, in its own words.
            mode: ``bm25``, ``embedding``, ``hybrid`` or ``regex``. Default: ``hybrid``
                when embeddings are installed and the catalog has vectors, else ``bm25``.
            k: How many hits to return, 1 to 1000.
            tags: Only tools carrying every one of these tags (or a ``TagFilter``).
            any_tags: Only tools carrying at least one of these tags.
            exclude_tags: Only tools carrying none of these tags.
            toolkit: Only this toolkit (``name`` or ``name@version``).
            include_deferred: Include deferred tools (the default).
            include_denied: Include tools the catalog's policy denies.
            policies: Leave out the tools any of these policies' allow/deny rules deny too
                (whatever ``include_denied`` says), before ranking: a server ranks within
                each caller's scope, not only among the catalog's first hits.
            principal: A server caller whose own recorded uses (``record_uses(...,
                principal=)``) reorder its hits, each tool by at most
                ``search.learned.LEARNED_LIFT`` places (scores stay the ranking's). No
                other caller's uses are applied; the catalog's own are in the index.

        Returns:
            Hits best first, with higher-is-better scores, and the catalog revision.
        """
        return self._searched(query, self._search.result, lambda r: [h.tool.id for h in r.hits])

    @_arguments_of(_search_arguments)
    def search_kept(self, query: _Query) -> SearchResult | None:
        """``search``'s answer when it costs no ranking and no tool read, else None (ask
        ``search``; nothing was ranked, read or built).

        That is a BM25 request this catalog ranked before at its current revision, with the
        same ``k`` and scope, whose tools it still holds built: a server answers such a
        repeat on its event loop instead of a worker thread. Arguments, errors, the
        principal's reordering and the hits remembered for learning are ``search``'s, but
        for a toolkit that is not registered, active or that version: None (``search``
        raises its error, whose close matches read every toolkit's name).
        """
        engine = self._search
        try:
            result = engine.kept(
                self._snapshot,
                functools.partial(self._scope_filters, explain=False),
                engine.result,
                query.text,
                query.mode,
                query.k,
                query.scope,
                query.principal,
            )
        except _Unresolved:  # search raises the toolkit's error, with its close matches
            return None
        if result is not None:
            self.searched(query.text, [h.tool.id for h in result.hits])
        return result

    @_arguments_of(_search_arguments)
    def search_summaries(self, query: _Query) -> dict[str, Any]:
        """``search`` as plain data: ``{"revision", "query", "mode", "hits": [{"rank",
        "score", "match", "tool": RegisteredTool.summary()}, ...], "warnings", "no_match"}``.

        Builds no models (pydantic is not even imported), so a one-shot process that
        searches starts faster (``toolcat search``). Arguments and errors are those of
        ``search``.
        """
        return self._searched(
            query, self._search.summaries, lambda r: [h["tool"]["id"] for h in r["hits"]]
        )

    def _searched(
        self,
        query: _Query,
        answer: Callable[[sqlite3.Connection, Ranking], Answer],
        hit_ids: Callable[[Answer], Iterable[str]],
    ) -> Answer:
        """A search answered by ``answer`` (``search``'s models or ``search_summaries``'
        plain data): the query ranked, and its hits remembered for learning from use
        (``hit_ids``; not for a regex pattern or an empty query)."""
        with self._lock:
            plan = self._search.plan(self._conn, query.mode)
        result = self._search.search(
            self._snapshot,
            self._scope_filters,
            answer,
            query.text,
            plan,
            query.k,
            query.scope,
            query.principal,
        )
        if plan[0] != "regex" and query.text.strip():
            self.searched(query.text, hit_ids(result))
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

    def record_use(self, query: str, tool: str, *, principal: str = "") -> bool:
        """Record that ``query`` was answered by ``tool`` (an address). Returns False when
        learning from use is off or the query is empty.

        Args:
            query: The request.
            tool: The tool's address.
            principal: Whose use it is. ``""`` (the default) is the catalog's own caller
                (this API, the CLI): the next reindex adds the query to the tool's search
                documents, for everyone. Any other name (a server's caller) keeps the use
                to that principal's own searches (``search(..., principal=)``).

        Raises:
            UnknownToolError: No such tool.
        """
        return self.record_uses([(query, tool)], principal=principal) > 0

    def record_uses(self, uses: Iterable[tuple[str, str]], *, principal: str = "") -> int:
        """``record_use`` for many (query, tool address) pairs in one transaction, in order
        (the last is the newest). A compound request ("do X. Then do Y") is recorded as the
        part of it that names the tool best (``toolcat.search.learned``). Every address is
        checked before anything is written; empty queries are skipped. Returns how many
        were recorded (0 when learning is off).

        Raises:
            UnknownToolError: No such tool (nothing is recorded).
        """
        from .search import learned
        from .store import writer

        if self.replica_of is not None:  # uses are learned on the primary, not per replica
            return 0
        resolved: dict[str, RegisteredTool] = {}
        pairs = []
        for query, tool in uses:
            if tool not in resolved:
                resolved[tool] = self.get(tool)
            text = query.strip()[:MAX_LEARNED_CHARS]
            if text:
                pairs.append((text, resolved[tool]))
        if not pairs:
            return 0
        with self._snapshot() as conn:
            answered, rewrite = learned.answered_by(
                conn, [(text, t.id) for text, t in pairs], principal
            )
        earlier = []
        for toolkit, name, query in rewrite:
            with contextlib.suppress(ToolcatError):  # a tool removed since keeps the whole
                earlier.append((query, self.get(f"{toolkit}.{name}")))
        with self._snapshot() as conn:
            rows = learned.lessons(conn, [*earlier, *pairs], answered)
        kept = {(t.toolkit, t.name) for _, t in earlier}
        forget = [(t, n, q) for t, n, q in rewrite if (t, n) in kept]
        with self._lock:
            recorded = writer.record_uses(
                self._conn, rows, LEARNED_PER_TOOL, forget=forget, principal=principal
            )
        return recorded - len(earlier) if recorded else 0

    def usage(
        self, toolkit: str | None = None, *, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Recorded uses, newest first: ``{"tool", "query", "recorded_at", "principal"}``
        (``principal`` None for the catalog's own caller); at most ``limit`` of them."""
        with self._snapshot() as conn:
            rows = conn.execute(
                "SELECT toolkit, name, query, recorded_at, principal FROM usage "
                + ("WHERE toolkit = ? " if toolkit else "")
                + "ORDER BY id DESC"
                + (" LIMIT ?" if limit is not None else ""),
                ((toolkit,) if toolkit else ()) + ((limit,) if limit is not None else ()),
            ).fetchall()
        return [
            {"tool": f"{t}.{n}", "query": q, "recorded_at": at, "principal": p or None}
            for t, n, q, at, p in rows
        ]

    def clear_usage(self, toolkit: str | None = None) -> int:
        """Forget recorded uses (of one toolkit, or all); returns how many. Run reindex to
        take them out of the search documents."""
        from .store import writer

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
        from .store import writer

        with self._lock:
            writer.set_learning(self._conn, enabled)
        self._changed()

    def get(self, address: str, *, within: Selection | None = None) -> RegisteredTool:
        """The tool at ``address``: ``name``, ``toolkit.name``, or either with ``@version``.

        Args:
            address: The tool's address.
            within: Resolve inside this selection only (and the catalog's own policy): a
                tool outside it does not exist, so it is neither found nor suggested nor
                named among ambiguous or deprecated alternatives, and a bare name is
                ambiguous only within it. An out-of-selection address gets exactly the
                error an unregistered one gets.

        Raises:
            UnknownToolError: No such tool (close matches are suggested).
            AmbiguousNameError: A bare name matches tools in several toolkits.
        """
        toolkit, name, version = parse_address(address)
        admits = self._admits(within)
        with self._snapshot() as conn:
            found = reader.find_tools(conn, name, toolkit=toolkit, active_only=version is None)
            if version is not None:
                from .store import writer

                found = [(i, t) for i, t in found if writer.same_version(t.version, version)]
            found = [(i, t) for i, t in found if admits(t)]
            if not found and version is None:
                inactive = reader.find_tools(conn, name, toolkit=toolkit, active_only=False)
                inactive = [(i, t) for i, t in inactive if admits(t)]
                if inactive:
                    raise DeprecatedToolError(address, [f"{t.id}@{t.version}" for _, t in inactive])
            if not found:
                try:
                    filters = None if within is None else self._selection_filters(conn, within)
                except UnknownToolkitError:  # a selection of a toolkit nobody registered:
                    raise UnknownToolError(address) from None  # nothing in it to suggest
                raise UnknownToolError(
                    address, self._search.suggest(conn, name, filters=filters, admits=admits)
                )
        if len(found) > 1:
            raise AmbiguousNameError(address, [t.id for _, t in found])
        return found[0][1]

    def _admits(self, within: Selection | None) -> Callable[[RegisteredTool], bool]:
        """Whether a tool is inside ``within`` and the catalog's policy (all tools: None)."""
        if within is None:
            return lambda _tool: True
        policy = self.policy
        return lambda tool: within.allows(tool) and policy.denying_rule(tool) is None

    def _selection_filters(
        self, conn: sqlite3.Connection, within: Selection, *, explain: bool = True
    ) -> Filters:
        return self._filters(
            conn,
            within.tag_filter,
            within.single_toolkit,
            True,
            False,
            within.search_policies,
            explain=explain,
        )

    def short_names(
        self, tools: Iterable[RegisteredTool], *, within: Selection | None = None
    ) -> dict[str, str]:
        """Tool id → the shortest address that names the tool among active tools (those
        ``within`` a selection, when given): the bare name, or ``toolkit.name`` where
        another active toolkit has a tool of that name."""
        tools = builtins.list(tools)
        with self._snapshot() as conn:
            names = sorted({t.name for t in tools})
            if within is None:
                shared = reader.shared_names(conn, names)
            elif within.exact_in_search:
                # The SQL alone when it is exact: a name's first two rows, not each row of
                # it built as a tool and checked (MCP search_tools asks on every search);
                # kept for the revision (``short_names_kept``).
                filters = self._selection_filters(conn, within)
                shared = self._namesakes(conn, names, filters) or set()  # read: never None
            else:
                shared = reader.shared_names(
                    conn, names, self._selection_filters(conn, within), self._admits(within)
                )
        return {t.id: t.id if t.name in shared else t.name for t in tools}

    def short_names_kept(
        self, tools: Iterable[RegisteredTool], *, within: Selection
    ) -> dict[str, str] | None:
        """``short_names`` when it reads no tool row: ``within`` is exact
        (``exact_in_search``) and whether each name is shared within it was found at the
        current revision before; else None. A server asks this on its event loop: a name
        that thousands of tools outside ``within`` share costs a scan of them all."""
        if not within.exact_in_search:
            return None
        tools = builtins.list(tools)
        with self._snapshot() as conn:
            try:
                filters = self._selection_filters(conn, within, explain=False)
            except _Unresolved:
                return None
            shared = self._namesakes(conn, sorted({t.name for t in tools}), filters, read=False)
        if shared is None:
            return None
        return {t.id: t.id if t.name in shared else t.name for t in tools}

    def _namesakes(
        self,
        conn: sqlite3.Connection,
        names: builtins.list[str],
        filters: Filters,
        *,
        read: bool = True,
    ) -> set[str] | None:
        """Which of ``names`` more than one tool ``filters`` let through has
        (``reader.shared_names``), kept per revision; without ``read``, None when one is not
        kept yet."""
        revision, key, kept = reader.revision(conn), filters.key, self._search.namesakes
        known = kept.found(revision, [(key, name) for name in names])
        missing = [name for name in names if (key, name) not in known]
        if missing:
            if not read:
                return None
            found = reader.shared_names(conn, missing, filters)
            fresh = {(key, name): name in found for name in missing}
            kept.keep(revision, fresh)
            known.update(fresh)
        return {name for (_, name), shared in known.items() if shared}

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
            argument rewriting). For ``openai-responses``, deferred tools are grouped by
            toolkit into namespaces; ``search_tool()`` and ``tool_search_output(hits,
            call_id)`` (or, for ``anthropic``, ``search_tool()`` and ``tool_references``)
            let a client answer the provider's tool search from the catalog.

        Raises:
            InvalidQueryError: Unknown format.
            UnknownToolError: An address names no tool.
        """
        from .export.providers import export_tools, registered_tools, tool_items

        items = [tools] if isinstance(tools, str) else tool_items(tools)
        found = registered_tools([self.get(t) if isinstance(t, str) else t for t in items])
        descriptions = (
            {t.toolkit: t.description for t in self.toolkits()}
            if format == "openai-responses"
            else None
        )
        return export_tools(found, format, self.short_names(found), descriptions)

    def versions(self, toolkit: str) -> builtins.list[ToolkitVersion]:
        """Every registered version of ``toolkit``, oldest first (PEP 440 order)."""
        name, _ = parse_toolkit_ref(toolkit)
        with self._lock:
            found = reader.toolkit_versions(self._conn, name)
        if not found:
            with self._lock:
                raise unknown_toolkit(name, reader.toolkit_names(self._conn))
        return sort_versions(found)

    def toolkits(
        self, *, after: str | None = None, limit: int | None = None
    ) -> builtins.list[ToolkitVersion]:
        """The active version of every toolkit, by name; with ``after`` and ``limit``, the
        first ``limit`` toolkits named after ``after`` (a page: what it costs does not grow
        with the catalog)."""
        with self._lock:
            return reader.toolkit_versions(self._conn, after=after, limit=limit)

    # -- calling --------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """The call machinery (worker threads, validators), created on first use."""
        with self._lock:
            if self._runtime is None:
                from .remote.forwarding import install
                from .runtime.call import Runtime  # asyncio and workers: only when calling

                install()  # tools of MCP servers and HTTP APIs reach the runtime through it
                self._runtime = Runtime(
                    self.policy,
                    default_timeout=self.default_timeout,
                    isolation=self.isolation,
                    max_result_bytes=self.max_result_bytes,
                    trust_any_module=self.trust_any_module,
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
            ToolDeniedError: The policy's rules deny the tool (the version the address names).
            ImportFailedError: The implementation cannot be imported or called.
        """
        return self.runtime.load(self._resolve(address)[0])

    def call(
        self,
        address: str | RegisteredTool,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_event: Callable[[ToolEvent], Any] | None = None,
    ) -> ToolResult:
        """Call a tool by name; never raises for the tool's or the caller's mistakes.

        The path: resolve the address once (the active version, or a pinned ``@version``) →
        policy rules, judged on that version → validate ``arguments`` against its JSON
        Schema, filling defaults → run it (see ``isolation``) within the timeout → make the
        result JSON and truncate it if too large.

        Args:
            address: ``name``, ``toolkit.name``, either with ``@version``, or a
                ``RegisteredTool`` already resolved (``get``).
            arguments: The tool's arguments as a JSON object.
            timeout: Seconds to wait (above 0); default the tool's ``timeout``, else the
                catalog's.
            on_event: Called with each ``ToolEvent`` the tool reports while it runs
                (``toolcat.report_progress``), from the thread running or waiting on it.

        Returns:
            A ``ToolResult``: ``success`` and ``data``, or ``error`` and ``error_code``
            (``UNKNOWN_TOOL``, ``INVALID_ARGUMENTS``, ``TOOL_DENIED``, ``IMPORT_FAILED``,
            ``TOOL_ERROR``, ``TIMEOUT``), and the ``events`` reported.
        """
        started = time.perf_counter()
        try:
            if timeout is not None:
                check_timeout(timeout)
            from .models import RegisteredTool

            if isinstance(address, RegisteredTool):
                tool, validator = address, self.runtime.validator(address)
            else:
                tool, validator = self._resolve(address)
        except Exception as e:
            from .runtime.call import error_result

            return error_result(e, started)
        result = self.runtime.call(
            tool,
            arguments,
            timeout=timeout,
            validator=validator,
            started=started,
            on_event=on_event,
        )
        if result.success and self._recent_hits:
            with contextlib.suppress(Exception):  # learning must never fail a call
                self.used(tool.id)
        return result

    async def acall(
        self,
        address: str | RegisteredTool,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_event: Callable[[ToolEvent], Any] | None = None,
    ) -> ToolResult:
        """``call`` for async code: runs the call on the runtime's own threads (never the
        event loop's small default executor), without blocking the loop. ``on_event`` is
        called on this event loop, in order; it may be a coroutine function, and every
        event is delivered before this returns (runtime/delivery.py)."""
        import asyncio

        from .models import RegisteredTool
        from .runtime.call import on_thread

        async def run(forward: Callable[[ToolEvent], Any] | None) -> ToolResult:
            threads = self.runtime.executor.threads
            if not isinstance(address, RegisteredTool):  # resolved on a thread: it reads
                return await on_thread(
                    threads,
                    time.perf_counter(),
                    self.call,
                    address,
                    arguments,
                    timeout=timeout,
                    on_event=forward,
                )
            result = await self.runtime.acall(address, arguments, timeout=timeout, on_event=forward)
            if result.success and self._recent_hits:  # ``used`` writes: not on the loop
                with contextlib.suppress(Exception):  # learning must never fail a call
                    await asyncio.wrap_future(threads.submit(self.used, address.id))
            return result

        if on_event is None:
            return await run(None)
        from .runtime.delivery import Delivery

        async with Delivery(on_event) as forward:
            return await run(forward)

    def check(self, toolkit: str | None = None) -> builtins.list[dict[str, Any]]:
        """Check every active tool's implementation (of one toolkit, or all).

        Python implementations are imported in a child process and their signatures checked
        against the schemas. Tools imported from MCP servers are checked against the server:
        it is contacted and what it lists now is compared with what was registered (tools
        changed or removed there fail; tools added there are reported with ``"added"``).

        Returns:
            ``{"id", "ok", "problems"}`` per tool; for imported toolkits also ``"change"``
            (``"changed"``, ``"removed"`` or ``"added"``) where the server moved.
        """
        import subprocess
        import sys

        tools = builtins.list(
            self.iter_tools(toolkit=toolkit, include_deferred=True, include_denied=True)
        )
        remote = [t for t in tools if (t.implementation or "").startswith("mcp+")]
        local = [t for t in tools if not (t.implementation or "").startswith("mcp+")]
        entries = [
            {
                "id": t.id,
                "implementation": t.implementation,
                "parameters": t.parameters,
                "module": t.module,
                "trusted": self.trust_any_module,
            }
            for t in local
        ]
        result: builtins.list[dict[str, Any]] = []
        if entries:
            from .definitions.importpath import child_environment

            child = subprocess.run(
                [sys.executable, "-m", "toolcat.runtime.check"],
                env=child_environment(os.environ),
                input=json.dumps(entries),
                capture_output=True,
                text=True,
                check=False,
            )
            if child.returncode != 0:
                raise CatalogError(f"the check process failed: {child.stderr.strip()[-2000:]}")
            result = json.loads(child.stdout)
        if remote:
            from .registry.mcp import check_remote

            result += check_remote(remote, trusted=self.trust_any_module)
        order = {t.id: i for i, t in enumerate(tools)}
        result.sort(key=lambda r: (order.get(r["id"], len(order)), r["id"]))
        return result

    # -- indexing ------------------------------------------------------------------------

    def reindex(
        self,
        *,
        model: str | None = None,
        batch_size: int = 64,
        full: bool = False,
        progress: Callable[[int, int], None] | None = None,
        stage: Callable[[str], None] | None = None,
    ) -> ReindexReport:
        """Bring the search indexes up to date, embedding only what changed.

        Embeds active tools whose definition has no vector for the model (in batches, each
        committed, so an interrupted reindex keeps its work and the next run resumes), then
        deletes vectors of other models and of definitions no tool has. ``full`` rebuilds
        the FTS5 index and re-embeds everything. Nothing is loaded when nothing is stale.
        Vectors made by another export of the model (or of unknown origin) are stale.

        Args:
            model: Switch the catalog to this model: ``toolcat-tool-retriever-v1`` (the
                default, packaged), ``all-MiniLM-L6-v2`` (the base model), or another
                sentence-transformers model (name or folder; needs ``toolcat[train]``).
            batch_size: Texts per ``encode`` call and per commit.
            full: Rebuild everything from the stored definitions.
            progress: Called with (done, total) after each batch.
            stage: Called with a line saying what is being done before embedding starts
                (exporting the model to ONNX, once per model and machine).
        """
        from .search import reindex as reindexing

        self._writable()
        try:
            report = reindexing.reindex(
                self._conn,
                self._lock,
                self._search,
                model=model,
                batch_size=batch_size,
                full=full,
                progress=progress,
                stage=stage,
            )
        except ToolcatError:  # a failed reindex keeps the batches it committed
            self._changed()
            raise
        self._changed()
        return report

    def warm(self, mode: str | None = None) -> None:
        """Get ready to answer searches in ``mode`` (default: the best this catalog has) at
        settled speed (a server, before it answers): the vector matrix read when the mode
        uses one, then the BM25 index loaded from the one the last write saved beside the
        catalog (or built: in the background from 1,000 tools, when nothing was saved at
        this revision). A process that only asks a question or two need not call it.

        Raises:
            InvalidQueryError: ``mode`` is not a search mode.
        """
        mode = self._search.checked_mode(mode)
        try:  # a read of its own: a damaged file's error ends the transaction it is in
            with self._snapshot() as conn:
                self._search.warm_vectors(conn, reader.revision(conn), mode)
        except ToolcatError as e:  # damaged vectors, a model that differs: searches say so
            import logging  # not on a plain list's path

            logging.getLogger(__name__).warning("catalog %s: reading the vectors: %s", self.path, e)
        with self._snapshot() as conn:
            self._search.warm_bm25(conn, reader.revision(conn))

    def export_query_encoder(self) -> bool:
        """Make this host's ONNX export of the catalog's embedding model when it has none
        (what ``reindex`` does first), writing nothing: for a replica, whose catalog
        arrives indexed. Returns whether an export was made (needs the embeddings extra)."""
        from .search import reindex as reindexing

        with self._snapshot() as conn:
            return reindexing.export_query_encoder(conn)

    def tool_states(self) -> dict[str, int]:
        """How many tools are ``active`` (listed), ``deferred`` (found by search) and
        ``deprecated`` (of deprecated versions); a scan of every tool."""
        from .store.counts import tool_states

        with self._snapshot() as conn:
            return tool_states(conn)

    def status(self) -> dict[str, Any]:
        """Index coverage per mode, the embedding model, the revision; on a replica also
        ``replica``: its primary, the primary's revision, the lag and how stale it is
        (``toolcat.store.replica.health``)."""
        with self._snapshot() as conn:
            from .search import reindex as reindexing

            info = {"path": str(self.path), **reindexing.status(conn, self._search)}
        if self.replica_of is not None:
            from .store import replica

            info["replica"] = replica.health(replica.read_state(self.path))
        return info

    def save_eval_result(self, result: EvalResult) -> None:
        """Keep ``result`` as the catalog's last ``toolcat eval`` (``--save``), which the web
        console's quality page shows. Not a change to the tools: the revision stays.

        Raises:
            CatalogError: The result is over ``MAX_EVAL_BYTES`` as JSON.
            ReadOnlyReplicaError: This is a replica: save on the primary.
        """
        from .store import evaluations

        with self._lock:
            evaluations.save(self._conn, result)

    def eval_result(self) -> EvalResult | None:
        """The last saved ``toolcat eval`` result; None when none was saved.

        Raises:
            CatalogDamagedError: The stored result is not one toolcat wrote.
        """
        from .store import evaluations

        with self._snapshot() as conn:
            return evaluations.load(conn)


def _pinned(toolkit: str, version: str | None, verb: str) -> tuple[str, str]:
    """(name, version) of ``toolkit@version`` or ``version=``, for verbs that need one.

    Raises:
        UnknownToolkitError: No version given.
    """
    name, pinned = parse_toolkit_ref(toolkit)
    version = version or pinned
    if version is None:
        raise UnknownToolkitError(f"{verb} needs a version: toolkit@version")
    return name, version
