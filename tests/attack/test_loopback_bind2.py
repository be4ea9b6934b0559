"""A ``--host`` that ``serve`` judges loopback (so it serves without a token) gets the DNS
rebinding check too: a page from another site, rebound to the address, is refused (421)
on ``/mcp`` and on the console, whatever loopback spelling the admin typed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import server_env
from toolcat import Catalog
from toolcat.server.loopback import host_names, is_loopback

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "rebound", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _serve(db: Path, tmp: Path, host: str, address: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind((address, 0))
        port = int(s.getsockname()[1])
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolcat.cli",
            "--db",
            str(db),
            "serve",
            "--http",
            "--host",
            host,
            "--port",
            str(port),
        ],
        env=server_env(tmp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.2):
                return process, f"http://{address}:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"serve --host {host} did not start") from None
            time.sleep(0.05)


@pytest.mark.parametrize("host", ["127.0.0.2", "LOCALHOST"])
def test_a_rebound_page_cannot_reach_an_open_loopback_server(tmp_path: Path, host: str) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    address = "127.0.0.2" if host == "127.0.0.2" else "127.0.0.1"
    process, base = _serve(db, tmp_path, host, address)
    try:
        port = base.rsplit(":", 1)[1]
        rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        with httpx2.Client(timeout=30) as http:
            mcp = http.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **rebound})
            console = http.get(f"{base}/ui/", headers=rebound)
            own = http.post(f"{base}/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    finally:
        process.terminate()
        process.wait(10)
    assert mcp.status_code == 421, mcp.text[:200]
    assert console.status_code == 421
    assert own.status_code == 200  # the address itself, as a client on this host names it


@pytest.mark.parametrize(
    ("host", "names"),
    [
        ("127.0.0.2", ("127.0.0.1", "localhost", "[::1]", "127.0.0.2")),
        ("LOCALHOST", ("127.0.0.1", "localhost", "[::1]")),
        ("localhost.", ("127.0.0.1", "localhost", "[::1]")),
        ("[0:0::1]", ("127.0.0.1", "localhost", "[::1]")),
        ("0.0.0.0", ()),
        ("0", ()),
        ("127.1", ()),  # refused without a token, so no Host check is needed
        ("::ffff:127.0.0.1", ()),
    ],
)
def test_every_loopback_spelling_gets_the_host_check(host: str, names: tuple[str, ...]) -> None:
    assert is_loopback(host) == bool(names)
    assert host_names(host) == names
