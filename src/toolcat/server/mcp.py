"""The catalog as an MCP server (the official SDK 2.x low-level ``Server``), both eras at once.

``tools/list`` is list mode (the always-on tools in the caller's scope, in catalog order,
paginated) plus two tools of the server's own: ``search_tools``, which returns matching tools
(deferred ones included) with their input schemas, and ``call_tool``, which calls any tool in
scope by name.

- **2026-07-28** (stateless): the list is the same for every request with the same identity
  and carries cache hints (``ttlMs``; ``cacheScope`` ``private`` when the list depends on the
  caller's token). Searches never change it: clients call found tools through ``call_tool``.
  When the catalog changes, ``subscriptions/listen`` streams get ``tools/list_changed``.
- **2025-11-25** (sessions): tools a search returned are added to that session's list and the
  client is sent ``notifications/tools/list_changed``, as are catalog changes.

Every call path (a tool's name, ``call_tool``, a pinned ``toolkit.name@version``) checks the
caller's ``Scope`` first and then goes through ``Catalog.call`` on a worker thread (policy,
validation, timeouts, lazy import), so a slow tool never holds up other requests. A failure
is a ``CallToolResult`` with ``is_error`` whose text starts with the error code.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import json
import logging
import queue
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import mcp.types as types
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from ..errors import CatalogDamagedError, DeprecatedToolkitError, ToolcatError, UnknownToolkitError
from ..export.providers import mcp_tool, object_schema
from ..models import RegisteredTool, SearchHit, SearchResult, ToolResult
from ..policy.rules import Policy
from ..policy.tags import TagFilter
from ..runtime.call import error_result
from ..runtime.threads import ThreadRunner
from .access import AccessLog
from .events import ArtifactLinks, forward_events
from .listcache import ListCache
from .scope import Scope
from .telemetry import Telemetry, noted
from .usage import Gaps, RecentSearches
from .watcher import RevisionWatcher

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..store.replica import Follower
    from .tokens import Principal

logger = logging.getLogger(__name__)

SEARCH_TOOL = "search_tools"
CALL_TOOL = "call_tool"
OWN_TOOLS = (SEARCH_TOOL, CALL_TOOL)
MAX_SEARCH_K = 50
MAX_REVEALED = 200  # tools a legacy session's searches add to its list; the oldest drop out
MAX_ARGUMENT_BYTES = 1_000_000
LIST_READ = 200  # tools read from the catalog at a time to build tools/list pages
LIST_TTL_MS = 5_000  # how long a 2026 client may reuse tools/list; listen streams say sooner
TAG_ARGUMENTS = ("tags", "any_tags", "exclude_tags")  # search_tools' TagFilter.of, in order
PRINCIPAL_KEY = "toolcat.principal"  # where the HTTP token check leaves the caller's principal
# Whether the HTTP request being handled carries any ``Mcp-Param-*`` header (server/http.py
# sets it for each request); see ``CatalogServer._input_schema``.
PARAM_HEADERS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "toolcat_param_headers", default=True
)
REVEALED_KEY = "toolcat.revealed"  # a legacy connection's found tools, in its Connection.state
ANONYMOUS = "anonymous"  # whose uses a caller without a principal records (learning from use)

SEARCH_TOOL_SPEC = types.Tool(
    name=SEARCH_TOOL,
    description=(
        "Search the tool catalog, including tools not in your tool list. Returns the best "
        "matching tools with their input schemas; call one with call_tool. Each tool's "
        "'match' says how well it fits (strong, weak, none); 'no_match' true means nothing "
        "fits: ask the user or search differently rather than call one of these."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What you want to do, in words."},
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_K,
                "default": 5,
                "description": "How many tools to return.",
            },
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only tools with all of these tags.",
            },
            "any_tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only tools with at least one of these tags.",
            },
            "exclude_tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only tools with none of these tags.",
            },
        },
        "required": ["query"],
    },
    annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    _meta={"anthropic/alwaysLoad": True},
)
CALL_TOOL_SPEC = types.Tool(
    name=CALL_TOOL,
    description=(
        "Call any tool of the catalog by name (as search_tools returned it) with its arguments."
    ),
    input_schema={
        "type": "object",
        "properties": {
            # x-mcp-header: gateways see which tool is called (Mcp-Param-Tool) without
            # parsing the body (2026-07-28 streamable HTTP).
            "name": {"type": "string", "description": "The tool's name.", "x-mcp-header": "Tool"},
            "arguments": {
                "type": "object",
                "description": "The tool's arguments, as its input schema describes.",
            },
        },
        "required": ["name"],
    },
    _meta={"anthropic/alwaysLoad": True},
)


@dataclass
class ServeOptions:
    """How ``toolcat serve`` behaves.

    Attributes:
        tags: List mode, search and calls only reach tools with all of these tags,
        any_tags: at least one of these tags,
        exclude_tags: and none of these tags.
        toolkit: List mode, search and calls only reach this toolkit (``name[@version]``).
        page_size: Tools per ``tools/list`` page.
        refuse_unsearched: Refuse calls of deferred tools not found by search first: on
            legacy sessions, tools no search of the session returned; on 2026 connections
            (no session to remember searches), direct calls of tools not in ``tools/list``
            (``call_tool`` is the way after a search).
        search_mode: The search mode of ``search_tools`` (default: the best available).
        plain: Serve as an ordinary MCP server: every selected tool in ``tools/list``,
            deferred ones included, and no ``search_tools``/``call_tool``.
        policy: Allow/deny rules of this server, on top of the catalog's.
        watch_interval: Seconds between two reads of the catalog's revision.
        readers: Catalog connections that serve reads and searches side by side.
        per_caller: The list depends on who asks (a tokens file): ``cacheScope: private``.
        access_log: A line per request on stderr (server/access.py).
        settle_heap: The process is this server's own (``toolcat serve``): what it built
            to serve a revision is put out of the garbage collector's reach once warm
            (``settle_heap``), and collected with the rest when a new revision is prepared.
        yield_to_loop: The process is this server's own: the threads that run its calls and
            searches run under Linux's ``SCHED_BATCH`` (``runtime.threads.yield_to_loop``),
            so waking one does not take the event loop's core from it.
    """

    tags: tuple[str, ...] = ()
    any_tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    toolkit: str | None = None
    page_size: int = 100
    refuse_unsearched: bool = False
    search_mode: str | None = None
    plain: bool = False
    policy: Policy = field(default_factory=Policy)
    watch_interval: float = 1.0
    readers: int = 4
    per_caller: bool = False
    access_log: bool = False
    settle_heap: bool = False
    yield_to_loop: bool = False


T = TypeVar("T")
# A search as search_tools shows it: the answer, its hits within the scope, their names.
Searched = tuple[SearchResult, list[SearchHit], dict[str, str]]


class Readers:
    """A few catalogs on the same file, so slow searches do not queue behind each other
    on one SQLite connection. A read runs on the readers' own threads (``run``); only a
    kept answer's few indexed reads run on the event loop (``now``)."""

    def __init__(
        self,
        catalog: Catalog,
        size: int,
        *,
        yield_to_loop: bool = False,
        search_mode: str | None = None,
    ) -> None:
        self._catalog = catalog
        self._search_mode = search_mode  # what renew warms them for
        self._size = max(1, size)
        self._free: queue.SimpleQueue[Catalog] = queue.SimpleQueue()
        self._opened: list[Catalog] = []
        # Threads of their own, one a reader at most (a request waits for a free one): not
        # anyio's, which the loop hands other work next (the watcher, the SDK's stdio), so
        # that these may yield to the loop for good (``yield_to_loop``).
        self._threads = ThreadRunner(max_threads=self._size, name="toolcat-reader")
        self._threads.yields_to_loop = yield_to_loop
        self._guard = threading.Lock()
        self._generation = 0  # bumped by renew: readers of older ones are retired
        self._current: set[int] = set()  # ids of the readers of this generation
        self._closed = False
        self.on_damaged: Callable[[], object] | None = None  # a replica checks its copy then

    def _open(self) -> Catalog:
        from ..catalog import Catalog

        c = self._catalog
        opened = Catalog(  # opened as the server's catalog was
            c.path,
            policy=c.policy,
            default_timeout=c.default_timeout,
            embedding_model=c.embedding_model,
            trust_any_module=c.trust_any_module,
        )
        opened.share_indexes(c)
        return opened

    def _take(self) -> Catalog:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            with self._guard:
                generation = self._generation
            opened = self._open()
            with self._guard:
                self._opened.append(opened)
                # Else a renew or close came meanwhile: retired when its read is done.
                if generation == self._generation and not self._closed:
                    self._current.add(id(opened))
            return opened

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[Catalog]:
        """A reader for the calling thread; given back (or retired, when a renew came
        meanwhile and it reads a replaced file) afterwards."""
        with self._lent(self._take()) as reader:
            yield reader

    @contextlib.contextmanager
    def _lent(self, reader: Catalog) -> Iterator[Catalog]:
        try:
            yield reader
        finally:
            with self._guard:
                current = id(reader) in self._current
                if current:
                    self._free.put(reader)
            if not current:
                self._retire(reader)

    def _read(self, reader: Catalog, fn: Callable[[Catalog], T]) -> T:
        with self._lent(reader):
            try:
                return fn(reader)
            except CatalogDamagedError:
                if self.on_damaged is not None:
                    self.on_damaged()
                raise

    async def run(self, fn: Callable[[Catalog], T]) -> T:
        """``fn`` on a reader, on one of the readers' threads, awaited on this loop. A caller
        cancelled meanwhile stops waiting: a read not started is dropped, one under way
        finishes and gives its reader back."""
        future = self._threads.submit(lambda: self._read(self._take(), fn))
        return await asyncio.wrap_future(future)

    @property
    def yields_to_loop(self) -> bool:
        return self._threads.yields_to_loop

    def now(self, fn: Callable[[Catalog], T]) -> T | None:
        """``fn`` on a free reader, on the calling thread: the event loop, for work of a
        few indexed reads (a kept answer, ``Catalog.search_kept``), where the hop to a
        worker thread costs more than the work. None when no reader is free (none is
        opened here)."""
        try:
            reader = self._free.get_nowait()
        except queue.Empty:
            return None
        return self._read(reader, fn)

    def renew(self, revision: int, *, replaced_damaged: bool = False) -> None:
        """A replica's file was replaced by a new copy at ``revision``: open the readers on
        it and warm them (search statistics, the vector matrix) on the calling thread, then
        let requests have them. Readers of the old file finish what they do and are closed.
        ``replaced_damaged``: the copy replaced was found damaged."""
        fresh: queue.SimpleQueue[Catalog] = queue.SimpleQueue()
        opened: list[Catalog] = []
        # Nothing answered from the old file is kept. Over a copy found damaged, nothing
        # made from that one (the vector matrix, the BM25 index, its save beside the file)
        # is taken up either. Else they are brought forward to a new revision, a build
        # under way going on to it, or kept (the same revision: a write that changed no
        # tool, such as recorded uses).
        self._catalog.forget_kept(revision if replaced_damaged else None)
        for _ in range(self._size):
            reader = self._open()
            try:
                if not opened:
                    if reader.export_query_encoder():
                        logger.info("revision %d: exported the query encoder here", revision)
                    # the readers share the vector matrix and the BM25 index: made once
                    reader.warm(self._search_mode)
                reader.list(limit=1)
                reader.search("warm up", k=1, mode=self._search_mode)
            except ToolcatError as e:  # served as the primary serves it: say so, go on
                logger.warning("revision %d: warming a reader: %s", revision, e)
            opened.append(reader)
            fresh.put(reader)
        with self._guard:
            closed = self._closed
            if not closed:
                old, self._free = self._free, fresh
                self._opened.extend(opened)
                self._generation += 1
                self._current = {id(reader) for reader in opened}
        if closed:  # the server closed while these were warmed
            for reader in opened:
                reader.close()
            return
        while True:
            try:
                self._retire(old.get_nowait())
            except queue.Empty:
                break
        logger.info("revision %d: %d warm readers", revision, len(opened))

    def _retire(self, reader: Catalog) -> None:
        with self._guard:
            self._opened = [r for r in self._opened if r is not reader]
        reader.close()

    def close(self) -> None:
        """Close the free readers now; one lent to a read under way (its caller cancelled
        and gone: a server shutting down) is closed by that read when it is done, not under
        it (a write such as ``record_use`` would be lost). Nothing waits for them."""
        self._threads.close()
        with self._guard:
            self._closed = True
            self._generation += 1
            self._current = set()
            free, self._free = self._free, queue.SimpleQueue()
        while True:
            try:
                self._retire(free.get_nowait())
            except queue.Empty:
                break


class ToolcatServer(Server[Any]):
    """The SDK server, telling legacy clients ``tools.listChanged: true`` however it is
    started (the HTTP session manager builds its initialization options itself)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class ListPages:
    """One scope's ``tools/list`` at one revision, built page by page as clients ask: the
    first page of a catalog of a million listed tools costs what a page costs, not what the
    whole list does (a replica rebuilt 66,666 tools' specs, 94 s at 100k, before announcing
    each revision). What is built is kept, so a client paging through builds each tool once.
    """

    def __init__(
        self, read: Callable[[Catalog, str | None], tuple[list[types.Tool], str | None]]
    ) -> None:
        self._read = read  # (reader, catalog cursor) → (that page's specs, the next cursor)
        self._lock = threading.Lock()  # worker threads: one reads the catalog on, others wait
        self.built: list[types.Tool] = []
        self._cursor: str | None = None
        self.complete = False

    def upto(self, catalog: Catalog, end: int) -> list[types.Tool]:
        """The specs built so far, at least ``end`` of them unless the list is shorter
        (reading on with ``catalog``: call on a worker thread)."""
        with self._lock:
            while len(self.built) < end and not self.complete:
                specs, self._cursor = self._read(catalog, self._cursor)
                self.built += specs
                self.complete = self._cursor is None
            return self.built


class CatalogServer:
    """An MCP server over one catalog. ``server`` is the SDK server to run."""

    def __init__(
        self,
        catalog: Catalog,
        options: ServeOptions | None = None,
        *,
        follower: Follower | None = None,
    ) -> None:
        from ..definitions.version import __version__

        self.catalog = catalog
        self.options = options or ServeOptions()
        self.follower = follower
        o = self.options
        self.scope = Scope(
            toolkits=(o.toolkit,) if o.toolkit else (),
            tags=tuple(o.tags),
            policy=o.policy,
            any_tags=tuple(o.any_tags),
            exclude_tags=tuple(o.exclude_tags),
        )
        self.readers = Readers(
            catalog, o.readers, yield_to_loop=o.yield_to_loop, search_mode=o.search_mode
        )
        if o.yield_to_loop:
            catalog.runtime.executor.threads.yields_to_loop = True
        if follower is not None:
            self.readers.on_damaged = follower.suspect
        self.watcher = RevisionWatcher(
            catalog.path,
            interval=o.watch_interval,
            follow=follower.sync if follower is not None else None,
            prepare=self.prepare if follower is not None else None,
            news=follower.news if follower is not None else None,
        )
        self.watcher.subscribe(self._catalog_changed)
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        self.recent = RecentSearches()  # learning from use: each caller's recent searches
        self.gaps = Gaps()  # searches that found nothing, for the console
        self.artifacts = ArtifactLinks()  # large artifacts handed out as resource links
        self.found_tools = FoundTools()  # search_tools' entries, built once per tool
        self.resolved = ResolvedTools()  # what calls named, per revision: no reader needed
        self._legacy: weakref.WeakSet[Any] = weakref.WeakSet()  # legacy connections to notify
        self._lists: dict[Scope, ListPages] = {}  # per scope, at watcher.current()
        self._lists_revision = -1
        self._prepared: tuple[int, dict[Scope, ListPages]] = (-1, {})
        self._prepare_steps: dict[str, float] = {}  # what the last ``prepare`` took, by step
        self._damaged_swaps = 0  # the follower's count at the last ``prepare``
        self.server = ToolcatServer(
            "toolcat",
            version=__version__,
            instructions=(
                "Your tool list holds the always-on tools. For anything else, call "
                "search_tools with what you want to do, then call the tool it returns "
                "with call_tool."
            ),
            lifespan=self._lifespan,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscriptions_listen=self.listen,
        )
        # Our spans and durations in place of the SDK's own (server/telemetry.py): outermost,
        # so answers from the list cache are traced and counted too.
        self.telemetry = Telemetry(self._who)
        self.server.middleware[:] = [
            m for m in self.server.middleware if not isinstance(m, OpenTelemetryMiddleware)
        ]
        self.server.middleware.insert(0, self.telemetry)
        self.access_log = AccessLog(self._who) if o.access_log else None
        if self.access_log is not None:
            self.server.middleware.append(self.access_log)
        # Inside the access log, so answers from the cache are logged too.
        self.list_cache = ListCache(self.watcher.current, self._list_key)
        self.server.middleware.append(self.list_cache)

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        """Runs once per process (stdio or HTTP): the revision watcher lives here."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watcher.run)
            try:
                yield {}
            finally:
                self.listen.close()
                tg.cancel_scope.cancel()

    def close(self) -> None:
        if self.follower is not None:  # stop a Litestream child before anything else
            self.follower.close()
        self.readers.close()
        self.watcher.close()

    def health(self) -> dict[str, Any]:
        """What ``/healthz`` reports: the revision served and, on a replica, its primary,
        the primary's revision, the lag and how stale it is (``store.replica.health``), and
        ``serving``: whether it can answer from a sound copy now."""
        from ..store import replica

        report: dict[str, Any] = {"role": "primary", "revision": self.watcher.revision}
        if self.follower is not None:
            report = {
                "role": "replica",
                **replica.health(self.follower.state),
                "revision": self.watcher.revision,
                # False while the copy is being restored again or a look failed unexpectedly
                "serving": self.follower.serving and self.watcher.failure is None,
                # False once follow mode was switched off (a file at its names it may not
                # replace, the log names it): each change is then a full restore.
                "follow_mode": self.follower.staging is not None,
                # Where the last new revision's time went: looking at the store, the copy
                # (or a whole restore), its check, warming the readers, the first list page.
                "last_change_s": {**self.follower.steps, **self._prepare_steps},
            }
            if self.watcher.failure is not None:
                report["error"] = self.watcher.failure
        return report

    # -- who is asking ----------------------------------------------------------------------

    def _scope(self, ctx: Any) -> Scope:
        request = getattr(ctx, "request", None)
        principal: Principal | None = None
        if request is not None:
            principal = request.scope.get(PRINCIPAL_KEY)
        return self.scope if principal is None else self.scope.narrowed(principal.scope)

    def _caller(self, ctx: Any) -> tuple[str | None, str | None]:
        """Who a 2026 request comes from, for learning from use (server/usage.py): the
        principal its token names and the client's name, each None when not known."""
        request = getattr(ctx, "request", None)
        principal = request.scope.get(PRINCIPAL_KEY) if request is not None else None
        params = getattr(ctx.session, "client_params", None)
        info = getattr(params, "client_info", None)
        client = getattr(info, "name", None)
        return (
            principal.name if principal is not None else None,
            client if isinstance(client, str) else None,
        )

    def _who(self, ctx: Any) -> str:
        """A request's caller for the access log: its principal, else ``anonymous``."""
        request = getattr(ctx, "request", None)
        principal = request.scope.get(PRINCIPAL_KEY) if request is not None else None
        return principal.name if principal is not None else ANONYMOUS

    def _learner(self, ctx: Any) -> str:
        """Whose uses a request records and is ranked by: its principal, else ``anonymous``
        (stdio, HTTP without tokens). Never ``""``, the catalog's own caller, whose uses
        every search shares (search/learned.py)."""
        principal, _client = self._caller(ctx)
        return principal or ANONYMOUS

    def _legacy_connection(self, ctx: Any) -> Any | None:
        """The connection of a 2025-era session (None on 2026 requests, which have none)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        # The SDK hands handlers a per-request ServerSession; the connection behind it
        # is what lives as long as the client's session.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None:
            self._legacy.add(connection)
        return connection

    def _revealed(self, connection: Any | None) -> OrderedDict[str, RegisteredTool]:
        if connection is None:
            return OrderedDict()
        revealed: OrderedDict[str, RegisteredTool] = connection.state.setdefault(
            REVEALED_KEY, OrderedDict()
        )
        return revealed

    # -- catalog changes --------------------------------------------------------------------

    async def _catalog_changed(self, revision: int) -> None:
        logger.info("catalog revision %d: announcing tools/list_changed", revision)
        self._lists.clear()
        await self.bus.publish(ToolsListChanged())
        for connection in list(self._legacy):
            with anyio.move_on_after(2):
                try:
                    await connection.outbound.notify("notifications/tools/list_changed", None)
                except Exception:  # a session that went away: forget it
                    self._legacy.discard(connection)

    # -- tools/list -------------------------------------------------------------------------

    def _read_page(
        self, catalog: Catalog, scope: Scope, cursor: str | None
    ) -> tuple[list[types.Tool], str | None]:
        """One catalog page of ``scope``'s listed tools as specs, and the next page's cursor."""
        page = catalog.list(
            tags=scope.tag_filter,
            toolkit=scope.single_toolkit,
            include_deferred=self.options.plain,
            limit=LIST_READ,
            cursor=cursor,
        )
        tools = [t for t in page.tools if scope.allows(t)]
        return self._specs(catalog, tools, scope), page.next_cursor

    def _pages(self, scope: Scope) -> ListPages:
        return ListPages(lambda catalog, cursor: self._read_page(catalog, scope, cursor))

    def prepare(self, revision: int) -> None:
        """Build what serving ``revision`` needs before anyone is told of it (a replica's
        watcher calls this on a worker thread; ``toolcat serve --replica-of`` once before
        it listens): warm readers on the new file, and the server scope's ``tools/list``,
        which on a big catalog is the costliest thing a first request would build."""
        started = time.perf_counter()
        if self.options.settle_heap:
            gc.unfreeze()  # the old revision's readers and index go with the next collection
        damaged = self.follower.damaged_swaps if self.follower is not None else 0
        self.readers.renew(revision, replaced_damaged=damaged != self._damaged_swaps)
        self._damaged_swaps = damaged
        renewed = time.perf_counter()
        # A copy restored again at the same revision replaced one found damaged: nothing
        # resolved from that one is called (calls under way keep into the old object).
        self.resolved = ResolvedTools(self.resolved.size)
        pages = self._pages(self.scope)
        try:
            with self.readers.borrowed() as catalog:
                pages.upto(catalog, self.options.page_size + 1)
        except ToolcatError as e:
            logger.warning("revision %d: building tools/list: %s", revision, e)
            self._prepared = (-1, {})
        else:
            self._prepared = (revision, {self.scope: pages})
        # Nor is a list built from that copy served: taken up again from what was prepared.
        self._lists_revision = -1
        self.list_cache.forget()
        if self.options.settle_heap:
            settle_heap()
        self.watcher.prepared = revision
        self._prepare_steps = {
            "readers": round(renewed - started, 3),
            "tools_list": round(time.perf_counter() - renewed, 3),
        }

    def _list_key(self, ctx: Any) -> Scope | None:
        """What a 2026 ``tools/list`` answer depends on besides revision, version and params:
        the caller's scope. None for a legacy session (its found tools join its list)."""
        if self._legacy_connection(ctx) is not None:
            return None
        return self._scope(ctx)

    async def _listed(self, scope: Scope, end: int) -> list[types.Tool]:
        """``scope``'s list at the current revision, built to at least ``end`` tools (the
        whole list when it is shorter)."""
        revision = self.watcher.current()
        if revision is None:
            revision = self.watcher.revision
        if revision != self._lists_revision:
            prepared_revision, prepared = self._prepared
            self._lists = dict(prepared) if prepared_revision == revision else {}
            self._lists_revision = revision
        pages = self._lists.get(scope)
        if pages is None:
            pages = self._pages(scope)
            if len(self._lists) > 256:
                self._lists.clear()
            if self._lists_revision == revision == self.watcher.current():  # not moved since
                self._lists[scope] = pages
        return await self.readers.run(lambda catalog: pages.upto(catalog, end))

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        cursor = params.cursor if params is not None else None
        start = _decode_offset(cursor)
        scope = self._scope(ctx)
        connection = self._legacy_connection(ctx)
        size = self.options.page_size
        try:
            listed = await self._listed(scope, start + size + 1)
        except ToolcatError as e:
            raise MCPError(types.INVALID_PARAMS, str(_within(scope, e))) from e
        page = listed[start : start + size]
        next_cursor = f"o{start + size}" if start + size < len(listed) else None
        tools = [SEARCH_TOOL_SPEC, CALL_TOOL_SPEC] if start == 0 and not self.options.plain else []
        tools += page
        revealed = self._revealed(connection)
        if next_cursor is None and revealed:
            names = {t.name for t in listed}
            found = [t for t in revealed.values() if scope.allows(t)]
            extra = await self.readers.run(lambda c: self._specs(c, found, scope))
            tools += [t for t in extra if t.name not in names]
        own_selection = scope.parent is not None and scope.selects
        return types.ListToolsResult(
            tools=tools,
            next_cursor=next_cursor,
            ttl_ms=LIST_TTL_MS,
            # A principal's own selection makes the list its own, whether or not the
            # server was told so (``per_caller``): no shared cache may hand it on. The
            # server's own selection (no parent) is everyone's list.
            cache_scope="private" if self.options.per_caller or own_selection else "public",
        )

    def _specs(
        self, catalog: Catalog, tools: list[RegisteredTool], scope: Scope
    ) -> list[types.Tool]:
        names = catalog.short_names(tools, within=scope) if tools else {}
        return [_spec(tool, self._exposed_name(tool, names)) for tool in tools]

    @staticmethod
    def _exposed_name(tool: RegisteredTool, short_names: Mapping[str, str]) -> str:
        name = short_names.get(tool.id, tool.id)
        return tool.id if name in OWN_TOOLS else name  # also in plain mode: names stay stable

    def _in_list_mode(self, tool: RegisteredTool, scope: Scope) -> bool:
        return (self.options.plain or not tool.defer_loading) and scope.allows(tool)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        """For the SDK's ``Mcp-Param-*`` header check (2026 era over HTTP): only
        ``call_tool`` marks a parameter, and a request is checked only when it sends such a
        header, which must then match its body. A client that has not listed the tools yet
        cannot know to send one, and its first call must work; a missing header hides
        nothing from toolcat, which checks the caller's scope itself on every call."""
        return CALL_TOOL_SPEC.input_schema if name == CALL_TOOL and PARAM_HEADERS.get() else None

    # -- tools/call -------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        arguments = params.arguments or {}
        if name == SEARCH_TOOL and not self.options.plain:
            return await self._search(ctx, arguments)
        if name == CALL_TOOL and not self.options.plain:
            inner = arguments.get("name")
            inner_arguments = arguments.get("arguments") or {}
            if not isinstance(inner, str) or not isinstance(inner_arguments, dict):
                return _error(
                    "INVALID_ARGUMENTS",
                    "call_tool takes 'name' (a string) and 'arguments' (an object)",
                )
            return await self._call(ctx, inner, inner_arguments, via_call_tool=True)
        return await self._call(ctx, name, arguments, via_call_tool=False)

    async def _call(
        self, ctx: Any, name: str, arguments: dict[str, Any], *, via_call_tool: bool
    ) -> types.CallToolResult:
        size = len(json.dumps(arguments, default=str))
        if size > MAX_ARGUMENT_BYTES:
            return _error(
                "INVALID_ARGUMENTS",
                f"the arguments are {size:,} bytes of JSON; at most {MAX_ARGUMENT_BYTES:,}",
            )
        scope = self._scope(ctx)
        connection = self._legacy_connection(ctx)
        revision = self.watcher.current()
        resolved = self.resolved  # ``prepare`` may start a new one while this resolves
        tool = resolved.get(revision, scope, name)
        if tool is None:
            try:  # what is outside the caller's scope does not exist: not found, not suggested
                tool = await self.readers.run(lambda c: c.get(name, within=scope))
            except ToolcatError as e:
                failed = error_result(e, 0.0)
                return _error(failed.error_code or e.code, failed.error or str(e))
            if revision is not None and revision == self.watcher.current():  # not moved since
                resolved.keep(revision, scope, name, tool)
        noted().tool = tool.id  # a catalog tool in the caller's scope: a bounded label
        pinned = "@" in name
        if self.options.refuse_unsearched and (pinned or not self._in_list_mode(tool, scope)):
            if connection is not None:
                if _key(tool) not in self._revealed(connection):
                    return _error(
                        "TOOL_DENIED",
                        f"{name!r} is not in your tool list: find it with {SEARCH_TOOL} first",
                    )
            elif not via_call_tool or pinned:
                return _error(
                    "TOOL_DENIED",
                    f"{name!r} is not in your tool list: find it with {SEARCH_TOOL}, then call "
                    f"it with {CALL_TOOL}",
                )
        outcome = await self.catalog.acall(  # the version resolved and checked above
            tool, arguments, on_event=forward_events(ctx.session)
        )
        if outcome.success:
            await self._learn(ctx, connection, tool)
        handed = (  # a failed call's result is its error alone
            self.artifacts.content(outcome.events, tool, self._caller(ctx)[0])
            if outcome.success
            else []
        )
        facts = noted()
        facts.events.update(event.kind for event in outcome.events)
        facts.artifacts = len(handed)
        return _result(outcome, structured=tool.output_schema is not None, artifacts=handed)

    # -- artifacts (server/events.py) -------------------------------------------------------

    async def _list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        """No standing resources: artifacts come as links in the results that made them."""
        return types.ListResourcesResult(resources=[])

    async def _read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return self.artifacts.read(str(params.uri), self._scope(ctx), self._caller(ctx)[0])

    async def _learn(self, ctx: Any, connection: Any | None, tool: RegisteredTool) -> None:
        """A successful call of a tool a recent search of this caller returned: record
        (query, tool) in the catalog as this caller's own use (nothing when its learning
        from use is off): it reorders this caller's results only, by a bounded amount."""
        query = self.recent.called(self._caller(ctx), connection, tool.id)
        if query is None:
            return
        learner = self._learner(ctx)
        try:
            await self.readers.run(lambda c: c.record_use(query, tool.id, principal=learner))
        except Exception as e:  # learning must never fail a call (a busy or read-only file)
            logger.warning("could not record a use of %s: %s", tool.id, e)

    # -- search_tools -----------------------------------------------------------------------

    async def _search(self, ctx: Any, arguments: dict[str, Any]) -> types.CallToolResult:
        facts = noted()
        facts.tool = SEARCH_TOOL
        query = arguments.get("query")
        k = arguments.get("k", 5)
        # Absent or null: no tags asked. Anything else but a list ({}, "", 0) is refused.
        tag_lists: dict[str, Any] = {
            key: [] if arguments.get(key) is None else arguments[key] for key in TAG_ARGUMENTS
        }
        if not isinstance(query, str) or not query.strip():
            return _error("INVALID_ARGUMENTS", "search_tools needs 'query', a non-empty string")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_K:
            return _error("INVALID_ARGUMENTS", f"'k' must be an integer from 1 to {MAX_SEARCH_K}")
        for key, tags in tag_lists.items():
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                return _error("INVALID_ARGUMENTS", f"'{key}' must be a list of strings")
        scope = self._scope(ctx)
        connection = self._legacy_connection(ctx)
        # The catalog ranks within the scope; only what it cannot filter by (a toolkit's
        # version) is checked on its first hits, fetched with room to spare.
        fetch = k if scope.exact_in_search else min(k * 4 + 20, 1000)
        learner = self._learner(ctx)
        asked_tags = TagFilter.of(*tag_lists.values())

        asked: dict[str, Any] = {
            "k": fetch,
            "mode": self.options.search_mode,
            "tags": scope.tag_filter & asked_tags if asked_tags else scope.tag_filter,
            "toolkit": scope.single_toolkit,
            "policies": scope.search_policies,
            "principal": learner,
        }

        def in_scope(found: SearchResult) -> tuple[list[SearchHit], list[RegisteredTool]]:
            hits = [h for h in found.hits if scope.allows(h.tool)][:k]
            return hits, [h.tool for h in hits]

        def visible(catalog: Catalog, found: SearchResult) -> Searched:
            hits, tools = in_scope(found)
            return found, hits, catalog.short_names(tools, within=scope) if tools else {}

        def kept(catalog: Catalog) -> Searched | None:
            found = catalog.search_kept(query, **asked)
            if found is None:
                return None
            hits, tools = in_scope(found)
            # Names kept too: a hit's name shared by thousands of tools outside the scope
            # would be a scan of them all, here on the event loop.
            names = catalog.short_names_kept(tools, within=scope) if tools else {}
            return None if names is None else (found, hits, names)

        try:
            # A repeated request is answered on the event loop when the catalog kept it
            # (exact scopes only: the names are then a few indexed reads); else on a reader.
            done = self.readers.now(kept) if scope.exact_in_search else None
            if done is None:
                done = await self.readers.run(
                    lambda catalog: visible(catalog, catalog.search(query, **asked))
                )
            found, hits, names = done
        except ToolcatError as e:
            return _error(e.code, str(_within(scope, e)))
        if found.mode != "regex":  # a pattern is not a request to learn from
            self.recent.searched(
                self._caller(ctx), connection, query, [hit.tool.id for hit in hits]
            )
        new = False
        if connection is not None:
            revealed = self._revealed(connection)
            for hit in hits:
                if self._in_list_mode(hit.tool, scope):
                    continue
                new = new or _key(hit.tool) not in revealed
                revealed[_key(hit.tool)] = hit.tool
                revealed.move_to_end(_key(hit.tool))
            while len(revealed) > MAX_REVEALED:
                revealed.popitem(last=False)
        shown = found.model_copy(update={"hits": hits})  # SearchResult's rule, on what is shown
        if shown.no_match:
            self.gaps.add(self._learner(ctx), query, found.mode)
        facts.search_mode, facts.no_match = found.mode, shown.no_match
        shown_tools: list[dict[str, Any]] = []
        heads: list[str] = []  # each entry's kept JSON text
        for hit in hits:
            entry, head = self.found_tools.entry(hit.tool, self._exposed_name(hit.tool, names))
            shown_tools.append({**entry, "score": round(hit.score, 4), "match": hit.match})
            heads.append(head)
        payload: dict[str, Any] = {
            "query": query,
            "mode": found.mode,
            "no_match": shown.no_match,
            "tools": shown_tools,
        }
        if found.warnings:
            payload["warnings"] = found.warnings
        if new:
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=payload_text(payload, heads))],
            structured_content=payload,
        )


def payload_text(payload: dict[str, Any], heads: list[str]) -> str:
    """``json.dumps(payload)`` of a ``search_tools`` answer whose tools' entries are encoded
    already (``heads``: ``FoundTools.entry``'s texts, in order): the same text, without
    encoding each hit's schema again."""
    tools = ", ".join(
        f'{head}, "score": {json.dumps(shown["score"])}, "match": {json.dumps(shown["match"])}}}'
        for head, shown in zip(heads, payload["tools"], strict=True)
    )
    members = [
        f"{json.dumps(key)}: " + (f"[{tools}]" if key == "tools" else json.dumps(value))
        for key, value in payload.items()
    ]
    return "{" + ", ".join(members) + "}"


def settle_heap() -> None:
    """Collect once, then keep everything alive now (modules, the catalog, warm readers,
    their index and kept answers) out of later collections (``gc.freeze``). A serving
    process's heap is mostly what it built to start; each full collection walked all of it
    while the kept answers and hit tools filled (10k tools: one of ~20 ms in 300 queries,
    BM25 p99 4.1x p50; frozen, none: 2.1-2.4x). For a process of its own only: what is
    frozen and later dropped in a cycle stays until ``gc.unfreeze``."""
    gc.collect()
    gc.freeze()


class ResolvedTools:
    """The tool each (scope, name) a call named resolved to, at one catalog revision: a
    call of a name resolved before at the same revision looks it up here, on the event
    loop, instead of on a reader on a worker thread (under 16 clients that hop cost more
    server CPU than the rest of toolcat's part of a trivial call). Only tools found are
    kept; a new revision forgets them all. Bounded: the least recently called go first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._revision: int | None = None
        self._tools: OrderedDict[tuple[Scope, str], RegisteredTool] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, revision: int | None, scope: Scope, name: str) -> RegisteredTool | None:
        """The tool ``name`` resolved to in ``scope`` at ``revision`` (None: not kept, or
        the revision unknown)."""
        if revision is None or revision != self._revision:
            return None
        tool = self._tools.get((scope, name))
        if tool is not None:
            self._tools.move_to_end((scope, name))
        return tool

    def keep(self, revision: int, scope: Scope, name: str, tool: RegisteredTool) -> None:
        if revision != self._revision:
            self._tools.clear()
            self._revision = revision
        self._tools[(scope, name)] = tool
        while len(self._tools) > self.size:
            self._tools.popitem(last=False)


FoundEntry = tuple[dict[str, Any], str]


class FoundTools:
    """``search_tools``' entry of a tool (name, description, input schema, toolkit,
    version), built once and reused while the catalog hands out the same tool object (it
    keeps the tools it built per revision, so a new revision brings new objects and new
    entries). Bounded: the least recently found are forgotten first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, str], tuple[RegisteredTool, FoundEntry]]
        self._entries = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, tool: RegisteredTool, name: str) -> FoundEntry:
        """(the entry, its ``json.dumps`` text without the closing brace: ``payload_text``
        appends the hit's score and match)."""
        key = (id(tool), name)
        with self._lock:
            kept = self._entries.get(key)
            if kept is not None and kept[0] is tool:  # the object itself: never a reused id
                self._entries.move_to_end(key)
                return kept[1]
        entry = {
            "name": name,
            "description": tool.description,
            "inputSchema": object_schema(tool.parameters),
            "toolkit": tool.toolkit,
            "version": tool.version,
        }
        found = (entry, json.dumps(entry)[:-1])
        with self._lock:
            self._entries[key] = (tool, found)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return found


def _key(tool: RegisteredTool) -> str:
    return f"{tool.id}@{tool.version}"


def _decode_offset(cursor: str | None) -> int:
    if cursor is None:
        return 0
    digits = cursor[1:]
    # ASCII digits only: str.isdigit() also holds for "²" and "①", which int() refuses.
    if cursor.startswith("o") and digits.isascii() and digits.isdigit() and len(cursor) < 12:
        return int(digits)
    raise MCPError(
        types.INVALID_PARAMS, f"invalid cursor {cursor[:40]!r}: pass nextCursor as given"
    )


def _spec(tool: RegisteredTool, name: str) -> types.Tool:
    entry = mcp_tool(tool, name)
    meta = entry["_meta"]
    meta["anthropic/alwaysLoad"] = not tool.defer_loading
    if tool.search_hint:
        meta["anthropic/searchHint"] = tool.search_hint
    return types.Tool.model_validate(entry)


def _within(scope: Scope, error: ToolcatError) -> ToolcatError:
    """``error`` as a caller inside ``scope`` may read it. The only toolkit a scoped search
    or list looks up is the scope's own: when it is not registered (or not the version it
    pins), it is as absent as in a catalog holding the scope alone, with no close matches
    or other versions named (every one of them is outside the scope)."""
    selector = scope.single_toolkit
    if not isinstance(error, UnknownToolkitError) or selector is None:
        return error
    name, _, version = selector.partition("@")
    if not version and isinstance(error, DeprecatedToolkitError):
        return error  # names versions of the scope's own toolkit only
    from ..catalog import unknown_toolkit

    return unknown_toolkit(name, ())


def _error(code: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        is_error=True,
        _meta={"toolcat/error_code": code},
    )


def _result(
    outcome: ToolResult, *, structured: bool, artifacts: Sequence[Any] = ()
) -> types.CallToolResult:
    if not outcome.success:
        return _error(outcome.error_code or "TOOL_ERROR", outcome.error or "the call failed")
    data = outcome.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    meta: dict[str, Any] = {"toolcat/duration_ms": outcome.duration_ms}
    if outcome.truncated:
        meta["toolcat/truncated"] = True
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text), *artifacts],
        structured_content=data if structured and isinstance(data, dict) else None,
        _meta=meta,
    )


async def serve_stdio(server: CatalogServer) -> None:
    """Serve one client on standard input and output until it disconnects; the era
    follows the client's first request (``initialize``, or a 2026 request)."""
    from mcp.server.stdio import stdio_server

    from ..definitions.printable import install
    from .wire import claimed_stdin

    install()  # every log line escaped (definitions/printable.py)
    install("mcp")  # the SDK's own warnings quote a client's headers and messages
    try:
        with claimed_stdin() as stdin:  # lone surrogate escapes repaired (server/wire.py)
            async with stdio_server(stdin=stdin) as (read, write):
                await server.server.run(read, write, server.initialization_options())
    finally:
        server.close()
