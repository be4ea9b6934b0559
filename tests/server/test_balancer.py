"""Two ``toolcat serve --http`` replicas on one catalog behind a real load balancer (haproxy,
round robin, loopback): one 2026 client lists, searches, calls and hears a list change
through it. Slow: it may install haproxy from Debian's packages (`make haproxy`)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS, free_port, wait_for_port
from tests.server.clients import MODERN, http_server, http_session, run, text
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module

pytestmark = pytest.mark.slow

TOKEN = "replica-token-1"


def haproxy() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("haproxy is not installed and apt-get is not available")
    try:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "haproxy"],
            capture_output=True,
            timeout=300,
            check=True,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"haproxy could not be installed: {e}")
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if not found:
        pytest.skip("haproxy is not on PATH after installing it")
    return found


@contextlib.contextmanager
def balancer(binary: str, tmp: Path, backends: list[str]) -> Iterator[int]:
    port = free_port()
    servers = "\n".join(
        f"    server {hostport} {hostport} check inter 500ms" for hostport in backends
    )
    config = tmp / "haproxy.cfg"
    config.write_text(
        f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout tunnel 120s
frontend mcp
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    # each replica checks Host (DNS rebinding protection): send it the replica's own
    http-send-name-header Host
    http-response set-header X-Replica %s
{servers}
"""
    )
    process = subprocess.Popen(
        [binary, "-f", str(config), "-db"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def test_two_replicas_behind_haproxy(tmp_path: Path) -> None:
    binary = haproxy()
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
    env = {"TOOLCAT_TOKEN": TOKEN}
    with (
        http_server(db, tmp_path, env=env) as (one, err_one),
        http_server(db, tmp_path, env=env) as (two, err_two),
    ):
        backends = [url.removeprefix("http://").removesuffix("/mcp") for url in (one, two)]
        with balancer(binary, tmp_path, backends) as port:
            url = f"http://127.0.0.1:{port}/mcp"

            async def check() -> None:
                async with http_session(url, TOKEN, mode=MODERN) as s:
                    listings = [await s.names() for _ in range(4)]  # both replicas answer
                    assert all(names == listings[0] for names in listings)
                    found = await s.call("search_tools", {"query": "add two integers", "k": 2})
                    assert found.structured_content["tools"][0]["name"] == "add"
                    for _ in range(4):
                        via = await s.call("call_tool", {"name": "add", "arguments": {"a": 1}})
                        assert text(via) == "3"
                    async with s.client.listen(tools_list_changed=True) as sub:
                        started = time.monotonic()
                        await anyio.to_thread.run_sync(remove_math, db)
                        with anyio.fail_after(10):
                            event = await sub.__anext__()
                        assert type(event).__name__ == "ToolsListChanged"
                        assert time.monotonic() - started < 6
                    await anyio.sleep(1.5)  # both replicas have seen the new revision
                    for _ in range(4):
                        assert "convert_units" not in await s.names()

            run(check)
            assert len(replicas_answering(url)) == 2  # round robin reached both
        for stderr in (err_one, err_two):
            assert "Traceback" not in stderr.read_text()


def replicas_answering(url: str) -> set[str]:
    """Which replicas answer four bare 2026 ``tools/list`` requests (haproxy names them)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/list",
    }
    seen = set()
    for _ in range(4):
        response = httpx2.post(url, json=body, headers=headers)
        assert response.status_code == 200, response.text
        seen.add(response.headers["x-replica"])
    return seen


def remove_math(db: Path) -> None:
    with Catalog(db) as catalog:
        catalog.remove("math")
