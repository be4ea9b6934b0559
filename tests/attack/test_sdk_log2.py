"""The MCP SDK's own warnings reach the admin's terminal printable: a request whose
``Origin`` (or ``Host``) carries an OSC title and a clear-screen is refused, and the SDK's
"Invalid Origin header: ..." line quoting it is escaped like toolcat's own log lines."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import http_server
from toolcat import Catalog

HOSTILE = b"http://e\x1b]0;pwned\x07vil\x1b[2J\xc2\x9b31m"


def _raw_post(port: int, headers: bytes) -> bytes:
    request = (
        b"POST /mcp HTTP/1.1\r\n" + headers + b"Content-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.recv(100)


def test_a_hostile_origin_or_host_is_logged_printable(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    with http_server(db, tmp_path) as (url, stderr):
        port = int(url.split(":")[2].split("/")[0])
        host = f"127.0.0.1:{port}".encode()
        origin = _raw_post(port, b"Host: " + host + b"\r\nOrigin: " + HOSTILE + b"\r\n")
        foreign = _raw_post(port, b"Host: evil\x1b[2J\xc2\x9b2J:1\r\n")
    assert origin.startswith(b"HTTP/1.1 403")
    assert foreign.startswith(b"HTTP/1.1 421")
    log = stderr.read_text(encoding="utf-8", errors="replace")
    assert "Invalid Origin header" in log  # the SDK did log it: the test sees its line
    assert "\x1b" not in log and "\x07" not in log and "\x9b" not in log
    assert "\\x1b]0;pwned" in log
