"""An OpenAPI call carries the caller's trace context (``traceparent``) to the API, so one
trace crosses the gateway; without a current span, nothing is added."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("httpx")

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.fixtures import openapi_app
from tests.helpers import free_port
from toolcat import Catalog
from toolcat.remote.openapi import close_all

TRACE_ID, SPAN_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
DOCUMENT = {
    "openapi": "3.1.0",
    "info": {"title": "Traced", "version": "1"},
    "paths": {
        "/users/{id}/profile": {
            "get": {
                "operationId": "profile",
                "parameters": [
                    {"name": "id", "in": "path", "required": True},
                    {"name": "traceparent", "in": "header"},
                ],
                "responses": {"200": {"description": "ok"}},
            }
        }
    },
}


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    url, server = openapi_app.serve(free_port())
    yield url
    server.should_exit = True


@pytest.fixture
def traced(catalog: Catalog, api: str) -> Iterator[Catalog]:
    openapi_app.SEEN.clear()
    catalog.register_openapi(DOCUMENT, toolkit="traced", base_url=f"{api}/api/v1")
    yield catalog
    close_all()


def headers_seen() -> dict[str, Any]:
    [seen] = openapi_app.SEEN
    return seen["headers"]  # type: ignore[no-any-return]


def test_the_callers_trace_goes_with_the_request(traced: Catalog) -> None:
    span = NonRecordingSpan(
        SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1))
    )
    forged = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"  # an argument may not replace it
    with trace.use_span(span):
        result = traced.call("traced.profile", {"id": "7", "traceparent": forged})
    assert result.success, result.error
    version, trace_id, parent_id, flags = headers_seen()["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", f"{TRACE_ID:032x}", "01")
    # The caller's span, or the execute_tool span under it where an SDK records spans.
    assert parent_id != "2" * 16


def test_no_trace_no_header(traced: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a recording tracer (no SDK configured; another test may have installed one
    for the whole process) and no caller span, the request carries no trace header."""
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    result = traced.call("traced.profile", {"id": "7"})
    assert result.success, result.error
    assert "traceparent" not in headers_seen()
