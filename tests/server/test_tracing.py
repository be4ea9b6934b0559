"""OpenTelemetry through the API alone, seen with the SDK's in-memory exporter: one server
span per MCP request named and attributed per the MCP semantic conventions (the SDK's own
middleware taken out: no doubles), parented on the client's ``_meta`` trace context, an
``execute_tool`` span per call under it, the duration histogram, and the trace carried on to
a real MCP server behind a forwarded call. Never an argument value in an attribute."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("opentelemetry.sdk")

from mcp import Client
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from tests.server.clients import MODERN, error_code, run
from toolcat import Catalog
from toolcat.server.mcp import CatalogServer
from toolcat.server.telemetry import trace_parent

SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
SECRET_ARGUMENT = "ARGUMENT-VALUE-7c1d"
EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """The SDK, configured once for the process (OpenTelemetry allows one provider)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER


def server_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == trace.SpanKind.SERVER]


def by_name(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def parent_of(span: ReadableSpan, exporter: InMemorySpanExporter) -> ReadableSpan:
    assert span.parent is not None, span.name
    found = [s for s in exporter.get_finished_spans() if s.context.span_id == span.parent.span_id]
    assert len(found) == 1, span.name
    return found[0]


def all_attribute_text(exporter: InMemorySpanExporter) -> str:
    return " ".join(
        f"{s.name} {dict(s.attributes or {})} {s.status.description}"
        for s in exporter.get_finished_spans()
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with Catalog(tmp_path / "catalog.db") as opened:
        opened.register(SAMPLE_TOOLKITS / "math.yaml")
        yield opened


TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
CLIENT_CONTEXT = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "agent=1"}


def test_spans_per_operation_parented_on_the_clients_context(
    catalog: Catalog, spans: InMemorySpanExporter
) -> None:
    server = CatalogServer(catalog)

    async def load() -> None:
        async with Client(server.server, mode=MODERN) as client:
            # No span is current here: the parent can only come from each request's _meta.
            assert not trace.get_current_span().get_span_context().is_valid
            meta: Any = dict(CLIENT_CONTEXT)
            await client.list_tools(meta=meta)
            await client.call_tool("search_tools", {"query": "convert units"}, meta=meta)
            ok = await client.call_tool("calculate", {"expression": "2+3"}, meta=meta)
            assert not ok.is_error, ok.content
            bad = await client.call_tool("calculate", {"expression": SECRET_ARGUMENT}, meta=meta)
            assert error_code(bad) == "TOOL_ERROR"

    try:
        run(load)
    finally:
        server.close()
    traced = [s for s in server_spans(spans) if s.name.startswith("tools/")]
    names = [s.name for s in traced]
    assert sorted(names) == [
        "tools/call math.calculate",
        "tools/call math.calculate",  # one span per request: none doubled by the SDK's
        "tools/call search_tools",
        "tools/list",
    ]
    for span in traced:
        assert span.context.trace_id == int(TRACE_ID, 16), span.name
        assert span.parent is not None and span.parent.span_id == int(PARENT_ID, 16)
        assert span.parent.is_remote
        attributes = dict(span.attributes or {})
        assert attributes["mcp.method.name"] == span.name.split(" ")[0]
        assert attributes["mcp.protocol.version"] == MODERN
    calls = [s for s in traced if s.name == "tools/call math.calculate"]
    for span in calls:
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.tool.name"] == "math.calculate"
        assert attributes["gen_ai.operation.name"] == "execute_tool"
    failed = [s for s in calls if s.status.status_code == trace.StatusCode.ERROR]
    assert len(failed) == 1 and dict(failed[0].attributes or {})["error.type"] == "TOOL_ERROR"
    executed = by_name(spans, "execute_tool math.calculate")
    assert len(executed) == 2
    assert {parent_of(s, spans).context.span_id for s in executed} == {
        s.context.span_id for s in calls
    }
    assert {dict(s.attributes or {})["gen_ai.tool.name"] for s in executed} == {"math.calculate"}
    text = all_attribute_text(spans)
    assert SECRET_ARGUMENT not in text and "2+3" not in text and "convert units" not in text
    assert "mcp.server.operation.duration" in recorded_metrics()


def recorded_metrics() -> set[str]:
    data = READER.get_metrics_data()
    assert data is not None
    return {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def run_value(fn: Any) -> Any:
    box: list[Any] = []

    async def keep() -> None:
        box.append(await fn())

    run(keep)
    return box[0]


@pytest.mark.parametrize(
    "forged",
    [
        "garbage",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # an all-zero trace id
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01\n# injected",
        "ff-" + "a" * 32 + "-" + "b" * 16 + "-01",  # version ff is invalid
        "x" * 100_000,
        42,
        None,
    ],
    ids=["garbage", "zero-trace", "newline", "version-ff", "huge", "number", "none"],
)
def test_a_forged_traceparent_is_ignored(forged: Any) -> None:
    assert trace_parent({"traceparent": forged, "tracestate": forged}) is None


def test_a_valid_traceparent_is_taken() -> None:
    context = trace_parent({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
    assert context is not None
    assert trace.get_current_span(context).get_span_context().trace_id == int("a" * 32, 16)


def test_a_forwarded_call_carries_the_trace_to_the_mcp_server(
    catalog: Catalog, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    received = tmp_path / "traceparents.txt"
    catalog.register_mcp(SERVER, toolkit="weather", env={"TOOLCAT_TEST_TRACEFILE": str(received)})
    server = CatalogServer(catalog)

    async def call() -> None:
        async with Client(server.server, mode=MODERN) as client:
            result = await client.call_tool(
                "call_tool", {"name": "weather.forecast", "arguments": {"city": "Oslo"}}
            )
            assert not result.is_error, result.content

    try:
        run(call)
    finally:
        server.close()
    [line] = received.read_text().splitlines()
    _version, trace_id, parent_id, _flags = line.split("-")
    [outer] = [s for s in server_spans(spans) if s.name == "tools/call weather.forecast"]
    [executed] = by_name(spans, "execute_tool weather.forecast")
    assert parent_of(executed, spans) is not None
    assert executed.parent is not None and executed.parent.span_id == outer.context.span_id
    assert int(trace_id, 16) == outer.context.trace_id  # one trace across the gateway
    [sent] = [s for s in spans.get_finished_spans() if s.context.span_id == int(parent_id, 16)]
    assert sent.kind == trace.SpanKind.CLIENT and "forecast" in sent.name
    assert sent.parent is not None and sent.parent.span_id == executed.context.span_id
