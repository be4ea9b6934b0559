"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TOOLKITS = ROOT / "data" / "toolkits"
BENCH = ROOT.parent / "shared" / "bench"


def stable_id(value: Any) -> str:
    """A parametrized test's id: ``repr`` without memory addresses, so that every pytest-xdist
    worker collects the same ids (``make test`` runs on several)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def toolkit_data(
    name: str = "weather",
    version: str = "1.0.0",
    tools: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A valid manifest as a dict, to edit in tests."""
    data: dict[str, Any] = {
        "toolkit": name,
        "version": version,
        "description": "Current conditions and forecasts.",
        "tags": ["network", "weather"],
        "module": "weather_tools",
        "tools": tools
        if tools is not None
        else [
            {
                "name": "get_forecast",
                "description": "Daily forecast for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name"},
                        "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 5},
                    },
                    "required": ["city"],
                },
                "implementation": "weather_tools.forecast:get_forecast",
                "tags": ["read-only"],
                "defer_loading": True,
                "idempotent": True,
                "examples": ["will it rain in Lyon this weekend"],
            },
            {
                "name": "current_conditions",
                "description": "Temperature, wind and sky right now at a place.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "implementation": "weather_tools.now:current_conditions",
                "tags": ["read-only"],
            },
        ],
    }
    data.update(extra)
    return data


def write_manifest(folder: Path, data: Any, suffix: str = ".yaml", name: str | None = None) -> Path:
    stem = name or (data.get("toolkit", "manifest") if isinstance(data, dict) else "manifest")
    path = folder / f"{stem}{suffix}"
    if suffix in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    elif suffix == ".json":
        path.write_text(json.dumps(data))
    else:
        raise ValueError(suffix)
    return path


def table_snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every catalog table, to prove that a failure changed nothing."""
    conn = sqlite3.connect(db)
    try:
        tables = ["meta", "toolkits", "tools", "tool_tags", "embeddings", "tools_fts"]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def run_script(
    script: str, *args: str, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with this Python in a fresh process (from the repository root); a
    non-zero exit fails the test."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=timeout,
    )


def free_port() -> int:
    """A loopback port nothing listens on (for servers the tests start)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: Any, seconds: float = 30) -> None:
    """Wait until ``process`` (a ``subprocess.Popen``) accepts connections on ``port``."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server on port {port} did not start") from None
            time.sleep(0.05)
