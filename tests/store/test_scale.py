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
from toolcat.server.scope import Scope
from toolcat.store import counts, writer

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


def test_status_reads_the_same_whatever_the_size(sizes: tuple[Path, Path]) -> None:
    small, large = sizes
    with Catalog(large) as catalog:
        assert catalog.status()["active_tools"] == 8020
    assert cost(large, lambda c: c.status()) <= cost(small, lambda c: c.status()) * 1.5 + 5


def kept(conn: sqlite3.Connection) -> dict[str, int]:
    return dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key = 'active_tools' OR key LIKE 'vectors:%'"
        ).fetchall()
    )


def test_kept_counts_equal_a_recount_after_every_kind_of_change(db_path: Path) -> None:
    """Each change that moves which tools are active, or which have vectors, keeps the
    counts status reads equal to counting the tables again, whichever code makes it."""
    vector = b"\0" * 16

    def check(catalog: Catalog) -> None:
        conn = catalog._conn
        have = kept(conn)
        conn.execute("BEGIN")
        counts.recount(conn)
        expected = kept(conn)
        conn.execute("ROLLBACK")
        assert {k: v for k, v in have.items() if v} == {k: v for k, v in expected.items() if v}
        status = catalog.status()
        assert status["active_tools"] == expected.get("active_tools", 0)
        assert status["coverage"]["bm25"]["indexed"] == status["active_tools"]

    def vectors(catalog: Catalog, model: str) -> None:
        hashes = [r[0] for r in catalog._conn.execute("SELECT content_hash FROM tools")]
        writer.store_vectors(catalog._conn, model, [(h, vector) for h in hashes[::2]])

    def sql(catalog: Catalog, statement: str) -> None:
        with writer.write_transaction(catalog._conn):
            catalog._conn.execute(statement)

    with Catalog(db_path) as catalog:
        steps_ = [
            lambda: catalog.register(
                toolkit("a", 5, deferred=False), toolkit("b", 3, deferred=True)
            ),
            lambda: vectors(catalog, "m1"),
            lambda: catalog.register(
                toolkit("a", 7, deferred=False).model_copy(update={"version": "2.0.0"})
            ),
            lambda: vectors(catalog, "m1"),
            lambda: vectors(catalog, "m2"),
            lambda: catalog.deprecate("a", "2.0.0"),
            lambda: catalog.register(
                toolkit("b", 4, deferred=True).model_copy(update={"description": "new"}),
                replace=True,
            ),
            # Paths that are not the writer's (evaluate's vector cache, a reset of one
            # model's vectors): the counts are kept by triggers, so they hold there too.
            lambda: sql(catalog, "DELETE FROM embeddings WHERE model = 'm2'"),
            lambda: sql(
                catalog,
                "INSERT OR IGNORE INTO embeddings SELECT content_hash, 'm3', x'00' FROM tools",
            ),
            lambda: writer.prune_vectors(catalog._conn, "m1"),
            lambda: catalog.remove("a", "1.0.0"),
            lambda: catalog.register(toolkit("c", 2, deferred=False)),
            lambda: catalog.remove("a"),
            lambda: catalog.remove("b"),
        ]
        for step in steps_:
            step()
            check(catalog)
        assert catalog.status()["active_tools"] == 2


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.get("solo_lookup"), id="get-unique-name"),
        pytest.param(lambda c: c.short_names(c.list().tools), id="short_names-listed"),
        pytest.param(
            lambda c: c.short_names(c.list().tools, within=Scope(tags=("scale",))),
            id="short_names-listed-within-a-scope",
        ),
    ],
)
def test_name_lookups_read_the_same_whatever_the_number_of_toolkits(
    sizes: tuple[Path, Path], call: Callable[[Catalog], Any], tmp_path: Path
) -> None:
    """A lookup by name (a call's, the MCP server's short names for tools/list and every
    search_tools answer) starts from the name index and stops at a name's second tool."""
    solo = toolkit("solo", 1, deferred=True)
    solo = solo.model_copy(
        update={"tools": [solo.tools[0].model_copy(update={"name": "solo_lookup"})]}
    )
    small, large = (shutil.copy(path, tmp_path / path.name) for path in sizes)
    for path in (small, large):
        with Catalog(path) as catalog:
            catalog.register(solo)
    assert cost(large, call) <= cost(small, call) * 1.5 + 5


def test_registering_an_unchanged_batch_again_writes_nothing(tmp_path: Path) -> None:
    """The same 1,200 tools registered again: every toolkit unchanged, so nothing is
    written. Before, the batch's tools were counted whether written or not, and a batch as
    big as the catalog ended in a merge of FTS5's whole index (every tool's postings
    rewritten: at 1M tools, a folder registered again took minutes)."""
    batch = [toolkit(f"kit{i:02d}", 100, deferred=True) for i in range(12)]
    with Catalog(tmp_path / "c.db") as catalog:
        for one in batch:  # a call each: FTS5's segments left as they come (a few hundred
            catalog.register(one)  # tools a call are not worth merging)
        revision = catalog.revision
        written = pages_written(catalog._conn, lambda: catalog.register(*batch))
        assert written <= 2, written
        assert catalog.revision == revision
        assert len(catalog.search("fetch record 7 kit03", k=3).hits) == 3
