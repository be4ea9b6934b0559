"""``GET /healthz`` as an outsider meets it: the short answer without a token, the Host
checked as for ``/mcp``, ``max_stale`` a finite number, URLs never carrying a secret, and a
replica that cannot serve saying 503 (never 500 with a traceback)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store.test_replica import LITESTREAM, Primary
from toolcat import Catalog
from toolcat.store.replica import Follower

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx2")
pytestmark = pytest.mark.skipif(LITESTREAM is None, reason="litestream is not installed")

TOKEN = "s3cret-token-for-health"
SECRET_URL_PARTS = ("hunter2", "topsecret", "deploy")


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Follower]:
    """A replica of a folder store whose URL carries a secret in a query value."""
    primary = Primary(tmp_path)
    primary.register(SAMPLE_TOOLKITS / "math.yaml")
    url = f"{primary.url}?token=topsecret"
    follower = Follower(tmp_path / "replica" / "catalog.db", url)
    assert follower.sync() is True
    follower.state["error"] = "litestream ltx failed: cannot reach the store"
    yield follower


def get(
    follower: Follower,
    path: str,
    *,
    token: str | None = None,
    host: str = "127.0.0.1:8765",
    tokens: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> Any:
    """``path`` asked of a replica's HTTP app (``meanwhile`` runs once it serves)."""
    from toolcat.server.http import http_app
    from toolcat.server.mcp import CatalogServer
    from toolcat.server.tokens import Tokens

    async def ask() -> Any:
        with Catalog(follower.path) as catalog:
            server = CatalogServer(catalog, follower=follower)
            app = http_app(
                server, host="127.0.0.1", port=8765, tokens=Tokens.single(TOKEN) if tokens else None
            )
            if meanwhile is not None:
                meanwhile()
            headers = {"Host": host}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            transport = httpx.ASGITransport(app=app)
            try:
                async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                    return await client.get(path, headers=headers)
            finally:
                server.close()

    return anyio.run(ask)


def test_without_a_token_the_answer_is_status_and_revisions(replica: Follower) -> None:
    response = get(replica, "/healthz")
    assert response.status_code == 200
    assert set(response.json()) <= {"role", "revision", "primary_revision"}
    assert "file://" not in response.text and "litestream" not in response.text
    for wrong in ("Bearer nope", "Basic x"):
        short = get(replica, "/healthz", token=wrong.split()[1])
        assert short.status_code == 200 and "primary" not in short.json()


def test_a_token_shows_the_details_with_the_url_redacted(replica: Follower) -> None:
    response = get(replica, "/healthz", token=TOKEN)
    assert response.status_code == 200
    report = response.json()
    assert report["primary"].startswith("file://") and report["error"]
    assert report["primary"].endswith("?token=***")
    for secret in SECRET_URL_PARTS:
        assert secret not in response.text


@pytest.mark.parametrize("host", ["evil.example:8765", "127.0.0.1.evil.example", "x.test"])
def test_a_foreign_host_is_refused_as_on_mcp(replica: Follower, host: str) -> None:
    assert get(replica, "/healthz", host=host).status_code == 421


@pytest.mark.parametrize("value", ["nan", "NaN", "-1", "inf", "-inf", "abc", ""])
def test_max_stale_must_be_a_finite_number_at_least_zero(replica: Follower, value: str) -> None:
    response = get(replica, f"/healthz?max_stale={value}")
    assert response.status_code == 400, value
    assert "max_stale" in response.json()["error"]


def test_max_stale_judges_the_replicas_staleness(replica: Follower) -> None:
    assert get(replica, "/healthz?max_stale=60").status_code == 200
    replica.state["checked_at"] -= 120
    assert get(replica, "/healthz?max_stale=60").status_code == 503


def truncated(follower: Follower) -> None:
    with open(follower.path, "r+b") as f:
        f.truncate(4096)


def test_a_replica_whose_copy_is_damaged_answers_503_then_restores_it(
    replica: Follower,
) -> None:
    """Truncated while serving: the next look notices (the file changed), health says 503
    while the copy cannot serve, and the copy is restored again from the store."""

    def damaged_and_store_gone() -> None:
        truncated(replica)
        Path(replica.source.split("?")[0].removeprefix("file://")).rename(
            replica.path.parent / "store-away"
        )
        assert replica.sync() is False  # noticed, and nothing to restore from

    response = get(replica, "/healthz", tokens=False, meanwhile=damaged_and_store_gone)
    assert response.status_code == 503
    assert "damaged" in response.json()["error"]
    (replica.path.parent / "store-away").rename(
        replica.source.split("?")[0].removeprefix("file://")
    )
    restarted = Follower(replica.path, replica.source)  # a restart meets the damaged copy
    assert not restarted.serving
    assert restarted.sync() is True and restarted.serving
    with Catalog(replica.path) as copy:
        assert copy.list(limit=1).tools


def test_a_search_that_meets_damage_has_the_copy_checked(replica: Follower) -> None:
    """A change that keeps size and time (a bad disk) is caught when a search meets it."""
    replica.sync()
    info = replica.path.stat()
    with open(replica.path, "r+b") as f:
        f.seek(-3 * 4096, 2)
        f.write(b"\xff" * 3 * 4096)
    os.utime(replica.path, ns=(info.st_atime_ns, info.st_mtime_ns))
    replica.suspect()  # what the server's readers do on CatalogDamagedError
    assert replica.sync() is True  # checked, found damaged, restored again


def test_without_tokens_the_details_are_shown_redacted(replica: Follower) -> None:
    response = get(replica, "/healthz", tokens=False)
    assert response.status_code == 200 and "primary" in response.json()
    for secret in SECRET_URL_PARTS:
        assert secret not in response.text


def test_a_balancers_probe_without_a_host_header_is_answered(replica: Follower) -> None:
    """haproxy's ``option httpchk GET /healthz`` is an HTTP/1.0 request with no ``Host``: it
    is answered (a browser, the rebinding risk, always sends one, and a foreign one is 421)."""
    from toolcat.server.http import http_app
    from toolcat.server.mcp import CatalogServer
    from toolcat.server.tokens import Tokens

    async def probe() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        with Catalog(replica.path) as catalog:
            server = CatalogServer(catalog, follower=replica)
            app = http_app(server, host="127.0.0.1", port=8765, tokens=Tokens.single(TOKEN))
            scope = {
                "type": "http",
                "http_version": "1.0",
                "method": "GET",
                "scheme": "http",
                "path": "/healthz",
                "raw_path": b"/healthz",
                "query_string": b"",
                "root_path": "",
                "headers": [],
                "client": ("127.0.0.1", 40000),
                "server": ("127.0.0.1", 8765),
            }

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            try:
                await app(scope, receive, send)
            finally:
                server.close()
        return sent

    start = next(m for m in anyio.run(probe) if m["type"] == "http.response.start")
    assert start["status"] == 200
    assert get(replica, "/healthz", host="evil.example:8765").status_code == 421
