"""Every progress notification of a call reaches the client before its result, in both eras
and over both transports, with only values the tool reported."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import ERAS, http_server, http_session, run, stdio_session
from toolcat import Catalog

ROWS = 40
CSV = "region,amount\n" + "".join(f"r{i % 3},{i}\n" for i in range(ROWS))
# group_report: 3 statuses and a progress every ROWS // 20 rows.
EXPECTED = 3 + 20
Seen = list[tuple[float, "float | None", "str | None"]]


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("delivery") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return db


async def call_counting(session: object) -> Seen:
    seen: Seen = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    arguments = {"csv_text": CSV, "group_by": "region", "value": "amount"}
    result = await session.client.call_tool(  # type: ignore[attr-defined]
        "call_tool", {"name": "group_report", "arguments": arguments}, progress_callback=progress
    )
    assert not result.is_error, result.content
    return list(seen)  # what had arrived when the result did


def check_values(seen: Seen) -> None:
    assert len(seen) == EXPECTED, seen
    first = seen[0]
    assert first == (0.0, None, "parsing: reading CSV to group by 'region'")  # no 5e-324
    done = [d for d, *_ in seen]
    assert done == sorted(done)
    assert all(total is None or d <= total for d, total, _ in seen)
    assert seen[-1] == (ROWS, ROWS, "writing report: 3 groups")  # not 40.00000000000001


@pytest.mark.parametrize("mode", ERAS)
def test_stdio_delivers_every_progress_before_the_result(
    sample_db: Path, tmp_path: Path, mode: str
) -> None:
    async def check() -> None:
        async with stdio_session(sample_db, tmp_path, mode=mode) as s:
            for _ in range(3):
                check_values(await call_counting(s))

    run(check)


@pytest.mark.parametrize("mode", ERAS)
def test_http_delivers_every_progress_before_the_result(
    sample_db: Path, tmp_path: Path, mode: str
) -> None:
    with http_server(sample_db, tmp_path) as (url, _):

        async def check() -> None:
            async with http_session(url, None, mode=mode) as s:
                for _ in range(10):  # a quick call: its stream closes right after the result
                    check_values(await call_counting(s))

        run(check)
