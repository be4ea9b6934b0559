"""``toolcat serve --http`` as a process: where it cannot listen, and its access log."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import (
    ERAS,
    MODERN,
    http_server,
    http_session,
    run,
    server_env,
    stdio_session,
)
from toolcat import Catalog
from toolcat.errors import ServeError


def toolcat(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "toolcat.cli", "--db", str(db), *args]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return path


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_busy_port_is_one_line_and_its_own_exit_code(db: Path, tmp_path: Path, host: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            toolcat(db, "serve", "--http", "--host", host, "--port", str(port)),
            env=server_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == ServeError.exit_code == 15, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"{host}:{port}" in lines[0] and "already in use" in lines[0]
    assert "Traceback" not in done.stderr and "serving MCP" not in done.stderr


def test_an_address_not_of_this_host_is_one_line(db: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        toolcat(db, "serve", "--http", "--host", "192.0.2.1", "--port", "8765"),  # TEST-NET-1
        env=server_env(tmp_path, TOOLCAT_TOKEN="a-token"),  # not loopback: a token is required
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 15, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


ACCESS_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\S+) (.+) (\S+) \d+\.\dms$")
TOKENS_YAML = """\
principals:
  - name: math-team
    token: math-team-token-1
    toolkits: [math]
"""


def access_lines(stderr: Path) -> list[tuple[str, str, str]]:
    found = []
    for line in stderr.read_text().splitlines():
        match = ACCESS_LINE.match(line)
        if match:
            found.append((match.group(1), match.group(2), match.group(3)))
    return found


@pytest.mark.parametrize("enabled", [True, False])
def test_access_log_a_line_per_request_never_tokens_or_arguments(
    db: Path, tmp_path: Path, enabled: bool
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    switch = () if enabled else ("--no-access-log",)
    secret_argument = "ARGUMENT-VALUE-7c1d"
    with http_server(db, tmp_path, "--tokens", str(tokens), *switch) as (url, stderr):

        async def check() -> None:
            for mode in ERAS:
                async with http_session(url, "math-team-token-1", mode=mode) as s:
                    await s.all_tools()
                    await s.call("search_tools", {"query": secret_argument})
                    arguments = {"value": 1, "from_unit": "km", "to_unit": "m"}
                    ok = await s.call("convert_units", arguments)
                    assert not ok.is_error, ok.content
                    via = await s.call(
                        "call_tool", {"name": "nosuch\ntool", "arguments": {"x": secret_argument}}
                    )
                    assert via.is_error

        run(check)
        refused = httpx2.post(url, json={}, headers={"Authorization": "Bearer wrong-token-99"})
        assert refused.status_code == 401
    text = stderr.read_text()
    for secret in ("math-team-token-1", "wrong-token-99", secret_argument):
        assert secret not in text
    lines = access_lines(stderr)
    if not enabled:
        assert lines == []
        return
    assert ("math-team", "tools/list", "ok") in lines
    assert ("math-team", "tools/call search_tools", "ok") in lines
    assert ("math-team", "tools/call convert_units", "ok") in lines
    assert ("math-team", "tools/call call_tool:nosuch\\x0atool", "UNKNOWN_TOOL") in lines
    assert ("-", "POST /mcp", "401") in lines
    calls = [line for line in lines if line[1] == "tools/call convert_units"]
    assert len(calls) == len(ERAS)  # one line per request, not one per layer


def test_stdio_has_no_access_log_unless_asked(db: Path, tmp_path: Path) -> None:
    async def check(*args: str) -> None:
        async with stdio_session(db, tmp_path, *args, mode=MODERN) as s:
            await s.all_tools()

    run(check)
    assert access_lines(tmp_path / "server-stderr.txt") == []
    anyio.run(check, "--access-log")
    assert [w for w, *_ in access_lines(tmp_path / "server-stderr.txt")] == ["anonymous"]


def test_loopback_hosts_pass_on_any_port_foreign_hosts_stay_refused(
    db: Path, tmp_path: Path
) -> None:
    """A balancer on this host forwards its own Host (another port): accepted. A rebinding
    page names its own host: refused (421), as is its Origin."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with http_server(db, tmp_path) as (url, _stderr):
        for host in ("127.0.0.1:8800", "localhost:80", "[::1]:9000", "127.0.0.1", "localhost"):
            ok = httpx2.post(url, json=body, headers={**accept, "Host": host})
            assert ok.status_code != 421, (host, ok.text)
        for host in ("evil.example:8800", "127.0.0.1.evil.example", "localhost.evil", "x.test"):
            refused = httpx2.post(url, json=body, headers={**accept, "Host": host})
            assert refused.status_code == 421, host
        origin = {**accept, "Origin": "http://evil.example:8800"}
        assert httpx2.post(url, json=body, headers=origin).status_code == 403
