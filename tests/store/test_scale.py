"""What list mode, status and opening a catalog read must not grow with the catalog.

Counted, not timed: SQLite's virtual-machine steps for the same call on a small and a large
catalog (a progress handler every ``STEP`` instructions), so load on the machine changes
nothing. The large catalog has 40 times the deferred tools of the small one; the always-on
tools are the same.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, Toolkit
from toolcat.store import writer

STEP = 100


def toolkit(name: str, tools: int, *, deferred: bool) -> Toolkit:
    return Toolkit.model_validate(
        {
            "toolkit": name,
            "version": "1.0.0",
            "defer_loading": deferred,
            "tags": ["scale"],
            "tools": [
                {
                    "name": f"tool_{i:05d}",
                    "description": f"Fetch record {i} of the {name} service by its id",
                    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
                }
                for i in range(tools)
            ],
        }
    )


def build(path: Path, deferred_toolkits: int) -> Path:
    with Catalog(path) as catalog:
        # Deferred toolkits on both sides of the always-on one in list order.
        catalog.register(
            toolkit("middle", 20, deferred=False),
            *(
                toolkit(f"{'a' if i % 2 else 'z'}{i:04d}", 100, deferred=True)
                for i in range(deferred_toolkits)
            ),
        )
    return path


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("scale")
    yield build(folder / "small.db", 2), build(folder / "large.db", 80)


def steps(conn: sqlite3.Connection, call: Callable[[], Any]) -> int:
    """SQLite VM instructions (in units of ``STEP``) that ``call`` runs on ``conn``."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    conn.set_progress_handler(tick, STEP)
    try:
        call()
    finally:
        conn.set_progress_handler(None, STEP)
    return counted[0]


def pages_written(conn: sqlite3.Connection, call: Callable[[], Any]) -> int:
    """Database pages ``call`` writes on ``conn`` (WAL frames; no checkpoint meanwhile)."""
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    call()
    frames: int = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    return frames


def cost(path: Path, call: Callable[[Catalog], Any]) -> int:
    with Catalog(path) as catalog:
        call(catalog)  # first use (imports, statements prepared) is not what is compared
        return steps(catalog._conn, lambda: call(catalog))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.list().tools, id="list"),
        pytest.param(lambda c: c.list_summaries(limit=5)["tools"], id="list_summaries-page"),
        pytest.param(lambda c: c.list(toolkit="middle").tools, id="list-toolkit"),
    ],
)
def test_list_reads_the_same_whatever_the_number_of_deferred_tools(
    sizes: tuple[Path, Path], call: Callable[[Catalog], Any]
) -> None:
    small, large = sizes
    with Catalog(large) as catalog:
        assert {
            tool["toolkit"] if isinstance(tool, dict) else tool.toolkit for tool in call(catalog)
        } == {"middle"}
    assert cost(large, call) <= cost(small, call) * 1.5 + 5


def test_registering_into_a_large_catalog_does_not_rewrite_its_index(
    sizes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bulk load (1,000 tools) into a catalog of 8,020 tools: tidying FTS5's segments
    after it adds little to the pages it writes, where merging the whole index (``optimize``
    after every bulk registration, however large the catalog) rewrote every tool's
    postings (``writer.merge_segments``)."""
    batch = [toolkit(f"new{i}", 100, deferred=True) for i in range(10)]
    pages = {}
    for tidy in (False, True):
        if not tidy:
            monkeypatch.setattr(writer, "OPTIMIZE_AFTER", 10**9)
        else:
            monkeypatch.undo()
        copy = tmp_path / f"{tidy}.db"
        shutil.copy(sizes[1], copy)
        with Catalog(copy) as catalog:
            pages[tidy] = pages_written(catalog._conn, lambda: catalog.register(*batch))
            assert len(catalog.search("fetch record 7 new3", k=3).hits) == 3
    assert pages[True] <= pages[False] * 1.25
