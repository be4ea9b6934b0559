"""What each MCP request did, for traces and metrics.

``Telemetry`` is the server's SDK middleware in place of the SDK's own OpenTelemetry one
(``mcp.server._otel``, taken out so no request gets two spans). Per request it makes one
SERVER span named and attributed as OpenTelemetry's semantic conventions for MCP say
(``tools/call math.add``; ``mcp.method.name``, ``mcp.protocol.version``, ``mcp.session.id``,
``gen_ai.operation.name``, ``gen_ai.tool.name``, ``error.type``), its parent taken from the
request's ``params._meta`` (``traceparent``, ``tracestate``; a malformed one is ignored),
and records ``mcp.server.operation.duration`` through the metrics API. Without an SDK both
are OpenTelemetry's no-ops.

Handlers note what only they know in the request's ``Facts`` (``noted()``): the catalog tool
a call resolved to, a search's mode and whether it matched, a call's events and artifacts.
Once answered, each sink (the Prometheus metrics, server/metrics.py) gets an ``Observation``.

Nothing a client chose reaches a span name, an attribute or a label unbounded: the method is
one of the protocol's (else ``other``); the tool is one the catalog resolved in the caller's
scope, or none; statuses are toolcat's error codes or JSON-RPC codes. Never arguments,
results, queries or tokens.
"""

from __future__ import annotations

import contextvars
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context

from .access import result_status

OTHER = "other"
METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "subscriptions/listen",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
)
MAX_REQUEST_ID = 64  # the client's JSON-RPC id is kept as an attribute, cut short
MAX_SESSION_ID = 128


@dataclass
class Facts:
    """What a request's handler found out (all None/empty until it says)."""

    tool: str | None = None  # a tool the catalog resolved in the caller's scope, or our own
    search_mode: str | None = None
    no_match: bool | None = None
    events: Counter[str] = field(default_factory=Counter)  # a call's events by kind
    artifacts: int = 0  # resource links handed out with a call's result


@dataclass(frozen=True)
class Observation:
    """One answered request: its method (bounded), the facts, status, caller and time."""

    method: str
    facts: Facts
    status: str  # "ok", a tool result's error code, or error(JSON-RPC code)
    principal: str
    seconds: float


Sink = Callable[[Observation], None]
_facts: contextvars.ContextVar[Facts | None] = contextvars.ContextVar(
    "toolcat_request_facts", default=None
)


def noted() -> Facts:
    """The running request's facts, for its handler to fill (a throwaway outside one)."""
    return _facts.get() or Facts()


def method_label(method: Any) -> str:
    return method if isinstance(method, str) and method in METHODS else OTHER


def trace_parent(meta: Mapping[str, Any] | None) -> Context | None:
    """The trace context a request's ``_meta`` carries; None (the ambient one) when it
    carries none or a malformed one (OpenTelemetry's propagator ignores what it cannot
    parse; anything it raises on is ignored here too)."""
    if not isinstance(meta, Mapping) or "traceparent" not in meta:
        return None
    carrier = {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
    try:
        context = propagate.extract(carrier)
    except Exception:  # a forged header must never fail the request
        return None
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


class Telemetry:
    """SDK ``ServerMiddleware``: a span and a duration per request, then the sinks.

    Args:
        who: The principal (class) a request comes from, for the sinks.
    """

    def __init__(self, who: Callable[[Any], str]) -> None:
        self.who = who
        self.sinks: list[Sink] = []
        self._tracer = trace.get_tracer("toolcat")
        self._duration = metrics.get_meter("toolcat").create_histogram(
            "mcp.server.operation.duration",
            unit="s",
            description="MCP request duration as observed on the receiver",
        )

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        method = method_label(getattr(ctx, "method", None))
        attributes: dict[str, Any] = {
            "mcp.method.name": method,
            "mcp.protocol.version": str(getattr(ctx, "protocol_version", "")),
        }
        request_id = getattr(ctx, "request_id", None)
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)[:MAX_REQUEST_ID]
        session = _session_id(ctx)
        if session is not None:
            attributes["mcp.session.id"] = session
        if method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
        facts = Facts()
        token = _facts.set(facts)
        started = time.perf_counter()
        status = "error"
        with self._tracer.start_as_current_span(
            method,
            kind=trace.SpanKind.SERVER,
            attributes=attributes,
            context=trace_parent(getattr(ctx, "meta", None)),
            record_exception=False,  # an exception's text may quote the request
            set_status_on_exception=False,
        ) as span:
            try:
                result = await call_next(ctx)
                status = result_status(result)
                return result
            except Exception as e:
                code = getattr(getattr(e, "error", None), "code", None)
                status = f"error({code})" if isinstance(code, int) else "error"
                raise
            finally:
                _facts.reset(token)
                seconds = time.perf_counter() - started
                done = _finish(span, attributes, facts, status)
                self._duration.record(seconds, done)
                if request_id is not None:  # a notification has no answer to count
                    seen = Observation(method, facts, status, self.who(ctx), seconds)
                    for sink in self.sinks:
                        sink(seen)


def _finish(span: Any, attributes: dict[str, Any], facts: Facts, status: str) -> dict[str, Any]:
    """Name the span after its tool, mark a failure; the duration's attributes."""
    done = {k: attributes[k] for k in ("mcp.method.name", "mcp.protocol.version")}
    if facts.tool is not None:
        span.update_name(f"{attributes['mcp.method.name']} {facts.tool}")
        span.set_attribute("gen_ai.tool.name", facts.tool)
        done["gen_ai.tool.name"] = facts.tool
    if status != "ok":  # toolcat's error code of a failed call says more than tool_error
        span.set_attribute("error.type", status)
        span.set_status(trace.StatusCode.ERROR)
        done["error.type"] = status
    return done


def _session_id(ctx: Any) -> str | None:
    """A legacy HTTP session's id (the SDK checked it names a live session)."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return value[:MAX_SESSION_ID] if isinstance(value, str) and value.isprintable() else None
