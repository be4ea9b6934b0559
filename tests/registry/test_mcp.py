"""Importing an MCP server's tools: registration, forwarded calls, restarts, re-registration
and servers that misbehave. The servers are real SDK servers run as subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from click.testing import CliRunner

from tests.helpers import ROOT, free_port, table_snapshot, wait_for_port
from toolcat import Catalog, ImportFailedError, ManifestError, Toolkit
from toolcat.cli import cli
from toolcat.mcpclient import close_all

SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
BAD = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_bad_server.py'}"


@pytest.fixture(autouse=True)
def close_servers() -> Iterator[None]:
    yield
    close_all()


@pytest.fixture
def pidfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pids.txt"
    monkeypatch.setenv("TOOLCAT_TEST_PIDFILE", str(path))
    return path


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_register_reads_tools_and_calls_are_forwarded(catalog: Catalog, pidfile: Path) -> None:
    result = catalog.register_mcp(SERVER, toolkit="weather")
    assert (result.status, result.version, result.tools) == ("added", "1.0.0", 4)
    assert result.changes == {
        "added": ["explode", "forecast", "old_tool", "shout"],
        "changed": [],
        "removed": [],
    }
    assert len(pids(pidfile)) == 1  # started to read the tools, then closed
    forecast = catalog.get("weather.forecast")
    assert forecast.defer_loading and "mcp" in forecast.tags
    assert forecast.annotations is not None and forecast.annotations.read_only is True
    assert forecast.parameters["required"] == ["city"]
    assert catalog.search("weather forecast for a city").hits[0].tool.id == "weather.forecast"
    assert len(pids(pidfile)) == 1  # search starts nothing

    first = catalog.call("forecast", {"city": "Oslo"})
    assert first.success and first.data == {"city": "Oslo", "days": 1, "summary": "sunny"}
    assert catalog.call("shout", {"text": "hi"}).data == {"result": "HI"}
    assert len(pids(pidfile)) == 2  # started once on the first call, then kept

    failed = catalog.call("explode", {"reason": "kaput"})
    assert failed.error_code == "TOOL_ERROR" and "kaput" in (failed.error or "")
    invalid = catalog.call("forecast", {"days": 2})
    assert invalid.error_code == "INVALID_ARGUMENTS"  # checked here, before forwarding
    assert len(pids(pidfile)) == 2


def test_a_dead_server_is_started_again(catalog: Catalog, pidfile: Path) -> None:
    catalog.register_mcp(SERVER, toolkit="weather")
    assert catalog.call("shout", {"text": "a"}).success
    running = pids(pidfile)[-1]
    os.kill(running, signal.SIGKILL)
    time.sleep(0.2)
    again = catalog.call("shout", {"text": "b"})
    assert again.success, again.error
    assert again.data == {"result": "B"}
    assert pids(pidfile)[-1] != running


def test_reregistering_picks_up_changes_as_a_new_version(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.register_mcp(SERVER, toolkit="weather")
    assert catalog.call("old_tool").success
    same = catalog.register_mcp(SERVER, toolkit="weather")
    assert (same.status, same.version) == ("unchanged", "1.0.0")

    monkeypatch.setenv("TOOLCAT_TEST_VARIANT", "2")
    changed = catalog.register_mcp(SERVER, toolkit="weather")
    assert (changed.status, changed.version) == ("added", "1.0.1")
    assert changed.changes == {"added": ["new_tool"], "changed": ["shout"], "removed": ["old_tool"]}
    assert [v.version for v in catalog.versions("weather")] == ["1.0.0", "1.0.1"]
    assert catalog.call("new_tool", {"x": 21}).data == {"result": 42}  # the new server runs
    assert catalog.call("old_tool").error_code == "UNKNOWN_TOOL"
    pinned = catalog.register_mcp(SERVER, toolkit="weather", version="2.0")
    assert (pinned.status, pinned.version) == ("added", "2.0")


def test_all_pages_are_read_and_odd_names_rewritten(catalog: Catalog) -> None:
    result = catalog.register_mcp(f"{BAD} pages", toolkit="many")
    assert result.tools == 250
    odd = catalog.search("name with characters the catalog does not allow", k=1).hits[0].tool
    assert odd.name == "ns_dotted_name"
    called = catalog.call(odd.id, {})
    assert called.data == "ns.dotted/name []"  # reached under the server's own name
    assert catalog.call("tool_248", {"n": 1}).data == "tool_248 [('n', 1)]"


@pytest.mark.parametrize(
    ("server", "error", "message"),
    [
        (f"{BAD} invalid-schema", ManifestError, "tool 'bad', field 'parameters'"),
        (f"{BAD} no-tools", ManifestError, "lists no tools"),
        (f"{BAD} crash", ImportFailedError, "cannot start MCP server"),
        (f"{BAD} hang", ImportFailedError, "did not answer 'initialize' within 2 s"),
        ("/no/such/command --flag", ImportFailedError, "cannot start MCP server"),
    ],
    ids=["invalid-schema", "no-tools", "crash", "hang", "no-command"],
)
def test_bad_servers_are_clear_errors_and_change_nothing(
    catalog: Catalog, db_path: Path, server: str, error: type[Exception], message: str
) -> None:
    catalog.register_mcp(SERVER, toolkit="weather")
    before = table_snapshot(db_path)
    started = time.monotonic()
    with pytest.raises(error) as raised:
        catalog.register_mcp(server, toolkit="bad", timeout=2)
    assert message in str(raised.value)
    assert time.monotonic() - started < 15
    assert table_snapshot(db_path) == before


def test_a_server_that_does_not_start_is_an_import_failure(catalog: Catalog) -> None:
    catalog.register(
        Toolkit.model_validate(
            {
                "toolkit": "gone",
                "version": "1",
                "tools": [
                    {
                        "name": "vanished",
                        "description": "A tool of a server that no longer starts.",
                        "implementation": f"mcp+stdio:{BAD} crash#vanished",
                    }
                ],
            }
        )
    )
    result = catalog.call("vanished")
    assert result.error_code == "IMPORT_FAILED" and "cannot start" in (result.error or "")
    assert catalog.call("vanished").error_code == "IMPORT_FAILED"  # tried again, same answer


def test_register_over_http_and_from_the_cli(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TOOLCAT_TEST_PORT": str(port)}
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fixtures" / "mcp_server.py"), "--http"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server)
        db = str(tmp_path / "catalog.db")
        runner = CliRunner()
        url = f"http://127.0.0.1:{port}/mcp"
        out = runner.invoke(cli, ["--db", db, "register", "--mcp-http", url, "--toolkit", "w"])
        assert out.exit_code == 0, out.output
        assert "added     w 1.0.0 (4 tools)" in out.output
        called = runner.invoke(cli, ["--db", db, "call", "forecast", "--args", '{"city": "Rome"}'])
        assert called.exit_code == 0 and '"Rome"' in called.output, called.output
        stdio = runner.invoke(
            cli,
            [
                "--db",
                db,
                "register",
                "--mcp-stdio",
                SERVER,
                "--toolkit",
                "s",
                "--no-defer",
                "--tag",
                "weather",
            ],
        )
        assert stdio.exit_code == 0, stdio.output
        listed = runner.invoke(cli, ["--db", db, "list", "--tag", "weather"])
        assert "s.forecast" in listed.output
        missing = runner.invoke(cli, ["--db", db, "register", "--mcp-stdio", SERVER])
        assert missing.exit_code == 2 and "--toolkit" in missing.output
        bad = runner.invoke(
            cli, ["--db", db, "register", "--mcp-stdio", f"{BAD} crash", "--toolkit", "x"]
        )
        assert bad.exit_code == ImportFailedError.exit_code
        assert "cannot start MCP server" in bad.output
    finally:
        server.terminate()
        server.wait(10)
