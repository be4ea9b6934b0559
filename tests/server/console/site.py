"""A catalog with hostile tool texts and an out-of-scope toolkit, served by ``toolcat serve
--http --tokens`` (a real process), and a logged-in console client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.helpers import SAMPLE_TOOLKITS, toolkit_data, write_manifest
from tests.quality.test_evaluate import _write_bench
from tests.server.clients import http_server
from toolcat import Catalog

ADMIN_TOKEN = "admin-token-0123456789"
MATH_TOKEN = "math-team-token-0123"
PWNED = "document.title='pwned'"
EVIL_DESCRIPTION = (
    f'<img src=x onerror="{PWNED}"><script>{PWNED}</script> '
    '<a href="javascript:alert(1)">click</a> " onmouseover="alert(2)'
)
EVIL_PARAM = '"><script>alert(3)</script>'
# Raw fragments that must never reach a page unescaped.
RAW = ["<script>", "<img src=x", '" onmouseover=', 'href="javascript:', "<b onmouseover"]


def evil_toolkit(version: str = "1.0.0", extra: str = "") -> dict[str, Any]:
    return toolkit_data(
        "evil",
        version,
        description="<script>alert('kit')</script>",
        module="evil_tools",
        tags=["<script>tag</script>", '" onmouseover="alert(1)'],
        tools=[
            {
                "name": "pwn",
                "description": EVIL_DESCRIPTION + extra,
                "implementation": "evil_tools.x:pwn",
                "parameters": {
                    "type": "object",
                    "properties": {
                        EVIL_PARAM: {
                            "type": "string",
                            "description": "javascript:alert(4) <b onmouseover=alert(5)>x</b>",
                        }
                    },
                },
            }
        ],
    )


def secret_toolkit() -> dict[str, Any]:
    return toolkit_data(
        "secretkit",
        "1.0.0",
        description="Out of the math team's scope.",
        module="secret_tools",
        tags=["hidden"],
        tools=[
            {
                "name": "launch_rockets",
                "description": "Launch the rockets at the prime factors of a number.",
                "implementation": "secret_tools.x:launch",
                "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            }
        ],
    )


TOKENS = f"""\
principals:
  - name: boss
    token: {ADMIN_TOKEN}
    admin: true
  - name: math-team
    token: {MATH_TOKEN}
    toolkits: [math]
"""


def make_catalog(tmp: Path) -> Path:
    db = tmp / "catalog.db"
    manifests = tmp / "manifests"
    manifests.mkdir()
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
        catalog.register(write_manifest(manifests, evil_toolkit()))
        (manifests / "evil.yaml").unlink()
        catalog.register(write_manifest(manifests, evil_toolkit("2.0.0", " (second)")))
        catalog.register(write_manifest(manifests, secret_toolkit()))
    return db


@contextlib.contextmanager
def console_server(tmp: Path) -> Iterator[tuple[str, Path]]:
    """(the server's base URL, the catalog) of ``serve --http --tokens``."""
    db = make_catalog(tmp)
    tokens = tmp / "tokens.yaml"
    tokens.write_text(TOKENS)
    yaml.safe_load(TOKENS)
    with http_server(db, tmp, "--tokens", str(tokens)) as (url, _stderr):
        yield url.removesuffix("/mcp"), db


def login(base: str, token: str) -> httpx.Client:
    """A client holding the console session cookie of ``token``'s principal."""
    client = httpx.Client(base_url=base, timeout=30)
    answer = client.post(
        "/ui/login", data={"token": token}, headers={"Origin": base}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/"
    return client


# Bench folder names are outside text; a folder name cannot hold "/", the rest of a script can.
HOSTILE_SOURCES = [f'<img src=x onerror="{PWNED}">', "<script>x<", "tab\there\x1b[2J\x07"]


def hostile_bench(tmp: Path) -> Path:
    """A benchmark of three small sources named ``HOSTILE_SOURCES``."""
    bench, more = tmp / "bench", tmp / "more"
    _write_bench(bench)
    _write_bench(more)
    (bench / "alpha").rename(bench / HOSTILE_SOURCES[0])
    (bench / "beta").rename(bench / HOSTILE_SOURCES[1])
    (more / "alpha").rename(bench / HOSTILE_SOURCES[2])
    return bench


def letters(texts: Sequence[str]) -> Any:
    """A stand-in for the plain baseline's MiniLM: each text as its letter counts, unit length."""
    import numpy as np

    out = np.zeros((len(texts), 26), dtype=np.float32)
    for i, text in enumerate(texts):
        for c in text.lower():
            if "a" <= c <= "z":
                out[i, ord(c) - 97] += 1
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
