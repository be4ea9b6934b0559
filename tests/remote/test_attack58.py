"""attack58: calls forwarded to imported OpenAPI operations.

The OpenAPI document (its parameter names) and the API's answers are input; only the base
URL and the ``--header`` credentials are the admin's."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import ROOT
from tests.remote.loopback import RawServer
from toolcat import Catalog
from toolcat.errors import InvalidArgumentsError, ToolTimeoutError
from toolcat.remote.openapi import HTTPToolError, Operation, acall, build_request, call, close_all
from toolcat.runtime.results import CutText, bound_results, reset_results, truncate

SECRET = "s3cr3t-admin-token-7f1e"


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    server = RawServer()
    yield server
    server.sock.close()
    close_all()


def _document(port: int, header_params: list[str]) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "H", "version": "1"},
        "servers": [{"url": f"http://127.0.0.1:{port}/api"}],
        "paths": {
            "/me": {
                "get": {
                    "operationId": "me",
                    "parameters": [
                        {"name": n, "in": "header", "schema": {"type": "string"}}
                        for n in header_params
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }


def test_a_caller_cannot_set_the_host_the_credentials_go_to(
    catalog: Catalog, raw_server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A58_TOKEN", SECRET)
    try:
        catalog.register_openapi(
            _document(raw_server.port, ["Host", "X-Trace"]),
            toolkit="h",
            headers={"Authorization": "Bearer ${A58_TOKEN}"},
        )
    except Exception:
        return  # refusing a document that lets callers pick the Host is a fix too
    result = catalog.call("h.me", {"Host": "internal-admin.example", "X-Trace": "t1"})
    if not result.success:
        assert result.error_code == "INVALID_ARGUMENTS", result.error
        return
    # Sent: the Host must be the base URL's authority, where the admin pointed the secret.
    assert raw_server.header("Authorization") == [f"Bearer {SECRET}"]
    assert raw_server.header("Host") == [f"127.0.0.1:{raw_server.port}"]


def test_ordinary_header_parameters_still_arrive(
    catalog: Catalog, raw_server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A58_TOKEN", SECRET)
    catalog.register_openapi(
        _document(raw_server.port, ["X-Trace"]),
        toolkit="h",
        headers={"Authorization": "Bearer ${A58_TOKEN}"},
    )
    result = catalog.call("h.me", {"X-Trace": "t1"})
    assert result.success, result.error
    assert raw_server.header("X-Trace") == ["t1"]
    assert raw_server.header("Host") == [f"127.0.0.1:{raw_server.port}"]


# A child process: an API that answers 600 MB; the call's peak memory is measured there.
BIG_BODY = r"""
import json, resource, socket, sys, threading
from toolcat import Catalog

SIZE = 600 << 20

def serve(sock):
    while True:
        conn, _ = sock.accept()
        def handle(conn):
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\n\r\n" % SIZE)
                block = b"x" * (1 << 20)
                for _ in range(SIZE >> 20):
                    conn.sendall(block)
            except OSError:
                pass
            finally:
                conn.close()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()

sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen()
threading.Thread(target=serve, args=(sock,), daemon=True).start()
port = sock.getsockname()[1]
doc = {"openapi": "3.1.0", "info": {"title": "Big", "version": "1"},
       "servers": [{"url": f"http://127.0.0.1:{port}/api"}],
       "paths": {"/big": {"get": {"operationId": "big",
                                  "responses": {"200": {"description": "ok"}}}}}}
cat = Catalog(sys.argv[1])
cat.register_openapi(doc, toolkit="big")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = cat.call("big.big", {}, timeout=20)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_mb": (after - before) // 1024, "success": result.success,
                  "code": result.error_code, "error": (result.error or "")[:200],
                  "truncated": result.truncated}))
"""


def test_an_api_answer_is_read_within_a_bound(tmp_path: Any) -> None:
    def limit() -> None:  # keep the machine safe on the code before a fix
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    done = subprocess.run(
        [sys.executable, "-c", BIG_BODY, str(tmp_path / "big.db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "MemoryError" not in report["error"], report
    # The result is bounded at 1 MB; reading the answer may take a few times that, not 600.
    assert report["grew_mb"] < 200, report


def test_a_caller_cannot_add_query_parameters_the_document_never_declared(
    catalog: Catalog, raw_server: RawServer
) -> None:
    """Held: arguments outside the operation's schema are refused, not sent as a query."""
    catalog.register_openapi(_document(raw_server.port, ["X-Trace"]), toolkit="h")
    result = catalog.call("h.me", {"X-Trace": "a", "_method": "DELETE", "admin": True})
    assert result.error_code == "INVALID_ARGUMENTS"
    assert raw_server.heads == []


# Hole 1, more spellings: every header the HTTP layer or the admin owns is left out of the
# tool at import, whatever its case or padding, and the admin's credential arrives alone.
OWNED = [
    "Authorization",
    "authorization",
    " Host ",
    "HOST",
    "Cookie",
    "Proxy-Authorization",
    "Content-Length",
    "Content-Type",
    "Accept",
    "Transfer-Encoding",
    "Connection",
    "Upgrade",
    "TE",
    "Trailer",
    "Keep-Alive",
    "Expect",
    "\uff28ost",  # fullwidth H: NFKC "Host"
    "x-admin-key",  # the admin's --header, in another case
    "X_Admin_Key",  # read as X-Admin-Key by CGI and WSGI servers
    "X-HTTP-Method-Override",  # a GET tool (read-only by its annotations) made a DELETE
    "X-Method-Override",
    "Proxy",  # httpoxy
]


@pytest.mark.parametrize("name", OWNED, ids=repr)
def test_a_header_the_http_layer_or_admin_owns_is_left_out_at_import(
    catalog: Catalog,
    raw_server: RawServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    monkeypatch.setenv("A58_TOKEN", SECRET)
    with caplog.at_level(logging.WARNING, logger="toolcat.registry.openapi"):
        catalog.register_openapi(
            _document(raw_server.port, [name, "X-Trace"]),
            toolkit="h",
            headers={"Authorization": "Bearer ${A58_TOKEN}", "X-Admin-Key": "${A58_TOKEN}"},
        )
    tool = catalog.get("h.me")
    assert list(tool.parameters["properties"]) == ["X-Trace"]
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "\n" not in notes[0], notes
    assert "'me'" in notes[0] and repr(name) in notes[0] and SECRET not in notes[0]
    result = catalog.call("h.me", {name: "evil", "X-Trace": "t1"})
    assert result.error_code == "INVALID_ARGUMENTS"
    assert raw_server.heads == []
    assert catalog.call("h.me", {"X-Trace": "t1"}).success
    assert raw_server.header("Authorization") == [f"Bearer {SECRET}"]
    assert raw_server.header("X-Admin-Key") == [SECRET]
    assert raw_server.header("Host") == [f"127.0.0.1:{raw_server.port}"]


def test_cookie_parameters_never_replace_the_admins_cookie(
    catalog: Catalog, raw_server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A58_TOKEN", SECRET)
    document = _document(raw_server.port, [])
    document["paths"]["/me"]["get"]["parameters"] = [
        {"name": "session", "in": "cookie", "schema": {"type": "string"}}
    ]
    catalog.register_openapi(document, toolkit="h", headers={"cookie": "sid=${A58_TOKEN}"})
    assert catalog.get("h.me").parameters["properties"] == {}
    assert catalog.call("h.me", {}).success
    assert raw_server.header("Cookie") == [f"sid={SECRET}"]
    # Without an admin's Cookie header, a cookie parameter is the caller's as before.
    catalog.register_openapi(document, toolkit="c")
    assert catalog.call("c.me", {"session": "abc"}).success
    assert raw_server.header("Cookie") == ["session=abc"]


@pytest.mark.parametrize(
    ("location", "name", "headers"),
    [
        ("header", "Host", {}),
        ("header", "transfer-encoding", {}),
        ("header", "X-Key", {"x-key": "${A58_TOKEN}"}),
        ("cookie", "sid", {"Cookie": "sid=1"}),
    ],
)
def test_a_stored_plan_cannot_set_an_owned_header_at_call_time(
    location: str, name: str, headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored row is input too: a plan written by hand is held to the import's rule."""
    monkeypatch.setenv("A58_TOKEN", SECRET)
    operation = Operation(
        base_url="http://127.0.0.1:9/api",
        method="GET",
        path="/me",
        args={"a": (location, name)},
        headers=headers,
    )
    with pytest.raises(InvalidArgumentsError) as e:
        build_request(operation, {"a": "v4lu3"})
    message = str(e.value)
    assert "\n" not in message and "GET http://127.0.0.1:9/api/me" in message
    assert "'a'" in message and "v4lu3" not in message and SECRET not in message
    assert build_request(operation, {}).headers.get(name) is None  # not given: nothing refused


# Hole 2, edges: a body at the bound or under it is the result unchanged; one byte more is cut
# and says so; an endless or trickling answer ends, on both the sync and the async path.
def _answer(body: bytes, content_type: bytes = b"text/plain") -> Callable[[socket.socket], None]:
    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (content_type, len(body)) + body
        )

    return respond


def _endless(status: bytes = b"200 OK", pause: float = 0.0) -> Callable[[socket.socket], None]:
    def respond(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * (1 << 16) if not pause else b"x"
        while True:
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if pause:
                time.sleep(pause)

    return respond


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


LIMIT = 1000


@pytest.mark.parametrize(
    ("body", "truncated"),
    [
        (b"y" * (LIMIT - 1), False),
        (b"y" * LIMIT, False),
        (b"y" * (LIMIT + 1), True),
        ("\u00e9".encode() * (LIMIT // 2), False),  # exactly LIMIT bytes of UTF-8
        (b"y" * (50 * LIMIT), True),
    ],
    ids=["under", "at", "one-over", "at-multibyte", "far-over"],
)
def test_an_answer_at_the_bound_is_whole_and_one_over_is_cut(
    tmp_path: Any,
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    body: bytes,
    truncated: bool,
) -> None:
    server = serve(_answer(body))
    with Catalog(tmp_path / "c.db", max_result_bytes=LIMIT) as cat:
        cat.register_openapi(_document(server.port, []), toolkit="h")
        result = cat.call("h.me", {})
    assert result.success, result.error
    assert result.truncated is truncated
    expected = body.decode()
    assert result.data == (expected.encode()[:LIMIT].decode() if truncated else expected)


def test_a_json_answer_within_the_bound_is_parsed_as_before(
    tmp_path: Any, serve: Callable[[Callable[[socket.socket], None]], RawServer]
) -> None:
    value = {"items": ["z" * 10] * 20}
    body = json.dumps(value, indent=1).encode()
    body += b" " * (LIMIT - len(body))  # exactly at the bound
    server = serve(_answer(body, b"application/json"))
    with Catalog(tmp_path / "c.db", max_result_bytes=LIMIT) as cat:
        cat.register_openapi(_document(server.port, []), toolkit="h")
        result = cat.call("h.me", {})
    assert result.success and not result.truncated
    assert result.data == value


def _operation(port: int, timeout: float = 10.0) -> Operation:
    return Operation(
        base_url=f"http://127.0.0.1:{port}/api", method="GET", path="/me", timeout=timeout
    )


def test_an_endless_answer_is_cut_on_the_sync_and_async_paths(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(_endless())
    bound = bound_results(LIMIT)
    try:
        got = call(_operation(server.port), {})
        got_async = asyncio.run(acall(_operation(server.port), {}))
    finally:
        reset_results(bound)
    for value in (got, got_async):
        assert isinstance(value, CutText)
        assert LIMIT < len(value.encode()) <= LIMIT + 1
        assert truncate(value, LIMIT) == ("x" * LIMIT, True)


def test_an_endless_error_answer_is_read_only_for_its_excerpt(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(_endless(b"500 Internal Server Error"))
    started = time.monotonic()
    with pytest.raises(HTTPToolError) as e:
        call(_operation(server.port), {})
    assert time.monotonic() - started < 10
    assert e.value.status == 500 and len(str(e.value)) < 1000


def test_a_trickling_answer_stops_at_the_timeout(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    """Each byte comes within the read timeout, the whole never: the wait and the reading
    both end at the operation's timeout."""
    server = serve(_endless(pause=0.05))
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError):
        call(_operation(server.port, timeout=1.0), {})
    with pytest.raises(ToolTimeoutError):
        asyncio.run(acall(_operation(server.port, timeout=1.0), {}))
    assert time.monotonic() - started < 6


def test_the_import_warning_keeps_a_hostile_path_printable(
    catalog: Catalog, raw_server: RawServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning goes to the admin's terminal (the CLI installs no escaping handler): the
    document's path, as written in it, is escaped there."""
    document = _document(raw_server.port, ["Host"])
    document["paths"] = {"/me\x1b]0;owned\x07\n": document["paths"]["/me"]}
    with caplog.at_level(logging.WARNING, logger="toolcat.registry.openapi"):
        catalog.register_openapi(document, toolkit="h")
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "'Host'" in notes[0], notes
    assert "\x1b" not in notes[0] and "\n" not in notes[0] and "\x07" not in notes[0], notes
