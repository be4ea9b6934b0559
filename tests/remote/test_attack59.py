"""attack59: calls forwarded to imported OpenAPI operations, after attack58's fixes.

An API's answers (their encoding, their pace, their cookies) and an OpenAPI document's
parameter names are input; only the base URL and the ``--header`` credentials are the
admin's."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from tests.remote.test_attack58 import RawServer, _document
from toolcat import Catalog
from toolcat.errors import ToolTimeoutError
from toolcat.remote.openapi import HTTPToolError, Operation, acall, call, close_all
from toolcat.runtime.results import bound_results, reset_results

SECRET = "s3cr3t-admin-key-59"
LIMIT = 1000


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(respond: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.sock.close()
    close_all()


def _operation(port: int, timeout: float = 10.0) -> Operation:
    return Operation(
        base_url=f"http://127.0.0.1:{port}/api", method="GET", path="/me", timeout=timeout
    )


# -- compressed answers: the bound is on decoded bytes, but one wire chunk decodes at once --


def _bomb(status: bytes, layers: int, size: int) -> Callable[[socket.socket], None]:
    """An answer of ``size`` zero bytes gzipped ``layers`` times (Content-Encoding lists each
    layer, as RFC 9110 allows and httpx decodes): a few hundred bytes on the wire."""
    body = b"\0" * size
    for _ in range(layers):
        body = gzip.compress(body, 9)
    encoding = b", ".join([b"gzip"] * layers)

    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: text/plain\r\nContent-Encoding: "
            + encoding
            + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
            + body
        )

    return respond


@pytest.mark.xfail(
    strict=True,
    reason="attack59: a ~200-byte doubly gzipped answer decodes 64 MB in memory past a 1 KB bound",
)
@pytest.mark.parametrize("status", [b"200 OK", b"500 Internal Server Error"], ids=["ok", "error"])
@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_compressed_answer_is_read_within_the_bound(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], status: bytes, path: str
) -> None:
    server = serve(_bomb(status, layers=2, size=64 << 20))
    operation = _operation(server.port)
    bound = bound_results(LIMIT)
    tracemalloc.start()
    try:
        try:
            call(operation, {}) if path == "sync" else asyncio.run(acall(operation, {}))
        except HTTPToolError as e:
            assert e.status == 500
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
        reset_results(bound)
    # The result is cut at 1 KB; reading may take a few MB, never the 64 MB it inflates to.
    assert peak < 16, f"{peak:.0f} MB held to read an answer cut at {LIMIT} bytes"


# -- the pooled client's cookie jar: one caller's answer sets what the next caller sends ----


@pytest.mark.xfail(
    strict=True,
    reason="attack59: the pooled httpx client's cookie jar replays an answer's Set-Cookie",
)
def test_a_cookie_an_api_sets_never_goes_with_later_calls(
    tmp_path: Path, serve: Callable[[Callable[[socket.socket], None]], RawServer]
) -> None:
    """The API answers the first call (one principal's) with a session cookie: the pooled,
    process-wide httpx client keeps it in its jar and sends it with every later call to
    that base URL, whoever makes it (another principal of the same server)."""

    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Set-Cookie: session=alice-" + SECRET.encode() + b"; Path=/\r\n"
            b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
        )

    server = serve(respond)
    with Catalog(tmp_path / "c.db") as cat:
        cat.register_openapi(_document(server.port, []), toolkit="h")
        assert cat.call("h.me", {}).success  # alice's call
        assert cat.call("h.me", {}).success  # bob's call
    assert len(server.heads) == 2
    assert server.header("Cookie") == [], "a cookie from an earlier answer was sent again"


# -- trickled status line and headers: the deadline covers only the body -------------------


def _trickled_head(pause: float) -> Callable[[socket.socket], None]:
    head = b"HTTP/1.1 200 OK\r\nX-Pad: aaaaaaaaaaaaaaaa\r\nContent-Length: 2\r\n\r\n{}"

    def respond(conn: socket.socket) -> None:
        for i in range(len(head)):  # each byte well within the read timeout
            conn.sendall(head[i : i + 1])
            time.sleep(pause)

    return respond


@pytest.mark.xfail(
    strict=True,
    reason="attack59: a head trickled a byte at a time holds a 1 s call (and its thread) ~4 s",
)
def test_a_trickled_head_stops_at_the_timeout(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(_trickled_head(0.07))
    started = time.monotonic()
    with pytest.raises((ToolTimeoutError, HTTPToolError)):
        call(_operation(server.port, timeout=1.0), {})
    took = time.monotonic() - started
    assert took < 2.5, f"a call with a 1 s timeout took {took:.1f} s"


# -- header names: a WSGI/CGI server reads X_Admin_Key as X-Admin-Key -----------------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        return None


def test_an_underscore_spelling_of_the_admins_header_is_left_out(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def app(environ: dict[str, Any], start: Any) -> list[bytes]:
        seen.append(environ.get("HTTP_X_ADMIN_KEY"))
        start("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]

    server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)  # the standard library's
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Catalog(tmp_path / "c.db") as cat:
            cat.register_openapi(
                _document(server.server_port, ["X_Admin_Key"]),
                toolkit="h",
                headers={"X-Admin-Key": SECRET},
            )
            result = cat.call("h.me", {"X_Admin_Key": "evil"})
    finally:
        server.shutdown()
        server.server_close()
        close_all()
    if result.error_code == "INVALID_ARGUMENTS":
        return  # refused, or left out at import (then not an argument): the fix
    assert result.success, result.error
    assert seen == [SECRET], f"the app read the admin's header as {seen!r}"


# -- held -----------------------------------------------------------------------------------


def test_held_a_content_length_that_lies_short_or_long_is_bounded(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    """Short: only the declared bytes are read; long and closed early: a clean error."""

    def short(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
            b"Connection: close\r\n\r\n" + b"y" * 100_000
        )

    def long(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 999999999\r\n"
            b"Connection: close\r\n\r\nabc"
        )

    bound = bound_results(LIMIT)
    try:
        assert call(_operation(serve(short).port), {}) == "yyyyy"
        with pytest.raises(HTTPToolError) as e:
            call(_operation(serve(long).port), {})
    finally:
        reset_results(bound)
    assert "\n" not in str(e.value)


def test_held_the_bound_follows_the_catalog_on_every_call_path(
    tmp_path: Path, serve: Callable[[Callable[[socket.socket], None]], RawServer]
) -> None:
    """Sync and async catalog calls, thread or process isolation: the answer is cut at the
    catalog's bound (OpenAPI tools always run in the server's process)."""
    body = b"y" * (3 * LIMIT)

    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body) + body
        )

    server = serve(respond)
    for isolation in ("thread", "process"):
        with Catalog(
            tmp_path / f"{isolation}.db", max_result_bytes=LIMIT, isolation=isolation
        ) as cat:
            cat.register_openapi(_document(server.port, []), toolkit="h")
            for result in (cat.call("h.me", {}), asyncio.run(cat.acall("h.me", {}))):
                assert result.success and result.truncated
                assert result.data == "y" * LIMIT
