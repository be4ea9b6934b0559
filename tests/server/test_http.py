"""``toolcat serve --http`` as a process: where it cannot listen, and its access log."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import server_env
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
        env=server_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 15, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
