"""Prometheus metrics of ``toolcat serve --http`` at ``/metrics`` (the ``metrics`` extra).

Each server has its own registry (never prometheus_client's global one, so several servers
in a process, and tests, never share counters). What requests did comes from the telemetry
middleware's ``Observation``s (server/telemetry.py); the catalog's state (revision, tools per
state, a replica's lag and staleness) is read when scraped.

Labels are bounded: ``method`` is one of MCP's (else ``other``); ``tool`` a tool the catalog
resolved in the caller's scope (else ``other``; empty for other methods than ``tools/call``);
``status`` and ``code`` toolcat's error codes or JSON-RPC codes; ``principal`` the name the
admin's tokens file gives (``client`` for ``--token``, ``anonymous`` without tokens);
``mode`` a search mode. prometheus_client escapes label values (``\\``, ``"``, newlines).
Never an argument, a query, a result or a token.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ServeError
from .telemetry import OTHER, Observation

if TYPE_CHECKING:
    from .mcp import CatalogServer

INSTALL_HINT = "install the metrics extra: pip install 'toolcat[metrics]'"
SEARCH_TOOL = "search_tools"  # server/mcp.py's; not imported: that module needs the MCP SDK
# Seconds: from a cached tools/list page to a slow tool call.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def require_prometheus() -> None:
    """Raises ``ServeError`` naming the extra when prometheus_client is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as e:
        raise ServeError(f"/metrics needs prometheus-client: {INSTALL_HINT}") from e


class Metrics:
    """A server's counters and histograms, and the catalog's gauges, in one registry."""

    def __init__(self, server: CatalogServer) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "toolcat_requests",
            "MCP requests answered, by method, tool, status and principal.",
            ["method", "tool", "status", "principal"],
            registry=r,
        )
        self.list_seconds = Histogram(
            "toolcat_list_duration_seconds", "tools/list latency.", buckets=BUCKETS, registry=r
        )
        self.search_seconds = Histogram(
            "toolcat_search_duration_seconds",
            "search_tools latency, by search mode.",
            ["mode"],
            buckets=BUCKETS,
            registry=r,
        )
        self.call_seconds = Histogram(
            "toolcat_call_duration_seconds",
            "Tool call latency (tools/call of a tool, call_tool included; not search_tools).",
            buckets=BUCKETS,
            registry=r,
        )
        self.searches = Counter("toolcat_searches", "Searches run, by mode.", ["mode"], registry=r)
        self.no_match = Counter(
            "toolcat_searches_no_match",
            "Searches whose answer was no_match (nothing fits), by mode.",
            ["mode"],
            registry=r,
        )
        self.call_errors = Counter(
            "toolcat_call_errors", "Failed tool calls, by error code.", ["code"], registry=r
        )
        self.events = Counter(
            "toolcat_tool_events",
            "Events tools reported during calls, by kind.",
            ["kind"],
            registry=r,
        )
        self.artifacts = Counter(
            "toolcat_artifacts", "Artifacts handed out as resource links.", registry=r
        )
        r.register(_CatalogState(server))

    def record(self, seen: Observation) -> None:
        """Count one answered request (a ``Telemetry`` sink)."""
        facts = seen.facts
        tool = (facts.tool or OTHER) if seen.method == "tools/call" else ""
        self.requests.labels(seen.method, tool, seen.status, seen.principal).inc()
        if seen.method == "tools/list":
            self.list_seconds.observe(seen.seconds)
        elif seen.method == "tools/call" and facts.tool == SEARCH_TOOL:
            if facts.search_mode is not None:  # it ran (not refused for its arguments)
                self.searches.labels(facts.search_mode).inc()
                if facts.no_match:
                    self.no_match.labels(facts.search_mode).inc()
                self.search_seconds.labels(facts.search_mode).observe(seen.seconds)
        elif seen.method == "tools/call":
            self.call_seconds.observe(seen.seconds)
            if seen.status != "ok":
                self.call_errors.labels(seen.status).inc()
            for kind, count in facts.events.items():
                self.events.labels(kind).inc(count)
            if facts.artifacts:
                self.artifacts.inc(facts.artifacts)

    def exposition(self) -> bytes:
        """The text exposition format (reads the catalog: call off the event loop)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _CatalogState:
    """A custom collector: revision, tools per state (counted once per revision), and a
    replica's lag and staleness, read at scrape time."""

    def __init__(self, server: CatalogServer) -> None:
        self.server = server
        self._states: tuple[int, dict[str, int]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> list[Any]:
        return []  # the families depend on the role: collected per scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        report = self.server.health()
        revision = report.get("revision")
        yield GaugeMetricFamily(
            "toolcat_catalog_revision", "The catalog revision served.", value=revision or 0
        )
        states = GaugeMetricFamily(
            "toolcat_tools", "Tools by state (active, deferred, deprecated).", labels=["state"]
        )
        for state, count in self._tool_states(revision).items():
            states.add_metric([state], count)
        yield states
        replica = report.get("role") == "replica"
        yield GaugeMetricFamily(
            "toolcat_replica", "1 when serving as a read-only replica.", value=int(replica)
        )
        # Declared on a primary too (without a sample), so dashboards find every family.
        for key, name, text in (
            ("lag_seconds", "toolcat_replica_lag_seconds", "Seconds the replica is behind."),
            ("stale_seconds", "toolcat_replica_stale_seconds", "Seconds since the store answered."),
            ("behind_transactions", "toolcat_replica_behind_transactions", "Transactions behind."),
        ):
            family = GaugeMetricFamily(name, text)
            value = report.get(key)
            if replica and isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric([], value)
            yield family

    def _tool_states(self, revision: Any) -> dict[str, int]:
        with self._lock:
            kept = self._states
            if kept is not None and kept[0] == revision:
                return kept[1]
            with self.server.readers.borrowed() as catalog:
                states = catalog.tool_states()
            if isinstance(revision, int):
                self._states = (revision, states)
            return states


def scrape_endpoint(server: CatalogServer) -> Any:
    """The Starlette endpoint of ``GET /metrics``, its ``Metrics`` fed by the server's
    telemetry from now on."""
    import anyio
    from prometheus_client import CONTENT_TYPE_LATEST
    from starlette.responses import Response

    metrics = Metrics(server)
    server.telemetry.sinks.append(metrics.record)

    async def scrape(_request: Any) -> Any:
        body = await anyio.to_thread.run_sync(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return scrape
