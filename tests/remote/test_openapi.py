"""Forwarding to imported OpenAPI operations, attacked: arguments that try to move the request
off its path, redirects that try to carry the configured headers to another origin, and
secrets that must never appear in an error. Against real local HTTP servers."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures import openapi_app
from tests.helpers import ROOT, free_port
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import ImportFailedError
from toolcat.models import Toolkit
from toolcat.remote.openapi import Operation, close_all

KEY = "k3y-7d2e41-secret"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """Two servers of the test API on different ports: two origins."""
    api, first = openapi_app.serve(free_port())
    other, second = openapi_app.serve(free_port())
    yield api, other
    first.should_exit = second.should_exit = True


@pytest.fixture
def api(servers: tuple[str, str]) -> Iterator[str]:
    openapi_app.SEEN.clear()
    yield servers[0]
    close_all()


def _get(path: str, op_id: str, *params: str, query: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "get": {
            "operationId": op_id,
            "parameters": [
                *({"name": p, "in": "path", "required": True} for p in params),
                *({"name": q, "in": "query"} for q in query),
            ],
            "responses": {"200": {"description": "ok"}},
        }
    }


DOCUMENT = {
    "openapi": "3.1.0",
    "info": {"title": "Paths", "version": "1"},
    "paths": {
        "/users/{id}/profile": _get("/users/{id}/profile", "profile", "id"),
        "/files/{a}/{b}": _get("/files/{a}/{b}", "file", "a", "b"),
        "/redirect": _get("/redirect", "redirect", query=("to",)),
        "/refuse": _get("/refuse", "refuse"),
    },
}

# Values that, sent as they are, resolve to another path (or would at a server or proxy that
# decodes percent-escapes or normalises Unicode before routing).
HOSTILE = [
    ".",
    "..",
    "%2e%2e",
    "%2E%2E",
    ".%2e",
    "%252e%252e",
    "../../../etc/passwd",
    "a/../..",
    "..\\..",
    "\\..",
    "..%2f..",
    "%2f..%2f",
    "\uff0e\uff0e",  # fullwidth full stops
    "\u2025",  # two dot leader: NFKC ".."
    "\u2024",  # one dot leader: NFKC "."
    "\uff0f..",  # fullwidth solidus
    " .. ",
    "",
    "?admin=1",
    "#top",
    "a/b",
    "a\\b",
    "x?y#z",
    "%00",
    "..;",
    "%" + "25" * 12 + "2e",  # "." encoded thirteen times over
    "%" + "25" * 100_000 + "2e",  # a cost bound: refused at once, not decoded 100,000 times
    "%25" * 100_000 + "2e",  # one decoding makes it "%%%...%.": refused as too long a URL
]


@pytest.fixture
def paths(catalog: Catalog, api: str, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    monkeypatch.setenv("PATHS_KEY", KEY)
    catalog.register_openapi(
        DOCUMENT, toolkit="paths", base_url=f"{api}/api/v1", headers={"X-Api-Key": "${PATHS_KEY}"}
    )
    return catalog


def _landed(pattern: str) -> None:
    """Every request the API saw is on ``pattern`` (a raw path)."""
    for seen in openapi_app.SEEN:
        assert re.fullmatch(pattern, seen["raw_path"]), seen["raw_path"]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: repr(v)[:40])
def test_a_path_parameter_never_moves_the_request(paths: Catalog, value: str) -> None:
    result = paths.call("profile", {"id": value})
    if result.success:
        assert len(openapi_app.SEEN) == 1
        assert result.data["raw_path"].count("/") == 5  # /api/v1/users/ONE/profile
    else:
        assert result.error_code == "INVALID_ARGUMENTS", result
        assert "path parameter 'id'" in (result.error or "") or "URL too long" in (
            result.error or ""
        )
        assert openapi_app.SEEN == []
    _landed(r"/api/v1/users/[^/]+/profile")


@pytest.mark.parametrize(
    ("a", "b"), [("..", ".."), ("%2e%2e", "%2e%2e"), (".", ".."), ("\u2025", "."), ("ok", "..")]
)
def test_two_path_parameters_never_climb(paths: Catalog, a: str, b: str) -> None:
    result = paths.call("file", {"a": a, "b": b})
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert openapi_app.SEEN == []


def test_plain_values_still_arrive_as_one_segment(paths: Catalog) -> None:
    result = paths.call("file", {"a": "report 2024.txt", "b": "v1.2..final"})
    assert result.success, result
    assert result.data["raw_path"] == "/api/v1/files/report%202024.txt/v1.2..final"
    assert result.data["headers"]["x-api-key"] == KEY


def test_async_calls_are_held_to_the_same_rule(paths: Catalog) -> None:
    result = asyncio.run(paths.acall("profile", {"id": "%2e%2e"}))
    assert result.error_code == "INVALID_ARGUMENTS"
    fine = asyncio.run(paths.acall("profile", {"id": "7"}))
    assert fine.success and fine.data["raw_path"] == "/api/v1/users/7/profile"


@pytest.mark.parametrize(
    ("base", "template"),
    [
        ("/api/v1", "/users/../../admin"),
        ("/api/v1", "/users/./{id}/../../.."),
        ("/api/v1", "/%2e%2e/admin"),
        ("/api/v1", "/x/%252E%252E/admin"),
        ("", "@localhost/x"),
        ("", ".localhost/x"),
        ("/api", "x/{id}"),  # /apix/... is not under /api
    ],
)
def test_a_template_that_leaves_its_base_is_refused_before_sending(
    catalog: Catalog, api: str, base: str, template: str
) -> None:
    """A stored plan edited behind toolcat's back (or a hostile document) cannot send a
    request above the base URL or to another host: the final URL is checked."""
    operation = Operation(base_url=f"{api}{base}", method="GET", path=template)
    tool = {"name": "t", "description": "d", "implementation": operation.implementation()}
    catalog.register(Toolkit.model_validate({"toolkit": "edited", "version": "1", "tools": [tool]}))
    result = catalog.call("edited.t")
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert "refused to send" in (result.error or "")
    assert openapi_app.SEEN == []


def test_cross_origin_redirects_are_not_followed_with_the_headers(
    paths: Catalog, servers: tuple[str, str]
) -> None:
    api, other = servers
    other_port = int(other.rsplit(":", 1)[1])
    localhost = api.replace("127.0.0.1", "localhost")  # same port, another host: another origin
    for target in (f"{other}/landing", f"{localhost}/api/v1/landing", f"{other}/api/v1/x"):
        for result in (
            paths.call("redirect", {"to": target}),
            asyncio.run(paths.acall("redirect", {"to": target})),
        ):
            assert result.error_code == "TOOL_ERROR", result
            assert "redirecting to another origin" in (result.error or "")
            assert KEY not in (result.error or "")
    assert openapi_app.SEEN == []
    assert not any(s["port"] == other_port for s in openapi_app.SEEN)


def test_same_origin_redirects_are_followed(paths: Catalog) -> None:
    result = paths.call("redirect", {"to": "/api/v1/landing"})
    assert result.success, result
    assert result.data["raw_path"] == "/api/v1/landing"
    assert result.data["headers"]["x-api-key"] == KEY


def test_spec_urls_follow_no_redirect_to_another_origin(
    catalog: Catalog, servers: tuple[str, str]
) -> None:
    api, other = servers
    with pytest.raises(ImportFailedError, match="redirects to another origin"):
        catalog.register_openapi(f"{api}/api/redirect?to={other}/openapi.json", toolkit="pets")
    moved = catalog.register_openapi(f"{api}/api/redirect?to=/openapi.json", toolkit="pets")
    assert moved.tools == 7


@pytest.mark.parametrize(
    "secret",
    [
        f"Bearer {KEY}\n",
        f"Bearer {KEY}\r\nX-Injected: 1",
        f"Bearer {KEY}é",
        f"{KEY}\x01",
        f" {KEY}",
    ],
    ids=["trailing-newline", "crlf", "non-ascii", "control", "leading-space"],
)
def test_an_unsendable_secret_is_named_never_shown(
    catalog: Catalog,
    api: str,
    secret: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("BAD_TOKEN", secret)
    catalog.register_openapi(
        DOCUMENT,
        toolkit="paths",
        base_url=f"{api}/api/v1",
        headers={"Authorization": "${BAD_TOKEN}"},
    )
    for result in (
        catalog.call("profile", {"id": "1"}),
        asyncio.run(catalog.acall("profile", {"id": "1"})),
    ):
        assert result.error_code == "IMPORT_FAILED", result
        assert "header 'Authorization' cannot be sent" in (result.error or "")
        assert "${BAD_TOKEN}" in (result.error or "")
        assert KEY not in (result.error or "")
    out = CliRunner().invoke(
        cli, ["--db", str(catalog.path), "call", "profile", "--args", '{"id": "1"}']
    )
    assert "header 'Authorization'" in out.output and KEY not in out.output
    assert KEY not in caplog.text
    assert openapi_app.SEEN == []


def test_a_secret_an_api_echoes_in_an_error_is_not_shown(
    catalog: Catalog, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATHS_KEY", KEY)
    for header in ("Bearer ${PATHS_KEY}", f"Bearer {KEY}"):  # referenced, or typed in full
        catalog.register_openapi(
            DOCUMENT,
            toolkit="paths",
            base_url=f"{api}/api/v1",
            headers={"Authorization": header},
            replace=True,
        )
        result = catalog.call("paths.refuse")
        assert result.error_code == "TOOL_ERROR", result
        assert "answered 401" in (result.error or "") and "the key *** is not valid" in (
            result.error or ""
        )
        assert KEY not in (result.error or "")


def test_an_unsendable_header_argument_is_invalid_arguments(catalog: Catalog, api: str) -> None:
    document = {
        "openapi": "3.1.0",
        "info": {"title": "h", "version": "1"},
        "paths": {
            "/h": {"get": {"operationId": "h", "parameters": [{"name": "X-Id", "in": "header"}]}}
        },
    }
    catalog.register_openapi(document, toolkit="h", base_url=f"{api}/api")
    result = catalog.call("h", {"X-Id": "a\r\nX-Injected: 1"})
    assert result.error_code == "INVALID_ARGUMENTS" and "header 'X-Id'" in (result.error or "")


def test_an_unsendable_secret_for_an_mcp_server_is_named_never_shown(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAD_TOKEN", f"Bearer {KEY}\n")
    with pytest.raises(ImportFailedError, match="header 'Authorization' cannot be sent") as e:
        catalog.register_mcp(
            f"http://127.0.0.1:{free_port()}/mcp",
            toolkit="m",
            http=True,
            headers={"Authorization": "${BAD_TOKEN}"},
            timeout=5,
        )
    assert KEY not in str(e.value)


def test_a_literal_secret_in_an_openapi_header_is_warned_about(db_path: Any, api: str) -> None:
    out = CliRunner().invoke(
        cli,
        [
            "--db",
            str(db_path),
            "register",
            "--openapi",
            f"{api}/openapi.json",
            "--toolkit",
            "pets",
            "--header",
            f"X-Api-Key={KEY}",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "warning: header 'X-Api-Key' is stored in the catalog as typed" in out.output


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_unsendable_secret_never_reaches_an_mcp_result_or_the_server_log(
    db_path: Path, api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    pytest.importorskip("mcp")
    from tests.server import clients

    # The server runs this checkout's toolcat (src/ first), whatever the venv installed.
    inherited = clients.server_env
    monkeypatch.setattr(
        clients,
        "server_env",
        lambda tmp, **extra: {
            **inherited(tmp, **extra),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        },
    )
    monkeypatch.setenv("BAD_TOKEN", f"Bearer {KEY}\n")
    with Catalog(db_path) as catalog:
        catalog.register_openapi(
            DOCUMENT,
            toolkit="paths",
            base_url=f"{api}/api/v1",
            headers={"Authorization": "${BAD_TOKEN}"},
        )

    async def check() -> None:
        async with clients.stdio_session(db_path, tmp_path, mode=mode) as session:
            result = await session.call("profile", {"id": "1"})
            assert clients.error_code(result) == "IMPORT_FAILED", result.content
            assert "header 'Authorization' cannot be sent" in clients.text(result)
            assert KEY not in str(result.model_dump())

    clients.run(check)
    assert KEY not in (tmp_path / "server-stderr.txt").read_text()
    assert openapi_app.SEEN == []
