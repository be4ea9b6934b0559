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
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from tests.remote import test_attack58
from tests.remote.loopback import KeepAlive, RawServer, ok
from tests.remote.test_attack58 import _document, _operation
from toolcat import Catalog
from toolcat.errors import ToolTimeoutError
from toolcat.remote.openapi import (
    HTTPToolError,
    Operation,
    acall,
    async_client,
    call,
    close_all,
)
from toolcat.runtime.results import CutText, bound_results, reset_results

serve = test_attack58.serve  # loopback servers answering as each test says

SECRET = "s3cr3t-admin-key-59"
LIMIT = 1000


# -- compressed answers: the bound is on decoded bytes, but one wire chunk decodes at once --


def _bomb(status: bytes, layers: int, size: int) -> Callable[[socket.socket], None]:
    """An answer of ``size`` zero bytes gzipped ``layers`` times (Content-Encoding lists each
    layer, as RFC 9110 allows and httpx decodes): a few hundred bytes on the wire."""
    body = b"\0" * size
    for _ in range(layers):
        body = gzip.compress(body, 9)
    return _encoded(body, b", ".join([b"gzip"] * layers), status)


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
        with pytest.raises(HTTPToolError) as e:  # stacked codings are refused, never read
            call(operation, {}) if path == "sync" else asyncio.run(acall(operation, {}))
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
        reset_results(bound)
    # The result is cut at 1 KB; reading may take a few MB, never the 64 MB it inflates to.
    assert peak < 16, f"{peak:.0f} MB held to read an answer cut at {LIMIT} bytes"
    assert e.value.status == (500 if status.startswith(b"500") else None)
    assert "'gzip, gzip'" in str(e.value) and "\n" not in str(e.value)


# -- the pooled client's cookie jar: one caller's answer sets what the next caller sends ----


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


# -- the fixes' edges: compressed answers ---------------------------------------------------


def _encoded(
    body: bytes, encoding: bytes, status: bytes = b"200 OK"
) -> Callable[[socket.socket], None]:
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


def _run(path: str, operation: Operation) -> Any:
    return call(operation, {}) if path == "sync" else asyncio.run(acall(operation, {}))


def _deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        (b"gzip", lambda d: gzip.compress(d, 9)),
        (b"x-gzip", lambda d: gzip.compress(d, 9)),
        (b"deflate", lambda d: _deflate(d, zlib.MAX_WBITS)),
        (b"deflate", lambda d: _deflate(d, -zlib.MAX_WBITS)),  # raw, as some servers send
        (b"identity", lambda d: d),
    ],
    ids=["gzip", "x-gzip", "deflate", "raw-deflate", "identity"],
)
def test_a_compressed_answer_at_the_bound_is_whole_and_one_over_is_cut(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    encoding: bytes,
    pack: Callable[[bytes], bytes],
    path: str,
) -> None:
    bound = bound_results(LIMIT)
    try:
        at = serve(_encoded(pack(b"a" * LIMIT), encoding))
        over = serve(_encoded(pack(b"b" * (LIMIT + 1)), encoding))
        whole = _run(path, _operation(at.port))
        cut = _run(path, _operation(over.port))
    finally:
        reset_results(bound)
    assert whole == "a" * LIMIT and not isinstance(whole, CutText)
    assert isinstance(cut, CutText) and cut.startswith("b" * LIMIT)
    assert at.header("Accept-Encoding") == ["identity"]


@pytest.mark.parametrize("path", ["sync", "async"])
def test_one_gzip_layer_inflating_a_thousandfold_is_cut_within_the_bound(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], path: str
) -> None:
    """One layer, 64 MB of zeros in ~64 KB: httpx inflated a whole network read at once."""
    server = serve(_encoded(gzip.compress(b"\0" * (64 << 20), 9), b"gzip"))
    bound = bound_results(LIMIT)
    tracemalloc.start()
    try:
        result = _run(path, _operation(server.port))
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
        reset_results(bound)
    assert isinstance(result, CutText) and len(result) == LIMIT + 1
    assert peak < 16, f"{peak:.0f} MB held to read an answer cut at {LIMIT} bytes"


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize(
    "encoding",
    [b"br", b"zstd", b"gzip, deflate", b"gzip, identity, gzip", b"compress", b"x-\x9b[2J"],
    ids=["br", "zstd", "stacked", "stacked-identity", "compress", "control"],
)
@pytest.mark.parametrize("status", [b"200 OK", b"502 Bad Gateway"], ids=["ok", "error"])
def test_a_coding_not_read_is_refused_in_one_line_without_the_body(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    encoding: bytes,
    status: bytes,
    path: str,
) -> None:
    server = serve(_encoded(b"BODY-TEXT " + SECRET.encode(), encoding, status))
    with pytest.raises(HTTPToolError) as e:
        _run(path, _operation(server.port))
    message = str(e.value)
    assert "GET http://127.0.0.1" in message and "Content-Encoding" in message
    assert "BODY-TEXT" not in message and SECRET not in message
    assert message.isprintable() and message.isascii()
    assert e.value.status == (502 if status.startswith(b"502") else None)


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_damaged_gzip_answer_is_one_clean_error(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], path: str
) -> None:
    server = serve(_encoded(b"\x1f\x8b\x08\x00garbage-" + SECRET.encode(), b"gzip"))
    with pytest.raises(HTTPToolError) as e:
        _run(path, _operation(server.port))
    assert "damaged" in str(e.value) and SECRET not in str(e.value)


@pytest.mark.parametrize("path", ["sync", "async"])
def test_endless_compressed_bytes_that_decode_to_nothing_are_not_read_forever(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], path: str
) -> None:
    """Empty deflate blocks: compressed bytes without end that never pass the decoded bound."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    start = packer.compress(b"x") + packer.flush(zlib.Z_SYNC_FLUSH)
    empty = b"\x00\x00\x00\xff\xff" * 2000  # empty stored blocks: 5 bytes, nothing decoded

    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
            b"Connection: close\r\n\r\n" + start
        )
        while True:
            conn.sendall(empty)

    server = serve(respond)
    bound = bound_results(LIMIT)
    started = time.monotonic()
    try:
        result = _run(path, _operation(server.port, timeout=10.0))
    finally:
        reset_results(bound)
    assert isinstance(result, CutText) and result == "x"
    assert time.monotonic() - started < 5


# -- the fixes' edges: cookies ----------------------------------------------------------------


def _cookie_setter(server: list[RawServer]) -> Callable[[socket.socket], None]:
    """Answers /api/me with a redirect to /api/me?hop=1 and a cookie; the hop with another
    cookie and ``{}``."""

    def respond(conn: socket.socket) -> None:
        if "hop=1" in server[0].heads[-1].split("\r\n", 1)[0]:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Set-Cookie: hop=" + SECRET.encode() + b"; Path=/\r\n"
                b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
            )
            return
        conn.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: /api/me?hop=1\r\n"
            b"Set-Cookie: first=" + SECRET.encode() + b"; Path=/\r\n"
            b"Content-Length: 0\r\nConnection: close\r\n\r\n"
        )

    return respond


def _cookie_server(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], headers: dict[str, str]
) -> tuple[RawServer, Operation]:
    """A server setting cookies (``_cookie_setter``), and an operation on it with a cookie
    parameter ``sid`` and the admin's ``headers``."""
    holder: list[RawServer] = []
    server = serve(_cookie_setter(holder))
    holder.append(server)
    operation = Operation(
        base_url=f"http://127.0.0.1:{server.port}/api",
        method="GET",
        path="/me",
        args={"sid": ("cookie", "sid")},
        headers=headers,
    )
    return server, operation


@pytest.mark.parametrize("path", ["sync", "async"])
def test_no_cookie_an_answer_sets_comes_back_across_redirects_or_calls(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], path: str
) -> None:
    server, operation = _cookie_server(serve, {"Cookie": "admin=1"})
    plain = _operation(server.port)

    async def both() -> None:
        await acall(operation, {})
        await acall(plain, {})

    if path == "sync":
        call(operation, {})
        call(plain, {})
    else:
        asyncio.run(both())
    assert len(server.heads) == 4  # each call: the request and its hop
    cookies = [
        [line for line in head.split("\r\n") if line.lower().startswith("cookie:")]
        for head in server.heads
    ]
    # The admin's Cookie header goes with the request and its same-origin hop (attack60),
    # as the other configured headers do; a cookie an answer set never goes anywhere.
    assert cookies[:2] == [["Cookie: admin=1"]] * 2, "the admin's Cookie header is sent as given"
    assert cookies[2:] == [[], []], "a cookie an answer set was sent again"


def test_a_callers_own_cookie_parameter_is_still_sent(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server, operation = _cookie_server(serve, {})
    call(operation, {"sid": "mine"})
    call(operation, {"sid": "again"})
    assert [h for h in server.heads[2].split("\r\n") if h.lower().startswith("cookie:")] == [
        "Cookie: sid=again"
    ]


# -- the fixes' edges: one deadline for the whole exchange ----------------------------------


def test_a_trickled_head_stops_at_the_timeout_on_the_async_path(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(_trickled_head(0.07))
    started = time.monotonic()
    with pytest.raises((ToolTimeoutError, HTTPToolError)):
        asyncio.run(acall(_operation(server.port, timeout=1.0), {}))
    took = time.monotonic() - started
    assert took < 2.5, f"a call with a 1 s timeout took {took:.1f} s"


@pytest.mark.parametrize("path", ["sync", "async"])
def test_slow_redirect_hops_stop_at_the_timeout(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], path: str
) -> None:
    """Each hop answers in 0.4 s, inside the 1 s per-read timeout; five of them are not."""

    def respond(conn: socket.socket) -> None:
        time.sleep(0.4)
        conn.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: /api/me\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n"
        )

    server = serve(respond)
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError):
        _run(path, _operation(server.port, timeout=1.0))
    took = time.monotonic() - started
    assert took < 2.0, f"a call with a 1 s timeout took {took:.1f} s"


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_fast_call_still_works_and_its_connection_is_pooled(path: str) -> None:
    server = KeepAlive([ok(b'{"ok": true}')])
    operation = _operation(server.port, timeout=5.0)

    async def three() -> list[Any]:
        try:
            return [await acall(operation, {}) for _ in range(3)]
        finally:  # its kept-alive connection belongs to this loop
            await async_client(operation.base_url).aclose()

    try:
        results = (
            [call(operation, {}) for _ in range(3)] if path == "sync" else asyncio.run(three())
        )
    finally:
        server.sock.close()
        close_all()
    assert results == [{"ok": True}] * 3
    assert (len(server.heads), server.connections) == (3, 1)
    assert _deadline_now() is None, "the deadline outlived its call"


def _deadline_now() -> float | None:
    from toolcat.remote import _deadline

    return _deadline._deadline.get()
