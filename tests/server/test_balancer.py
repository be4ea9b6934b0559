"""The "Replicas" set-up of docs/serving.md, run as written: its two ``toolcat serve --http``
command lines and its haproxy configuration, read from the page (only the ports, made free,
and the catalog path change). One 2026 client lists, searches, calls and hears a list change
through the balancer. Slow: it may install haproxy from Debian's packages (`make haproxy`)."""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from tests.helpers import ROOT, SAMPLE_TOOLKITS, free_port, wait_for_port
from tests.server.clients import MODERN, http_session, run, server_env, text
from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module

TOKEN = "replica-token-1"
DOC = ROOT / "docs" / "serving.md"
TOKENS_YAML = f"""\
principals:
  - name: everyone
    token: {TOKEN}
"""


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


def documented_setup() -> tuple[list[str], str]:
    """The Replicas section's ``serve`` command lines and its haproxy configuration."""
    page = DOC.read_text()
    section = page.split("\n## Replicas\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    commands = [
        line
        for kind, body in blocks
        if kind == "text"
        for line in body.splitlines()
        if line.startswith("toolcat ")
    ]
    configs = [body for kind, body in blocks if kind == "haproxy"]
    assert len(commands) == 2 and len(configs) == 1, "the Replicas section changed shape"
    return commands, configs[0]


@contextlib.contextmanager
def processes(
    commands: list[list[str]], cwd: Path, label: str
) -> Iterator[tuple[list[subprocess.Popen[bytes]], list[Path]]]:
    """Start each command (stderr to a file in ``cwd``); stop them all at the end."""
    started: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i, command in enumerate(commands):
            log = cwd / f"{label}-{i}.txt"
            logs.append(log)
            with open(log, "w") as errlog:
                started.append(
                    subprocess.Popen(
                        command,
                        cwd=cwd,
                        env=server_env(cwd),
                        stdout=subprocess.DEVNULL,
                        stderr=errlog,
                    )
                )
        yield started, logs
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(10)


@pytest.mark.slow
def test_the_documented_replicas_behind_haproxy(tmp_path: Path) -> None:
    binary = haproxy()
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
    (tmp_path / "tokens.yaml").write_text(TOKENS_YAML)
    lines, config = documented_setup()
    ports = {documented: free_port() for documented in ("8800", "8801", "8802")}

    def local(text: str) -> str:
        for documented, port in ports.items():
            text = re.sub(rf"\b{documented}\b", str(port), text)
        return text.replace("/srv/catalog.db", str(db))

    replicas = []
    for line in lines:
        argv = shlex.split(local(line))
        assert argv[0] == "toolcat"
        replicas.append([sys.executable, "-m", "toolcat.cli", *argv[1:]])
    (tmp_path / "toolcat.cfg").write_text(local(config))
    balancer = [binary, "-f", "toolcat.cfg", "-db"]
    with processes(replicas, tmp_path, "replica") as (started, logs):
        for process, documented in zip(started, ("8801", "8802"), strict=True):
            wait_for_port(ports[documented], process)
        # The balancer after its backends: its first health checks find them up.
        with processes([balancer], tmp_path, "haproxy") as ([front], _):
            wait_for_port(ports["8800"], front)
            run_client(f"http://127.0.0.1:{ports['8800']}/mcp", db)
    for log in logs:
        said = log.read_text()
        assert "Traceback" not in said and " 421 " not in said
        # Round robin reached both (each replica's access log shows the calls it answered).
        assert "everyone tools/call call_tool:add ok" in said, said


def run_client(url: str, db: Path) -> None:
    """One 2026 client through the balancer: lists, searches, calls, hears a change."""

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


def remove_math(db: Path) -> None:
    with Catalog(db) as catalog:
        catalog.remove("math")


def test_the_documented_setup_is_found() -> None:
    """Fast: the page still holds what the slow test runs (two replicas, one balancer)."""
    lines, config = documented_setup()
    assert all("serve --http" in line for line in lines)
    assert "bind 127.0.0.1:8800" in config and "Host" not in config  # no Host rewriting
