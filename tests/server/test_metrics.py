"""``GET /metrics`` of ``toolcat serve --http``: a real server, a load through the MCP SDK
client, a scrape parsed by prometheus_client's own parser, exact counts; the token rule;
what never appears in it (arguments, queries, tokens) and what bounds its labels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

pytest.importorskip("mcp")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from tests.server.clients import MODERN, error_code, http_server, http_session, run
from toolcat import Catalog

TOKEN = "math-team-token-1"
ODD_NAME = 'odd "team"\nline2 \\ end'  # an admin's principal name: quotes, newline, backslash
TOKENS_YAML = f"""\
principals:
  - name: math-team
    token: {TOKEN}
    toolkits: [math]
  - name: {json.dumps(ODD_NAME)}
    token: odd-team-token-2
"""
SECRET_ARGUMENT = "ARGUMENT-VALUE-7c1d"
SECRET_QUERY = "flibbertigibbet zzqxv"  # matches nothing: a no_match search
FORGED = 'forged"} 1\n# TYPE evil counter\nevil_total{x="'  # a client's tool name


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return path


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS_YAML)
    return path


def metrics_url(url: str) -> str:
    return url.removesuffix("/mcp") + "/metrics"


def scrape(url: str, token: str | None = TOKEN) -> tuple[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx2.get(metrics_url(url), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    return answer.text, families


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The value of ``sample`` with exactly ``labels`` (0 when absent)."""
    found = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name == sample and s.labels == labels
    ]
    assert len(found) <= 1, found
    return found[0] if found else 0.0


async def load(url: str) -> None:
    async with http_session(url, TOKEN, mode=MODERN) as s:
        await s.all_tools()
        found = await s.call("search_tools", {"query": "convert units", "k": 3})
        assert not found.is_error and not found.structured_content["no_match"]
        nothing = await s.call("search_tools", {"query": SECRET_QUERY})
        assert nothing.structured_content["no_match"], nothing.structured_content
        ok = await s.call("convert_units", {"value": 1, "from_unit": "km", "to_unit": "m"})
        assert not ok.is_error, ok.content
        via = await s.call("call_tool", {"name": "calculate", "arguments": {"expression": "2+3"}})
        assert not via.is_error, via.content
        bad = await s.call("calculate", {"expression": SECRET_ARGUMENT})
        assert error_code(bad) == "TOOL_ERROR"
        unknown = await s.call("call_tool", {"name": FORGED, "arguments": {"x": SECRET_ARGUMENT}})
        assert error_code(unknown) == "UNKNOWN_TOOL"
        direct = await s.call(FORGED + "2", {})
        assert error_code(direct) == "UNKNOWN_TOOL"


def test_a_load_counted_exactly(db: Path, tmp_path: Path, tokens: Path) -> None:
    with http_server(db, tmp_path, "--tokens", str(tokens), "--mode", "bm25") as (url, _):
        run(lambda: load(url))
        text, families = scrape(url)
    principal = "math-team"

    def calls(tool: str, status: str = "ok") -> float:
        return value(
            families,
            "toolcat_requests_total",
            method="tools/call",
            tool=tool,
            status=status,
            principal=principal,
        )

    assert (
        value(
            families,
            "toolcat_requests_total",
            method="tools/list",
            tool="",
            status="ok",
            principal=principal,
        )
        == 1
    )
    assert calls("search_tools") == 2
    assert calls("math.convert_units") == 1
    assert calls("math.calculate") == 1
    assert calls("math.calculate", "TOOL_ERROR") == 1
    assert calls("other", "UNKNOWN_TOOL") == 2  # the client's names never become labels
    assert value(families, "toolcat_searches_total", mode="bm25") == 2
    assert value(families, "toolcat_searches_no_match_total", mode="bm25") == 1
    assert value(families, "toolcat_search_duration_seconds_count", mode="bm25") == 2
    assert value(families, "toolcat_list_duration_seconds_count") == 1
    assert value(families, "toolcat_call_duration_seconds_count") == 5
    assert value(families, "toolcat_call_errors_total", code="TOOL_ERROR") == 1
    assert value(families, "toolcat_call_errors_total", code="UNKNOWN_TOOL") == 2
    with Catalog(db) as catalog:
        revision = catalog.revision
    assert value(families, "toolcat_catalog_revision") == revision
    assert value(families, "toolcat_tools", state="active") == 4
    assert value(families, "toolcat_tools", state="deferred") == 2
    assert value(families, "toolcat_tools", state="deprecated") == 0
    assert value(families, "toolcat_replica") == 0
    assert families["toolcat_replica_lag_seconds"].samples == []  # a primary: no lag
    for secret in (TOKEN, SECRET_ARGUMENT, SECRET_QUERY, "flibbertigibbet", "forged", "evil"):
        assert secret not in text
    tools = {s.labels.get("tool") for f in families.values() for s in f.samples}
    assert tools <= {None, "", "other", "search_tools", "math.convert_units", "math.calculate"}


def test_an_admins_label_value_is_escaped(db: Path, tmp_path: Path, tokens: Path) -> None:
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _):

        async def call() -> None:
            async with http_session(url, "odd-team-token-2", mode=MODERN) as s:
                await s.all_tools()

        run(call)
        text, families = scrape(url)
    assert "line2" not in text.splitlines()[0] and not any(
        line.startswith("line2") for line in text.splitlines()
    )
    assert (
        value(
            families,
            "toolcat_requests_total",
            method="tools/list",
            tool="",
            status="ok",
            principal=ODD_NAME,
        )
        == 1
    )


def test_a_token_is_needed_unless_public(db: Path, tmp_path: Path, tokens: Path) -> None:
    with http_server(db, tmp_path, "--tokens", str(tokens)) as (url, _):
        for headers in ({}, {"Authorization": "Bearer wrong-token-99"}):
            refused = httpx2.get(metrics_url(url), headers=headers)
            assert refused.status_code == 401
            assert "toolcat_" not in refused.text
        scrape(url, "odd-team-token-2")  # any valid token may scrape
    with http_server(db, tmp_path, "--tokens", str(tokens), "--metrics-public") as (url, _):
        scrape(url, None)
        assert httpx2.post(url, json={}).status_code == 401  # /mcp still needs one


def test_no_metrics_when_turned_off(db: Path, tmp_path: Path) -> None:
    with http_server(db, tmp_path, "--no-metrics") as (url, _):
        assert httpx2.get(metrics_url(url)).status_code == 404


def test_the_grafana_dashboard_uses_only_metrics_a_scrape_has(db: Path, tmp_path: Path) -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-toolcat.json").read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    used = {name for expr in exprs for name in re.findall(r"\btoolcat_[a-z_]+", expr)}
    assert len(exprs) >= 8 and len(used) >= 10
    with http_server(db, tmp_path) as (url, _):
        run(lambda: load_anonymous(url))
        _, families = scrape(url, None)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    known = set(families) | {
        family.name + suffix
        for family in families.values()
        for suffix in suffixes.get(family.type, ())
    }
    assert used <= known, used - known


async def load_anonymous(url: str) -> None:
    async with http_session(url, None, mode=MODERN) as s:
        await s.all_tools()
        await s.call("search_tools", {"query": "convert units"})
        await s.call("calculate", {"expression": "2+3"})
