"""attack58: calls forwarded to imported OpenAPI operations.

The OpenAPI document (its parameter names) and the API's answers are input; only the base
URL and the ``--header`` credentials are the admin's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import ROOT
from toolcat import Catalog
from toolcat.remote.openapi import close_all

SECRET = "s3cr3t-admin-token-7f1e"


class RawServer:
    """A loopback HTTP/1.1 server that records each request's head and answers ``{}``."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.heads: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.heads.append(data.decode("latin-1"))
                body = b"{}"
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
                )

    def header(self, name: str) -> list[str]:
        head = self.heads[-1].split("\r\n")[1:]
        return [
            line.split(":", 1)[1].strip()
            for line in head
            if ":" in line and line.split(":", 1)[0].strip().lower() == name.lower()
        ]


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


@pytest.mark.xfail(
    strict=True,
    reason="attack58: a document's header parameter named Host lets a caller send the admin's "
    "credentials to another virtual host",
)
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


@pytest.mark.xfail(
    strict=True,
    reason="attack58: an API's answer is read whole into memory (600 MB body -> >600 MB RSS; "
    "an endless one ends in MemoryError)",
)
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
