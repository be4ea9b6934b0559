"""Serving with no authentication only on purpose: an empty token (``--token "$T"`` with T
unset, an empty TOOLCAT_TOKEN) is an error, an address other than loopback needs a token or
an explicit ``--no-auth`` (then one warning line), and the port announced is the one bound."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import server_env
from toolcat import Catalog

pytest.importorskip("mcp")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return path


def refused(db: Path, *args: str, env: dict[str, str | None] | None = None) -> str:
    """``serve ARGS`` fails at once (a subprocess: on the code before, some served on)."""
    environment = server_env(db.parent)
    for name, value in (env or {"TOOLCAT_TOKEN": None}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "serve", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_an_empty_token_flag_is_an_error(db: Path, host: str) -> None:
    error = refused(db, "--http", "--host", host, "--port", "0", "--token", "")
    assert "token is empty" in error


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_an_empty_token_variable_is_an_error(db: Path, value: str) -> None:
    error = refused(db, "--http", "--port", "0", env={"TOOLCAT_TOKEN": value})
    assert "token is empty" in error and "TOOLCAT_TOKEN" in error


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.org", ""])
def test_a_public_bind_without_a_token_is_refused(db: Path, host: str) -> None:
    error = refused(db, "--http", "--host", host, "--port", "0", env={"TOOLCAT_TOKEN": None})
    assert "--no-auth" in error and "TOOLCAT_TOKEN" in error


def test_no_auth_contradicts_a_token_and_stdio(db: Path) -> None:
    assert "contradicts" in refused(
        db, "--http", "--host", "0.0.0.0", "--no-auth", "--token", "secret-1"
    )
    assert "secret-1" not in refused(
        db, "--http", "--host", "0.0.0.0", "--no-auth", "--token", "secret-1"
    )
    assert "--no-auth goes with --http" in refused(db, "--no-auth")


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_refused(db: Path, port: str) -> None:
    assert "--port" in refused(db, "--http", "--port", port)


@contextmanager
def serving(db: Path, tmp_path: Path, *args: str) -> Iterator[tuple[int, str]]:
    """``serve --http ARGS`` in a subprocess: the port it announced, and stderr so far."""
    env = server_env(tmp_path)
    env.pop("TOOLCAT_TOKEN", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "toolcat", "--db", str(db), "serve", "--http", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:
            lines.append(line)
            found = re.search(r"serving MCP at http://\S+:(\d+)/mcp", line)
            if found:
                yield int(found[1]), "".join(lines)
                return
        pytest.fail(f"the server did not start: {''.join(lines)}")
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def test_port_zero_announces_the_port_bound(db: Path, tmp_path: Path) -> None:
    with serving(db, tmp_path, "--port", "0", "--no-access-log") as (port, stderr):
        assert port != 0 and "warning" not in stderr
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it listens on the port it named


def test_no_auth_serves_a_public_address_with_one_warning(db: Path, tmp_path: Path) -> None:
    with serving(db, tmp_path, "--host", "0.0.0.0", "--port", "0", "--no-auth") as (port, err):
        warnings = [line for line in err.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and "no authentication" in warnings[0]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
