"""``toolcat serve --replica-of`` as an operator runs it: a URL that cannot work fails at once
or within ``--replica-wait``, and stopping the replica stops Litestream's children too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, free_port
from tests.store.test_replica import LITESTREAM
from toolcat import CatalogError

pytest.importorskip("mcp")


def serve(tmp_path: Path, *args: str, path: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolcat",
            "--db",
            str(tmp_path / "replica" / "catalog.db"),
            "serve",
            "--http",
            "--port",
            str(free_port()),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    "url", ["-config=/etc/passwd", "sftp://user:pw@127.0.0.1/x", "nosuch://bucket/x"], ids=str
)
def test_a_url_that_cannot_work_fails_at_once(tmp_path: Path, url: str) -> None:
    process = serve(tmp_path, f"--replica-of={url}")
    _, err = process.communicate(timeout=60)
    assert process.returncode == CatalogError.exit_code
    assert err.count("\n") == 1 and "--replica-of" in err
    assert "pw" not in err.replace("passwd", "")


def test_a_store_with_nothing_fails_within_the_wait(tmp_path: Path) -> None:
    if LITESTREAM is None:
        pytest.skip("litestream is not installed")
    empty = tmp_path / "store"
    empty.mkdir()
    started = time.monotonic()
    process = serve(tmp_path, "--replica-of", empty.as_uri(), "--replica-wait", "2")
    _, err = process.communicate(timeout=120)
    assert process.returncode == CatalogError.exit_code, err
    assert f"no first revision from {empty.as_uri()} in 2 s" in err
    assert time.monotonic() - started < 60


SLOW_LITESTREAM = """#!/bin/sh
sleep 300 &
echo "$$ $!" > {pids}
wait
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_sigterm_stops_litestream_and_what_it_started(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    fake = bin_dir / "litestream"
    fake.write_text(SLOW_LITESTREAM.format(pids=pids))
    fake.chmod(0o755)
    store = tmp_path / "store"
    store.mkdir()
    process = serve(tmp_path, "--replica-of", store.as_uri(), path=str(bin_dir))
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child, grandchild = (int(p) for p in pids.read_text().split())
    try:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while (alive(child) or alive(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child) and not alive(grandchild)
    finally:
        for pid in (child, grandchild):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
