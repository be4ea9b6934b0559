"""The console's toolkits page in pages (keyset on the name), so it stays fast at a million
tools: a real ``toolcat serve --http --tokens`` process over a catalog of 130 toolkits."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("mcp")
pytest.importorskip("jinja2")

from tests.helpers import toolkit_data
from tests.server.clients import http_server
from tests.server.console.site import ADMIN_TOKEN, TOKENS, login
from toolcat import Catalog, Toolkit
from toolcat.server.console.views import TOOLKITS_PAGE

KITS = 130


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("toolkits")
    db = tmp / "catalog.db"
    with Catalog(db) as catalog:
        names = [f"kit-{i:03d}" for i in range(KITS)] + ["math"]
        catalog.register(*(Toolkit.model_validate(toolkit_data(name)) for name in names))
    (tmp / "tokens.yaml").write_text(TOKENS)
    with http_server(db, tmp, "--tokens", str(tmp / "tokens.yaml")) as (url, _stderr):
        yield url.removesuffix("/mcp")


def pages(base: str, token: str) -> list[list[str]]:
    client = login(base, token)
    try:
        found = []
        address: str | None = "/ui/toolkits"
        while address is not None:
            answer = client.get(address)
            assert answer.status_code == 200, answer.text
            found.append(re.findall(r"<caption>Versions of ([^<]+)</caption>", answer.text))
            more = re.search(r'<a href="(/ui/toolkits\?after=[^"]+)" rel="next">', answer.text)
            address = more.group(1) if more else None
            assert len(found) < 10
        return found
    finally:
        client.close()


def test_toolkits_come_in_pages_each_once(base: str) -> None:
    seen = pages(base, ADMIN_TOKEN)
    assert [len(p) for p in seen] == [TOOLKITS_PAGE, TOOLKITS_PAGE, KITS + 1 - 2 * TOOLKITS_PAGE]
    flat = [name for page in seen for name in page]
    assert flat == sorted(flat) and len(set(flat)) == KITS + 1


def test_a_scoped_principal_pages_only_its_toolkits(base: str) -> None:
    assert pages(base, "math-team-token-0123") == [["math"]]


@pytest.mark.parametrize("after", ["..%2F..", "Kit", "x" * 65, "%00", "kit%0a"])
def test_a_bad_after_is_a_400_that_does_not_echo_it(base: str, after: str) -> None:
    client = login(base, ADMIN_TOKEN)
    try:
        answer = client.get(f"/ui/toolkits?after={after}")
    finally:
        client.close()
    assert answer.status_code == 400
    assert "after must be a toolkit name" in answer.text and after not in answer.text
