"""Importing an MCP server's tools: registration, forwarded calls, restarts, re-registration,
credentials by reference, rug-pull protection, `check` against the server, and servers that
misbehave. The servers are real SDK 2.x servers run as subprocesses (stdio) or started by the
test (streamable HTTP, behind a bearer-token check)."""

from __future__ import annotations

import logging
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
from toolcat.remote.mcp import close_all

SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
BAD = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_bad_server.py'}"
# The server reads these; it gets them only because the registration passes them on.
PASS_ON = {
    "TOOLCAT_TEST_VARIANT": "${TOOLCAT_TEST_VARIANT}",
    "TOOLCAT_TEST_PIDFILE": "${TOOLCAT_TEST_PIDFILE}",
    "TOOLCAT_TEST_MARKER": "${TOOLCAT_TEST_MARKER}",
}
SECRET = "s3cr3t-7f1c9e-value"
SHOUT_A = ("--args", '{"text": "a"}')


@pytest.fixture(autouse=True)
def test_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TOOLCAT_TEST_VARIANT", "1")
    monkeypatch.setenv("TOOLCAT_TEST_PIDFILE", str(tmp_path / "pids.txt"))
    monkeypatch.setenv("TOOLCAT_TEST_MARKER", str(tmp_path / "marker.txt"))
    yield
    close_all()


def pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def register(catalog: Catalog, **options: object) -> object:
    return catalog.register_mcp(SERVER, toolkit="weather", env=PASS_ON, **options)  # type: ignore[arg-type]


def switch_server_to_variant_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server changes its tools behind the catalog's back (its next start serves them)."""
    monkeypatch.setenv("TOOLCAT_TEST_VARIANT", "2")
    close_all()


def test_register_reads_tools_and_calls_are_forwarded(catalog: Catalog, tmp_path: Path) -> None:
    result = catalog.register_mcp(SERVER, toolkit="weather", env=PASS_ON)
    assert (result.status, result.version, result.tools) == ("added", "1.0.0", 8)
    assert result.changes == {
        "added": [
            "count",
            "environment",
            "explode",
            "forecast",
            "nap",
            "old_tool",
            "report",
            "shout",
        ],
        "changed": [],
        "removed": [],
    }
    assert len(pids(tmp_path)) == 1  # started to read the tools, then closed
    forecast = catalog.get("weather.forecast")
    assert forecast.defer_loading and "mcp" in forecast.tags
    assert forecast.annotations is not None and forecast.annotations.read_only is True
    assert forecast.parameters["required"] == ["city"]
    assert catalog.search("weather forecast for a city").hits[0].tool.id == "weather.forecast"
    assert len(pids(tmp_path)) == 1  # search starts nothing

    first = catalog.call("forecast", {"city": "Oslo"})
    assert first.success and first.data == {"city": "Oslo", "days": 1, "summary": "sunny"}
    assert catalog.call("shout", {"text": "hi"}).data == {"result": "HI"}
    assert len(pids(tmp_path)) == 2  # started once on the first call, then kept

    failed = catalog.call("explode", {"reason": "kaput"})
    assert failed.error_code == "TOOL_ERROR" and "kaput" in (failed.error or "")
    invalid = catalog.call("forecast", {"days": 2})
    assert invalid.error_code == "INVALID_ARGUMENTS"  # checked here, before forwarding
    assert len(pids(tmp_path)) == 2


@pytest.mark.slow
def test_a_dead_server_is_started_again(catalog: Catalog, tmp_path: Path) -> None:
    register(catalog)
    assert catalog.call("shout", {"text": "a"}).success
    running = pids(tmp_path)[-1]
    os.kill(running, signal.SIGKILL)
    time.sleep(0.5)
    again = catalog.call("shout", {"text": "b"})
    assert again.success, again.error
    assert again.data == {"result": "B"}
    assert pids(tmp_path)[-1] != running


def test_a_timeout_cancels_the_work_on_the_server(catalog: Catalog, tmp_path: Path) -> None:
    register(catalog)
    assert catalog.call("shout", {"text": "warm"}).success  # the server is running
    started = time.monotonic()
    result = catalog.call("nap", {"seconds": 60}, timeout=1)
    assert result.error_code == "TIMEOUT"
    assert time.monotonic() - started < 5
    marker = tmp_path / "marker.txt"
    deadline = time.monotonic() + 15
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.read_text() == "cancelled"  # notifications/cancelled reached the server
    assert catalog.call("shout", {"text": "still up"}).data == {"result": "STILL UP"}


def test_progress_from_the_server_becomes_call_events(catalog: Catalog) -> None:
    register(catalog)
    seen: list[object] = []
    result = catalog.call("count", {"to": 3}, on_event=seen.append)
    assert result.success and result.data == {"result": 3}, result.error
    progress = [(e.progress, e.total, e.message) for e in result.events if e.kind == "progress"]
    assert progress == [(1, 3, "counted 1"), (2, 3, "counted 2"), (3, 3, "counted 3")]
    assert len(seen) == 3


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_log_messages_and_resources_from_the_server_become_call_events(
    tmp_path: Path, isolation: str
) -> None:
    with Catalog(tmp_path / "events.db", isolation=isolation) as catalog:  # type: ignore[arg-type]
        register(catalog)
        seen: list[object] = []
        result = catalog.call("report", on_event=seen.append)
    assert result.success, result.error
    assert result.data == [
        {"type": "text", "text": "report ready"},
        {"type": "resource_link", "uri": "table://gone", "name": "gone.csv"},
    ]  # the resources that became artifacts left the value; the unreadable link stayed
    logs = [(e.level, e.message) for e in result.events if e.kind == "log"]
    assert logs[:2] == [("info", "building the report"), ("warning", 'rows: {"skipped": 1}')]
    assert logs[2][0] == "warning" and "table://gone not kept as an artifact" in logs[2][1]
    summary, chart, sales = result.artifacts
    assert (summary.name, summary.mime_type, summary.text) == (
        "summary.csv",
        "text/csv",
        "a,b\n1,2\n",
    )
    assert (chart.name, chart.mime_type, chart.content()) == (
        "chart.png",
        "image/png",
        b"\x89PNG\r\n\x1a\n",
    )
    assert (sales.name, sales.text) == ("sales.csv", "region,amount\nnorth,10\nsouth,5\n")
    assert len(seen) == len(result.events) == 6


def test_env_and_cwd_reach_the_child_and_the_secret_stays_out_of_the_catalog(
    catalog: Catalog, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCAT_TEST_SECRET", SECRET)
    monkeypatch.setenv("TOOLCAT_TEST_NOT_PASSED", "the caller's own")
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    env = {**PASS_ON, "API_KEY": "${TOOLCAT_TEST_SECRET}", "MODE": "plain $${LITERAL}"}
    catalog.register_mcp(SERVER, toolkit="weather", env=env, cwd=workdir)
    names = ["API_KEY", "MODE", "TOOLCAT_TEST_NOT_PASSED", "TOOLCAT_TEST_SECRET", "PATH"]
    seen = catalog.call("environment", {"names": names})
    assert seen.success, seen.error
    assert seen.data["cwd"] == str(workdir)
    assert seen.data["env"]["API_KEY"] == SECRET
    assert seen.data["env"]["MODE"] == "plain ${LITERAL}"
    assert seen.data["env"]["TOOLCAT_TEST_NOT_PASSED"] is None  # not the whole environment
    assert seen.data["env"]["TOOLCAT_TEST_SECRET"] is None
    assert seen.data["env"]["PATH"]  # safe defaults are there

    catalog.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("catalog.db*"))
    assert SECRET.encode() not in stored
    assert b"${TOOLCAT_TEST_SECRET}" in stored


def test_a_missing_variable_is_a_clear_import_failure(
    catalog: Catalog, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLCAT_TEST_SECRET", raising=False)
    before = table_snapshot(db_path)
    with pytest.raises(ImportFailedError, match=r"\$\{TOOLCAT_TEST_SECRET\}.*not set"):
        catalog.register_mcp(
            SERVER, toolkit="weather", env={"API_KEY": "${TOOLCAT_TEST_SECRET}"}, timeout=5
        )
    assert table_snapshot(db_path) == before

    monkeypatch.setenv("TOOLCAT_TEST_SECRET", SECRET)
    catalog.register_mcp(SERVER, toolkit="weather", env={"API_KEY": "${TOOLCAT_TEST_SECRET}"})
    monkeypatch.delenv("TOOLCAT_TEST_SECRET")  # the process that calls does not have it
    started = time.monotonic()
    result = catalog.call("shout", {"text": "x"})
    assert result.error_code == "IMPORT_FAILED"
    assert "TOOLCAT_TEST_SECRET is not set" in (result.error or "")
    assert time.monotonic() - started < 5  # no hang


def test_options_that_do_not_fit_the_transport_are_refused(catalog: Catalog) -> None:
    from toolcat import ToolcatError

    with pytest.raises(ToolcatError, match="--header is for --mcp-http"):
        catalog.register_mcp(SERVER, toolkit="w", headers={"Authorization": "x"})
    with pytest.raises(ToolcatError, match="--env and --cwd are for --mcp-stdio"):
        catalog.register_mcp("http://127.0.0.1:1/mcp", toolkit="w", http=True, env={"A": "b"})
    with pytest.raises(ToolcatError, match="not an environment variable name"):
        catalog.register_mcp(SERVER, toolkit="w", env={"A-B": "x"})
    with pytest.raises(ToolcatError, match="line breaks"):
        catalog.register_mcp(
            "http://127.0.0.1:1/mcp", toolkit="w", http=True, headers={"X-A": "1\r\nX-B: 2"}
        )
    with pytest.raises(ToolcatError, match="on_change must be"):
        catalog.register_mcp(SERVER, toolkit="w", on_change="ignore")
    assert catalog.toolkits() == []


@pytest.mark.slow
def test_the_servers_stderr_is_logged_not_echoed(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    env = {**os.environ, "TOOLCAT_DB": db}
    toolcat = [sys.executable, "-m", "toolcat"]
    registered = subprocess.run(
        [*toolcat, "register", "--mcp-stdio", SERVER, "--toolkit", "weather"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert registered.returncode == 0, registered.stderr
    called = subprocess.run(
        [*toolcat, "call", "shout", "--args", '{"text": "quiet"}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert called.returncode == 0, called.stderr
    assert "QUIET" in called.stdout
    for run in (registered, called):
        assert "banner on stderr" not in run.stderr
        assert run.stderr.strip() == ""


def test_the_servers_stderr_goes_to_the_log(
    catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    register(catalog)
    with caplog.at_level(logging.INFO, logger="toolcat.mcp.stderr"):
        assert catalog.call("shout", {"text": "x"}).success
        deadline = time.monotonic() + 5
        while "banner on stderr" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "banner on stderr" in caplog.text


def test_a_changed_tool_is_refused_until_registered_again(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(catalog)
    assert catalog.call("shout", {"text": "a"}).success
    switch_server_to_variant_2(monkeypatch)

    refused = catalog.call("shout", {"text": "a"})
    assert refused.error_code == "IMPORT_FAILED", refused
    error = refused.error or ""
    assert "changed the description of tool 'shout'" in error
    assert "the call was not sent" in error and "toolcat register --mcp-stdio" in error
    assert catalog.call("shout", {"text": "a"}).error_code == "IMPORT_FAILED"  # every time
    gone = catalog.call("old_tool")
    assert gone.error_code == "IMPORT_FAILED" and "no longer lists tool 'old_tool'" in (
        gone.error or ""
    )
    unchanged = catalog.call("forecast", {"city": "Oslo"})
    assert unchanged.data == {"city": "Oslo", "days": 1, "summary": "rain"}

    accepted = register(catalog)
    assert accepted.version == "1.0.1"  # type: ignore[attr-defined]
    assert catalog.call("shout", {"text": "a"}).data == {"result": "A"}


def test_warn_calls_a_changed_tool_and_logs_it(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register(catalog, on_change="warn")
    switch_server_to_variant_2(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="toolcat.mcp"):
        called = catalog.call("shout", {"text": "a"})
    assert called.success and called.data == {"result": "A"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "toolcat.mcp"]
    assert len(warnings) == 1 and "changed the description of tool 'shout'" in warnings[0]


def test_check_reports_added_changed_and_removed_tools(
    catalog: Catalog, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(catalog)
    report = catalog.check("weather")
    assert [r["ok"] for r in report] == [True] * 8 and not any("change" in r for r in report)

    switch_server_to_variant_2(monkeypatch)
    report = {r["id"]: r for r in catalog.check("weather")}
    assert report["weather.shout"]["change"] == "changed" and not report["weather.shout"]["ok"]
    assert "description" in report["weather.shout"]["problems"][0]
    assert report["weather.old_tool"]["change"] == "removed"
    assert report["weather.new_tool"]["change"] == "added"
    assert report["weather.forecast"]["ok"] and "change" not in report["weather.forecast"]

    out = CliRunner().invoke(cli, ["--db", str(db_path), "check", "weather"])
    assert out.exit_code == ImportFailedError.exit_code
    assert "FAIL weather.shout" in out.output and "new  weather.new_tool" in out.output
    assert "6 ok, 2 failed, 1 new on the server" in out.output


@pytest.mark.slow
def test_reregistering_picks_up_changes_as_a_new_version(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(catalog)
    assert catalog.call("old_tool").success
    same = register(catalog)
    assert (same.status, same.version) == ("unchanged", "1.0.0")  # type: ignore[attr-defined]

    monkeypatch.setenv("TOOLCAT_TEST_VARIANT", "2")
    changed = register(catalog)
    assert (changed.status, changed.version) == ("added", "1.0.1")  # type: ignore[attr-defined]
    assert changed.changes == {  # type: ignore[attr-defined]
        "added": ["new_tool"],
        "changed": ["shout"],
        "removed": ["old_tool"],
    }
    assert [v.version for v in catalog.versions("weather")] == ["1.0.0", "1.0.1"]
    assert catalog.call("new_tool", {"x": 21}).data == {"result": 42}  # the new server runs
    assert catalog.call("old_tool").error_code == "UNKNOWN_TOOL"
    pinned = catalog.register_mcp(SERVER, toolkit="weather", env=PASS_ON, version="2.0")
    assert (pinned.status, pinned.version) == ("added", "2.0")


@pytest.mark.slow
def test_all_pages_are_read_and_odd_names_rewritten(catalog: Catalog) -> None:
    result = catalog.register_mcp(f"{BAD} pages", toolkit="many")
    assert result.tools == 250
    odd = catalog.search("name with characters the catalog does not allow", k=1).hits[0].tool
    assert odd.name == "ns_dotted_name"
    called = catalog.call(odd.id, {})
    assert called.data == "ns.dotted/name []"  # reached under the server's own name
    assert catalog.call("tool_248", {"n": 1}).data == "tool_248 [('n', 1)]"


@pytest.mark.parametrize(
    ("server", "timeout", "error", "message"),
    [
        (f"{BAD} invalid-schema", 30, ManifestError, "tool 'bad', field 'parameters'"),
        (f"{BAD} no-tools", 30, ManifestError, "lists no tools"),
        (f"{BAD} crash", 30, ImportFailedError, "cannot find my configuration file"),
        pytest.param(
            f"{BAD} hang",
            2,
            ImportFailedError,
            "did not answer the MCP handshake within 2 s",
            marks=pytest.mark.slow,
        ),
        ("/no/such/command --flag", 30, ImportFailedError, "cannot start MCP server"),
        (f"{BAD} empty-name", 30, ManifestError, "tool '#2', field 'name': the server lists"),
        (f"{BAD} huge-description", 30, ManifestError, "the description is 100,000 char"),
        (f"{BAD} many", 60, ManifestError, "lists more than 10,000 tools"),
        (f"{BAD} huge-schema", 30, ManifestError, "tool 'huge': the definition is 2,"),
    ],
    ids=[
        "invalid-schema",
        "no-tools",
        "crash",
        "hang",
        "no-command",
        "empty-name",
        "huge-description",
        "many",
        "huge-schema",
    ],
)
def test_bad_servers_are_clear_errors_and_change_nothing(
    catalog: Catalog,
    db_path: Path,
    server: str,
    timeout: float,
    error: type[Exception],
    message: str,
) -> None:
    catalog.register(
        Toolkit.model_validate(
            {
                "toolkit": "other",
                "version": "1",
                "tools": [{"name": "t", "description": "A tool that is already there."}],
            }
        )
    )
    before = table_snapshot(db_path)
    started = time.monotonic()
    with pytest.raises(error) as raised:
        catalog.register_mcp(server, toolkit="bad", timeout=timeout)
    assert message in str(raised.value)
    assert time.monotonic() - started < 30
    assert table_snapshot(db_path) == before


def test_a_server_that_does_not_start_is_an_import_failure(catalog: Catalog) -> None:
    catalog = Catalog(catalog.path, trust_any_module=True)  # a command in a Toolkit object
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
    assert "cannot find my configuration file" in (result.error or "")  # its stderr, quoted
    assert catalog.call("vanished").error_code == "IMPORT_FAILED"  # tried again, same answer


@pytest.fixture
def http_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test server over streamable HTTP, requiring ``Authorization: Bearer <SECRET>``."""
    port = free_port()
    env = {**os.environ, "TOOLCAT_TEST_PORT": str(port), "TOOLCAT_TEST_TOKEN": SECRET}
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fixtures" / "mcp_server.py"), "--http"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server, seconds=60)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(10)


def test_http_with_a_bearer_header_from_the_cli(
    http_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "catalog.db"
    runner = CliRunner()
    monkeypatch.setenv("TOOLCAT_TEST_HTTP_TOKEN", SECRET)
    header = ["--header", "Authorization=Bearer ${TOOLCAT_TEST_HTTP_TOKEN}"]
    base = ["--db", str(db), "register", "--mcp-http", http_server, "--toolkit", "w"]
    out = runner.invoke(cli, [*base, *header])
    assert out.exit_code == 0, out.output
    assert "added     w 1.0.0 (8 tools)" in out.output
    called = runner.invoke(cli, ["--db", str(db), "call", "forecast", "--args", '{"city": "Rome"}'])
    assert called.exit_code == 0 and '"Rome"' in called.output, called.output

    no_header = runner.invoke(cli, [*base[:-1], "w2"])
    assert no_header.exit_code == ImportFailedError.exit_code
    assert "refused the credentials (HTTP 401)" in no_header.output
    assert "--header 'Authorization=Bearer ${TOKEN}'" in no_header.output

    close_all()
    monkeypatch.setenv("TOOLCAT_TEST_HTTP_TOKEN", "wrong")
    refused = runner.invoke(cli, ["--db", str(db), "call", "forecast", "--args", '{"city": "R"}'])
    assert refused.exit_code == ImportFailedError.exit_code
    assert "refused the credentials (HTTP 403)" in refused.output
    assert "Authorization" in refused.output and "wrong" not in refused.output

    literal = runner.invoke(cli, [*base[:-1], "w3", "--header", "Authorization=Bearer wrong"])
    assert "warning: header 'Authorization' is stored in the catalog as typed" in literal.output

    stored = b"".join(p.read_bytes() for p in tmp_path.glob("catalog.db*"))
    assert SECRET.encode() not in stored


@pytest.mark.slow
def test_register_from_the_cli_checks_its_options(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    runner = CliRunner()
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
            "--env",
            "TOOLCAT_TEST_VARIANT=${TOOLCAT_TEST_VARIANT}",
            "--cwd",
            str(tmp_path),
            "--on-change",
            "warn",
        ],
    )
    assert stdio.exit_code == 0, stdio.output
    shown = runner.invoke(cli, ["--db", db, "show", "s.shout"])
    assert "on_change=warn" in shown.output and "${TOOLCAT_TEST_VARIANT}" in shown.output
    listed = runner.invoke(cli, ["--db", db, "list", "--tag", "weather"])
    assert "s.forecast" in listed.output
    missing = runner.invoke(cli, ["--db", db, "register", "--mcp-stdio", SERVER])
    assert missing.exit_code == 2 and "--toolkit" in missing.output
    header = runner.invoke(
        cli, ["--db", db, "register", "--mcp-stdio", SERVER, "--toolkit", "x", "--header", "A=b"]
    )
    assert header.exit_code == 2 and "--header goes with --mcp-http" in header.output
    malformed = runner.invoke(
        cli, ["--db", db, "register", "--mcp-stdio", SERVER, "--toolkit", "x", "--env", "NOVALUE"]
    )
    assert malformed.exit_code == 1 and "expected NAME=VALUE" in malformed.output
    bad = runner.invoke(
        cli, ["--db", db, "register", "--mcp-stdio", f"{BAD} crash", "--toolkit", "x"]
    )
    assert bad.exit_code == ImportFailedError.exit_code
    assert "cannot start MCP server" in bad.output


def test_a_change_later_on_a_long_lived_connection_is_caught(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server changes a description mid-connection without announcing it: within
    RECHECK_SECONDS the next call is refused, not sent as if unchanged."""
    from toolcat.remote import mcp as mcpclient

    monkeypatch.setattr(mcpclient, "RECHECK_SECONDS", 0.5, raising=False)
    register(catalog)
    assert catalog.call("shout", {"text": "a"}).success  # checked: unchanged
    assert catalog.call("shout", {"text": "rug-pull"}).success  # now it changes, silently
    time.sleep(0.6)
    refused = catalog.call("shout", {"text": "b"})
    assert refused.error_code == "IMPORT_FAILED", refused
    assert "changed the description of tool 'shout'" in (refused.error or "")
    assert "the call was not sent" in (refused.error or "")


def test_warn_says_the_call_was_sent_and_the_cli_prints_it(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(db_path) as catalog:
        register(catalog, on_change="warn")
    switch_server_to_variant_2(monkeypatch)
    with Catalog(db_path) as catalog:
        called = catalog.call("shout", {"text": "a"})
    assert called.success
    [event] = [e for e in called.events if e.level == "warning"]
    assert "calling it anyway (--on-change warn)" in (event.message or "")
    assert "not sent" not in (event.message or "")
    done = subprocess.run(
        [sys.executable, "-m", "toolcat.cli", "--db", str(db_path), "call", "shout", *SHOUT_A],
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("{") or "A" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, done.stderr
    assert "changed the description of tool 'shout'" in warnings[0]
    assert "calling it anyway" in warnings[0] and "not sent" not in warnings[0]
