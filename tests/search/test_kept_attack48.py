"""Hostile: ``Catalog.search_kept`` is what a server runs on its event loop, so its work must
not grow with what the catalog holds beyond the request's own hits: many tools sharing one
name (a principal's reordering pins the tools the query names), many toolkits (a scope's
toolkit that is not registered). And what it answers is ``search``'s, whoever wrote the file
meanwhile and whatever the request's filters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Policy, Toolkit
from toolcat.errors import UnknownToolkitError
from toolcat.search import engine


def same_named(count: int) -> list[Toolkit]:
    """``count`` toolkits, each with a tool called ``get`` (an OpenAPI import's verbs)."""
    return [
        Toolkit.model_validate(
            {
                "toolkit": f"kit{i:05d}",
                "version": "1.0.0",
                "module": "tests.fixtures",
                "tags": ["first" if i == 0 else "rest"],
                "tools": [
                    {
                        "name": "get",
                        "description": f"Fetch record {i} from the store.",
                        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
                        "implementation": "tests.fixtures.tools:add",
                    }
                ],
            }
        )
        for i in range(count)
    ]


def vm_steps(catalog: Catalog, fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the SQLite VM instructions it ran on ``catalog``'s connection: the work
    a read did, counted exactly (no clock)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    catalog._conn.set_progress_handler(count, 1)
    try:
        return fn(), steps[0]
    finally:
        catalog._conn.set_progress_handler(None, 1)


def catalog_of(tmp_path: Path, count: int) -> Path:
    path = tmp_path / f"same{count}.db"
    with Catalog(path) as catalog:
        catalog.register(same_named(count))
    return path


def warm(catalog: Catalog, query: str, **options: Any) -> None:
    for _ in range(engine.POSTINGS_AFTER + 1):
        catalog.search(query, **options)
    assert catalog._search.postings.index is not None


def kept_work_with_uses(path: Path) -> int:
    """VM steps of a kept answer for a principal with a recorded use of one hit, the query
    naming every ``get`` tool exactly."""
    with Catalog(path) as catalog:
        options: dict[str, Any] = {"mode": "bm25", "k": 5, "principal": "carol"}
        warm(catalog, "get", **options)
        hit = catalog.search("get", **options).hits[0].tool.id
        assert catalog.record_uses([("get", hit)], principal="carol") == 1
        expected = catalog.search("get", **options)
        found, steps = vm_steps(catalog, lambda: catalog.search_kept("get", **options))
        assert found is not None
        assert [h.tool.id for h in found.hits] == [h.tool.id for h in expected.hits]
        return steps


def test_a_principals_kept_answer_does_not_read_every_same_named_tool(tmp_path: Path) -> None:
    """Hostile: a one-word query naming a tool that thousands of toolkits have, asked by a
    principal with one recorded use. The reordering asked which tools the query names
    exactly across the whole catalog (every ``get`` row, all its columns), on the event
    loop at every repeat; only the ranked hits matter."""
    few = kept_work_with_uses(catalog_of(tmp_path, 10))
    many = kept_work_with_uses(catalog_of(tmp_path, 400))
    assert many < few * 2, (few, many)


def test_a_scope_toolkit_not_registered_is_no_kept_answer_and_reads_no_names(
    tmp_path: Path,
) -> None:
    """Hostile: a scope whose toolkit is not (or no longer) registered. The kept path read
    every toolkit's name and ran difflib over them for the error's close matches, on the
    event loop at every request; it now leaves the request (and its error) to ``search``."""

    def work(path: Path) -> int:
        with Catalog(path) as catalog:
            warm(catalog, "fetch record", mode="bm25")
            found, steps = vm_steps(
                catalog, lambda: catalog.search_kept("fetch record", mode="bm25", toolkit="kit9")
            )
            assert found is None
            with pytest.raises(UnknownToolkitError, match="Did you mean"):
                catalog.search("fetch record", mode="bm25", toolkit="kit9")  # search's error
            return steps

    few, many = work(catalog_of(tmp_path, 10)), work(catalog_of(tmp_path, 400))
    assert many < few * 2, (few, many)


@pytest.fixture
def sample(sample_path: Path) -> Path:
    return sample_path


QUERY = "count the words in a text"


def hits(found: Any) -> list[str] | None:
    return None if found is None else [h.tool.id for h in found.hits]


def test_kept_answers_follow_every_request_filter(sample: Path) -> None:
    """Regression: the same query under other tags, exclusions, policies or toolkit is
    never answered from another filter's kept ranking."""
    variants: list[dict[str, Any]] = [
        {},
        {"tags": ["text"]},
        {"any_tags": ["filesystem", "text"]},
        {"exclude_tags": ["text"]},
        {"policies": [Policy(deny=["toolkit:text"])]},
        {"policies": [Policy(deny=["toolkit:*"], allow=["toolkit:files"])]},
        {"toolkit": "text"},
    ]
    with Catalog(sample) as catalog, Catalog(sample) as fresh:
        for options in variants:
            warm(catalog, QUERY, mode="bm25", **options)
        for options in variants:
            expected = hits(fresh.search(QUERY, mode="bm25", **options))
            assert hits(catalog.search_kept(QUERY, mode="bm25", **options)) == expected, options


@pytest.mark.parametrize("change", ["deprecate", "remove", "reregister", "fold"])
def test_a_write_from_another_connection_drops_the_kept_answer(sample: Path, change: str) -> None:
    """Regression: whatever another connection writes, the next kept look-up sees it."""
    with Catalog(sample) as catalog, Catalog(sample) as admin:
        warm(catalog, QUERY, mode="bm25")
        first = catalog.search(QUERY, mode="bm25").hits[0].tool
        assert catalog.search_kept(QUERY, mode="bm25") is not None
        if change == "deprecate":
            admin.deprecate(f"{first.toolkit}@{first.version}")
        elif change == "remove":
            admin.remove(first.toolkit)
        elif change == "reregister":
            admin.remove(first.toolkit)
            admin.register(SAMPLE_TOOLKITS)
        else:  # the catalog's own uses folded into the index
            last = catalog.search(QUERY, mode="bm25").hits[-1].tool.id
            assert admin.record_uses([(QUERY, last)] * 3) >= 1
            admin.reindex()
        assert catalog.search_kept(QUERY, mode="bm25") is None
        with Catalog(sample) as fresh:
            assert hits(catalog.search(QUERY, mode="bm25")) == hits(
                fresh.search(QUERY, mode="bm25")
            )


def test_kept_short_names_are_shared_by_readers_until_forgotten(tmp_path: Path) -> None:
    """The shared-name verdicts a reader keeps serve the others' ``short_names_kept``;
    none is given before any was read, nor after a copy swapped in again at the same
    revision (``forget_kept``)."""
    from toolcat.server.scope import Scope

    path = catalog_of(tmp_path, 5)
    scope = Scope(tags=("first",))
    wide = Scope()
    with Catalog(path) as server, Catalog(path) as first, Catalog(path) as second:
        first.share_indexes(server)
        second.share_indexes(server)
        tool = first.get("kit00000.get")
        assert second.short_names_kept([tool], within=scope) is None  # nothing read yet
        assert first.short_names([tool], within=scope) == {"kit00000.get": "get"}
        assert first.short_names([tool], within=wide) == {"kit00000.get": "kit00000.get"}
        assert second.short_names_kept([tool], within=scope) == {"kit00000.get": "get"}
        assert second.short_names_kept([tool], within=wide) == {"kit00000.get": "kit00000.get"}
        with Catalog(path) as admin:  # a second 'get' within the scope: a new revision
            admin.register(
                [
                    kit.model_copy(update={"tags": ["first"], "version": "2.0.0"})
                    for kit in same_named(2)[1:]
                ]
            )
        assert second.short_names_kept([tool], within=scope) is None
        assert first.short_names([tool], within=scope) == {"kit00000.get": "kit00000.get"}
        server.forget_kept()
        third = Catalog(path)
        try:
            third.share_indexes(server)
            assert third.short_names_kept([tool], within=scope) is None
        finally:
            third.close()


def test_the_kept_path_never_asks_whether_the_model_has_vectors(
    sample_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile (the lead's follow-up): with the default mode, whether the model has vectors
    is a scan of the embeddings table when it has none but another model has many (nothing
    indexes the model alone). The kept path answers only when the best mode is already
    known at this revision; the scan is a reader's, once per revision for all readers."""
    from toolcat.store import reader

    asked: list[str] = []
    has_vectors = reader.has_vectors

    def counted(conn: Any, model: str) -> bool:
        asked.append(model)
        return has_vectors(conn, model)

    monkeypatch.setattr(reader, "has_vectors", counted)
    with Catalog(sample_path) as server, Catalog(sample_path) as other:
        other.share_indexes(server)
        assert other.search_kept("hash a string") is None and not asked  # not known: no scan
        for _ in range(engine.POSTINGS_AFTER):
            server.search("hash a string")
        scans = len(asked)
        assert 1 <= scans <= engine.POSTINGS_AFTER  # the reader's, kept for the revision
        assert other.search_kept("hash a string") is not None and len(asked) == scans
        server.reindex()  # vectors: a new revision, hybrid by default
        assert other.search_kept("hash a string") is None and len(asked) == scans
        server.search("hash a string")
        assert other.search_kept("hash a string") is None  # hybrid: a reader's to answer
        assert other.search_kept("hash a string", mode="bm25") is None  # never ranked as BM25
        assert len(asked) == scans + 1


def test_a_principals_uses_are_read_for_its_hits_only(tmp_path: Path) -> None:
    """Hostile (the lead's follow-up): statistics (``ANALYZE``) taken while the usage table
    was small led SQLite to scan it whole (every principal's uses) and join the tools to
    it, at every request of a principal with a use (on the event loop for a kept answer),
    however big it grew after. Reading the uses of five hits costs the same with no other
    principal's uses as with 300's."""
    from toolcat.store import reader

    path = catalog_of(tmp_path, 20)

    def work(others: int) -> int:
        copy = tmp_path / f"uses{others}.db"
        copy.write_bytes(path.read_bytes())
        with Catalog(copy) as catalog:
            tools = [t.id for t in catalog.iter_tools(include_deferred=True)]
            mine = [("look up one stored record", t) for t in tools]
            assert catalog.record_uses(mine, principal="carol") == len(tools)
            catalog._conn.execute("ANALYZE")  # statistics of a small usage table, kept
            for n in range(others):
                catalog.record_uses([("get", t) for t in tools], principal=f"p{n}")
            ids = [row[0] for row in catalog._conn.execute("SELECT id FROM tools LIMIT 5")]
            found, steps = vm_steps(
                catalog, lambda: reader.principal_uses(catalog._conn, "carol", ids)
            )
            assert sorted(found) == sorted(ids)
            return steps

    few, many = work(0), work(300)
    assert many < few * 2, (few, many)
