"""attack60: the forwarder's decoder, deadline and pool after attack59's fixes.

A keep-alive loopback server answers each request on a connection in turn, so a connection
handed back to the pool half-read, or a deadline outliving its call, shows in the next call."""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.remote.loopback import Answer, KeepAlive, ok
from toolcat.errors import ToolTimeoutError
from toolcat.remote.openapi import HTTPToolError, Operation, acall, async_client, call, close_all
from toolcat.runtime.results import CutText, bound_results, reset_results


def trickle(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n")
    for _ in range(100):
        conn.sendall(b"x")
        time.sleep(0.05)


NEXT = ok(b'{"next": true}')


@pytest.fixture
def serve() -> Iterator[Callable[[list[Answer]], KeepAlive]]:
    servers: list[KeepAlive] = []

    def start(answers: list[Answer]) -> KeepAlive:
        servers.append(KeepAlive(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.sock.close()
    close_all()


def _op(port: int, timeout: float = 5.0, **kw: Any) -> Operation:
    return Operation(
        base_url=f"http://127.0.0.1:{port}/api", method="GET", path="/me", timeout=timeout, **kw
    )


def _deadline_now() -> float | None:
    from toolcat.remote import _deadline

    return _deadline._deadline.get()


async def _on_loop(operation: Operation, n: int) -> list[Any]:
    try:
        return [await acall(operation, {}) for _ in range(n)]
    finally:
        await async_client(operation.base_url).aclose()


# -- findings -------------------------------------------------------------------------------


def test_a_multi_member_gzip_answer_is_decoded_whole_or_marked_cut(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    # RFC 1952: a gzip file is a series of members; gzip -d and Python's gzip read them all.
    body = gzip.compress(b'{"a": "first", ') + gzip.compress(b'"b": "second"}')
    server = serve([ok(body, b"Content-Encoding: gzip\r\n")])
    result = call(_op(server.port), {})
    # Today: '{"a": "first", ' returned as the whole answer (no CutText, no truncation mark).
    assert result == {"a": "first", "b": "second"} or isinstance(result, CutText)


@pytest.mark.parametrize("charset", [b"undefined", b"idna"])
def test_a_charset_python_cannot_decode_with_replace_is_no_bare_exception(
    serve: Callable[[list[Answer]], KeepAlive], charset: bytes
) -> None:
    server = serve([ok(b"hello", ctype=b"text/plain; charset=" + charset)])
    try:
        result = call(_op(server.port), {})
    except HTTPToolError:
        return
    assert result == "hello"  # _decoded catches LookupError only; these raise UnicodeError


def test_a_compressed_answer_read_whole_leaves_its_connection_pooled(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve([ok(gzip.compress(b'{"a": 1}'), b"Content-Encoding: gzip\r\n")])
    assert [call(_op(server.port), {}) for _ in range(3)] == [{"a": 1}] * 3
    assert server.connections == 1  # today: 3, one per compressed answer


def test_a_same_origin_redirect_hop_keeps_the_admins_cookie_header(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve(
        [b"HTTP/1.1 307 Temporary\r\nLocation: /api/me\r\nContent-Length: 0\r\n\r\n", NEXT]
    )
    operation = _op(server.port, headers={"Cookie": "sid=admin-session"})
    assert call(operation, {}) == {"next": True}
    assert len(server.heads) == 2
    assert b"\r\nCookie: sid=admin-session" in server.heads[1]


def test_raw_deflate_in_small_chunks_decodes_as_in_one(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = packer.compress(b'{"a": 1}') + packer.flush()

    def chunked(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: deflate"
            b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for byte in raw:
            conn.sendall(b"1\r\n" + bytes([byte]) + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    server = serve([ok(raw, b"Content-Encoding: deflate\r\n"), chunked])
    assert call(_op(server.port), {}) == {"a": 1}  # held: raw deflate in one chunk
    assert call(_op(server.port), {}) == {"a": 1}  # refused today


# -- what held -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["sync", "async"])
def test_held_a_cut_body_never_returns_its_connection_half_read(
    serve: Callable[[list[Answer]], KeepAlive], path: str
) -> None:
    # The rest of the cut body looks like a whole next answer: a pooled half-read connection
    # would hand it to the next call.
    smuggled = b"x" * 5000 + b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"evil": 666}'
    server = serve([ok(smuggled, ctype=b"text/plain"), NEXT])
    operation = _op(server.port)
    bound = bound_results(1000)
    try:
        results = (
            [call(operation, {}) for _ in range(2)]
            if path == "sync"
            else asyncio.run(_on_loop(operation, 2))
        )
    finally:
        reset_results(bound)
    assert isinstance(results[0], CutText)
    assert results[1] == {"next": True}
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        gzip.compress(b'{"a": 1}') + b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"evil": 666}',
        zlib.compress(b'{"a": 1}') + b"\0" * 100,
    ],
    ids=["gzip", "deflate"],
)
def test_held_bytes_after_a_compressed_body_are_dropped_with_their_connection(
    serve: Callable[[list[Answer]], KeepAlive], answer: bytes
) -> None:
    coding = b"gzip" if answer[:2] == b"\x1f\x8b" else b"deflate"
    server = serve([ok(answer, b"Content-Encoding: " + coding + b"\r\n"), NEXT])
    assert call(_op(server.port), {}) == {"a": 1}
    assert call(_op(server.port), {}) == {"next": True}


@pytest.mark.parametrize("path", ["sync", "async"])
def test_held_a_timed_out_call_poisons_neither_the_pool_nor_the_next_call(
    serve: Callable[[list[Answer]], KeepAlive], path: str
) -> None:
    server = serve([trickle, NEXT])
    slow, fast = _op(server.port, timeout=0.6), _op(server.port, timeout=5.0)

    async def both() -> Any:
        try:
            with pytest.raises(ToolTimeoutError):
                await acall(slow, {})
            return [await acall(fast, {}) for _ in range(3)]
        finally:
            await async_client(fast.base_url).aclose()

    started = time.monotonic()
    if path == "sync":
        with pytest.raises(ToolTimeoutError):
            call(slow, {})
        assert time.monotonic() - started < 2
        results = [call(fast, {}) for _ in range(3)]
    else:
        results = asyncio.run(both())
    assert results == [{"next": True}] * 3
    assert server.connections == 2  # the timed-out one closed, the next pooled
    assert _deadline_now() is None


def test_held_one_threads_deadline_is_no_other_threads(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve([trickle, NEXT])
    with ThreadPoolExecutor(4) as pool:
        slow = pool.submit(call, _op(server.port, timeout=0.8), {})
        time.sleep(0.2)
        fast = [pool.submit(call, _op(server.port, timeout=5.0), {}) for _ in range(6)]
        with pytest.raises(ToolTimeoutError):
            slow.result()
        time.sleep(0.3)  # past the slow call's deadline: the pooled connections still serve
        fast += [pool.submit(call, _op(server.port, timeout=5.0), {}) for _ in range(3)]
        assert [f.result() for f in fast] == [{"next": True}] * 9


def test_held_one_tasks_deadline_is_no_other_tasks(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve([trickle, NEXT])

    async def main() -> list[Any]:
        async def fast() -> Any:
            await asyncio.sleep(0.2)
            return await acall(_op(server.port, timeout=5.0), {})

        try:
            got = await asyncio.gather(
                acall(_op(server.port, timeout=0.8), {}), fast(), return_exceptions=True
            )
            got.append(await acall(_op(server.port, timeout=5.0), {}))
            return got
        finally:
            await async_client(_op(server.port).base_url).aclose()

    got = asyncio.run(main())
    assert isinstance(got[0], ToolTimeoutError)
    assert got[1:] == [{"next": True}] * 2


@pytest.mark.parametrize(
    "coding",
    [
        b"identity, gzip",
        b"GZip",
        b" x-gzip ",
        b"gzip,",
        b", gzip",
        b"gzip, identity",
        b"identity,,gzip",
    ],
)
def test_held_odd_spellings_of_one_gzip_layer_decode(
    serve: Callable[[list[Answer]], KeepAlive], coding: bytes
) -> None:
    server = serve([ok(gzip.compress(b'{"a": 1}'), b"Content-Encoding: " + coding + b"\r\n")])
    assert call(_op(server.port), {}) == {"a": 1}


@pytest.mark.parametrize(
    "lines",
    [b"Content-Encoding: gzip\r\nContent-Encoding: gzip\r\n", b"Content-Encoding: gzip;q=1\r\n"],
)
def test_held_stacked_or_parametrised_codings_are_refused_without_the_body(
    serve: Callable[[list[Answer]], KeepAlive], lines: bytes
) -> None:
    server = serve([ok(gzip.compress(b"SECRET-BODY-TEXT"), lines, ctype=b"text/plain")])
    with pytest.raises(HTTPToolError) as e:
        call(_op(server.port), {})
    assert "SECRET-BODY-TEXT" not in str(e.value) and "\n" not in str(e.value)


def test_held_a_redirect_hop_asks_identity_and_is_decoded(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve(
        [
            b"HTTP/1.1 302 Found\r\nLocation: /api/me2\r\nSet-Cookie: s=1\r\n"
            b"Content-Length: 0\r\n\r\n",
            ok(gzip.compress(b'{"a": 1}'), b"Content-Encoding: gzip\r\n"),
        ]
    )
    assert call(_op(server.port), {}) == {"a": 1}
    assert all(b"Accept-Encoding: identity" in head for head in server.heads)
    assert not any(b"Cookie" in head for head in server.heads)


def test_held_a_deflate_bomb_is_cut_at_the_bound(
    serve: Callable[[list[Answer]], KeepAlive],
) -> None:
    server = serve(
        [
            ok(
                zlib.compress(b"\0" * (32 << 20), 9),
                b"Content-Encoding: deflate\r\n",
                ctype=b"text/plain",
            )
        ]
    )
    bound = bound_results(1000)
    try:
        result = call(_op(server.port), {})
    finally:
        reset_results(bound)
    assert isinstance(result, CutText) and len(result) <= 1001


def test_an_httpx_whose_pools_cannot_be_reached_keeps_its_client_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``bounded`` reaches into httpx's pools; an httpx built otherwise keeps working, with
    per-wait timeouts, and a warning once a process (not per client)."""
    from toolcat.remote import _deadline

    _deadline._warn_unbounded.cache_clear()
    odd = object()
    with caplog.at_level(logging.WARNING, logger="toolcat.remote._deadline"):
        assert _deadline.bounded(odd) is odd
        assert _deadline.bounded(object()) is not odd
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "not the whole exchange" in notes[0], notes
