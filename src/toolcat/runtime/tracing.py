"""OpenTelemetry's ``execute_tool`` span around each call, through the API alone.

The span is made only when OpenTelemetry is already imported in this process (an
``opentelemetry-instrument`` start, the MCP server, a program that configured an SDK): a
one-shot ``toolcat call`` never pays the import, and without an SDK the API's spans are
no-ops anyway. Only the tool's id and the result's error code are recorded: never arguments,
results or events.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

EXECUTE_TOOL = "execute_tool"  # gen_ai.operation.name of a tool call (GenAI conventions)


def enabled() -> bool:
    """Whether OpenTelemetry's API is loaded here (nothing to record otherwise)."""
    return "opentelemetry.trace" in sys.modules


@contextlib.contextmanager
def tool_span(tool_id: str) -> Iterator[Any]:
    """The current span ``execute_tool TOOL`` (None when OpenTelemetry is not loaded);
    ``failed(span, code)`` marks its failure."""
    if not enabled():
        yield None
        return
    from opentelemetry import trace

    tracer = trace.get_tracer("toolcat")
    attributes = {"gen_ai.operation.name": EXECUTE_TOOL, "gen_ai.tool.name": tool_id}
    with tracer.start_as_current_span(
        f"{EXECUTE_TOOL} {tool_id}", kind=trace.SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield span


def failed(span: Any, code: str) -> None:
    """Mark ``span`` (from ``tool_span``) as failed with an error code (never the message:
    it may quote arguments)."""
    if span is None:
        return
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", code)
    span.set_status(StatusCode.ERROR)


def inject(headers: dict[str, str]) -> None:
    """Put the current trace context (W3C ``traceparent``/``tracestate``) in ``headers`` of a
    request a tool forwards, so the service's spans join the caller's trace; it replaces a
    header of those names an argument set. Nothing when no span is current."""
    if not enabled():
        return
    from opentelemetry import propagate

    context: dict[str, str] = {}
    propagate.inject(context)
    for name in [n for n in headers if n.lower() in context]:
        del headers[name]
    headers.update(context)
