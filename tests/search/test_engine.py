"""The engine's per-revision shortcuts change nothing: fusion's signals read from the
in-memory index give the rankings, scores and ``match`` labels that the tools' ``tools_fts``
rows give, and the index built in the background is served only at its own revision."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Policy, Tool, Toolkit
from toolcat.errors import ToolcatError
from toolcat.search import bm25, engine, lexical_index
from toolcat.search.lexical_index import TantivyIndex

pytest.importorskip("sentence_transformers")

NAMED = ["convert_units", "get_weather", "send email", "delete a file", "zzzz qqq", "the of a"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The sample catalog plus 300 benchmark tools, with vectors (built once)."""
    kits, queries = bench_toolkits(300)
    path = tmp_path_factory.mktemp("engine") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.register(kits)
        catalog.reindex(batch_size=32)
    return path, queries[:40] + NAMED


def answers(catalog: Catalog, query: str, mode: str) -> list[tuple[str, float, str]]:
    return [(h.tool.id, h.score, h.match) for h in catalog.search(query, mode=mode, k=10).hits]


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_signals_from_the_index_equal_those_from_fts_rows(
    indexed: tuple[Path, list[str]], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries = indexed
    monkeypatch.setattr(engine, "ANSWER_CACHE_SIZE", 0)  # every answer ranked, none kept
    from_rows = []
    with monkeypatch.context() as never_built:  # FTS5 and tools_fts rows only
        never_built.setattr(engine, "POSTINGS_AFTER", 10**9)
        with Catalog(path) as fresh:
            for query in queries:
                from_rows.append(answers(fresh, query, mode))
            assert fresh._search.postings.index is None
    with Catalog(path) as warm:
        for query in queries[:2]:
            warm.search(query, mode="bm25")
        assert warm._search.postings.current(warm.revision, bm25.DEFAULT_WEIGHTS)
        from_index = [answers(warm, query, mode) for query in queries]
        from_index_again = [answers(warm, query, mode) for query in queries]  # names cached
    assert from_index == from_rows
    assert from_index_again == from_rows
    assert any(hits for hits in from_rows) and {m for h in from_rows for _, _, m in h} >= {
        "strong",
        "weak",
    }


def test_the_background_build_is_served_only_at_its_own_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kits, queries = bench_toolkits(300)
    path = tmp_path / "catalog.db"
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 1)  # background at any size
    release, reading = threading.Event(), threading.Event()
    real_build = TantivyIndex.build

    def held_build(self: TantivyIndex, *args: Any) -> None:
        reading.set()  # its read transaction has read the revision: its snapshot is taken
        assert release.wait(60)
        real_build(self, *args)

    monkeypatch.setattr(TantivyIndex, "build", held_build)
    # Writes that do not save the index (as the writes of another toolcat, or whose save
    # failed): the server builds it.
    monkeypatch.setattr(lexical_index, "save_current", lambda *args: None)
    query = "wipe a file for good"
    with Catalog(path) as server, Catalog(path) as admin:
        server.register(kits)
        lexical = server._search.postings
        first = [answers(server, query, "bm25") for _ in range(engine.POSTINGS_AFTER)]
        # The query that asked for the index did not wait for it: FTS5 answered.
        assert lexical.building and lexical.index is None
        assert first[0] == first[1]
        # A change lands while the build (which read the catalog before it) runs. (Wait for
        # the build thread to take its snapshot first: on a loaded machine it may not have.)
        assert reading.wait(60)
        admin.register(
            Toolkit(
                name="shredder",
                version="1",
                tools=[Tool(name="shred_file", description="Wipe a file for good")],
            )
        )
        release.set()
        lexical.wait(60)
        assert lexical.index is not None and lexical.revision < server.revision
        after = server.search(query, mode="bm25", k=3)  # the old index is not asked
        assert after.revision == admin.revision
        assert after.hits[0].tool.id == "shredder.shred_file"
        server.search(query, mode="bm25", k=3)  # asks for an index of this revision
        lexical.wait(60)
        assert lexical.current(server.revision, bm25.DEFAULT_WEIGHTS)
        again = server.search(query, mode="bm25", k=3)
        assert [(h.tool.id, h.score) for h in again.hits] == [
            (h.tool.id, h.score) for h in after.hits
        ]
        assert all(answers(server, q, "bm25") for q in queries[:5])


# -- what a warm engine keeps per revision: built hits and whole BM25 answers -----------------


def full(result: Any) -> list[dict[str, Any]]:
    """Every field of every hit, the tool's internal ``module`` included."""
    return [
        {**h.model_dump(), "tool": {**h.tool.model_dump(), "module": h.tool.module}}
        for h in result.hits
    ]


def test_kept_hits_and_answers_equal_fresh_ones(indexed: tuple[Path, list[str]]) -> None:
    path, queries = indexed
    with Catalog(path) as fresh_catalog:
        fresh_catalog._search  # noqa: B018 (the engine, created)
        fresh = []
        for query in queries:
            fresh.append(full(fresh_catalog.search(query, mode="bm25")))
            fresh_catalog._search.built.clear()  # each answer's hits built from rows
            fresh_catalog._search.answers.clear()
    with Catalog(path) as warm:
        first = [warm.search(query, mode="bm25") for query in queries]
        engine_state = warm._search
        assert len(engine_state.built) and len(engine_state.answers) == len(set(queries))
        again = [warm.search(query, mode="bm25") for query in queries]  # kept answers
        assert [full(r) for r in first] == fresh
        assert [full(r) for r in again] == fresh
        for before, after in zip(first, again, strict=True):
            assert after is not before and after.hits is not before.hits  # lists of its own
            after.hits.clear()  # a caller's change stays in its own answer
        assert [full(warm.search(query, mode="bm25")) for query in queries] == fresh
        # Built from rows by construct(), hits equal what validation builds.
        for result in first:
            for hit in result.hits:
                validated = type(hit.tool).model_validate(
                    {**hit.tool.model_dump(), "module": hit.tool.module, "kind": hit.tool.kind}
                )
                assert hit.tool == validated


def test_a_change_from_another_connection_is_seen_by_the_next_query(tmp_path: Path) -> None:
    """Kept answers and hits belong to one revision: a commit from another connection (or
    process) is seen by the very next query, never an answer kept from before it."""
    path = tmp_path / "catalog.db"
    query = "shred a file"
    with Catalog(path) as server, Catalog(path) as admin:
        server.register(SAMPLE_TOOLKITS)
        kit = Toolkit(
            name="shredder",
            version="1",
            tools=[Tool(name="shred_file", description="Shred a file so it cannot be read")],
        )
        admin.register(kit)
        for _ in range(engine.POSTINGS_AFTER + 1):  # the in-memory index, and a kept answer
            before = server.search(query, mode="bm25", k=3)
        assert server._search.postings.current(server.revision, bm25.DEFAULT_WEIGHTS)
        assert before.hits[0].tool.id == "shredder.shred_file"
        assert before.hits[0].tool.description == "Shred a file so it cannot be read"
        assert server._search.answers  # kept
        # Another connection changes the tool's text (a new version) ...
        admin.register(
            Toolkit(
                name="shredder",
                version="2",
                tools=[Tool(name="shred_file", description="Shred a file, overwriting it")],
            )
        )
        after = server.search(query, mode="bm25", k=3)
        assert after.revision == admin.revision > before.revision
        assert after.hits[0].tool.description == "Shred a file, overwriting it"
        assert after.hits[0].tool.version == "2"
        # ... then removes it: the next query no longer finds it.
        admin.remove("shredder")
        gone = server.search(query, mode="bm25", k=3)
        assert gone.revision == admin.revision
        assert all(h.tool.toolkit != "shredder" for h in gone.hits)


def test_answers_are_kept_per_filters(tmp_path: Path) -> None:
    """A scoped caller's kept answer is its scope's: the same request under other filters
    (tags, a toolkit, deferral, a policy's deny rules) is ranked and kept on its own."""
    with Catalog(tmp_path / "catalog.db", policy=Policy(deny=["tag:destructive"])) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        asks: list[dict[str, Any]] = [
            {"include_denied": True},
            {"include_denied": True, "tags": ["destructive"]},
            {"include_denied": True, "toolkit": "sqlite"},
            {"include_denied": True, "include_deferred": False},
            {},  # the policy hides destructive tools
        ]

        def answers() -> list[list[str]]:
            return [
                [h.tool.id for h in catalog.search("file", mode="bm25", k=5, **ask).hits]
                for ask in asks
            ]

        first = answers()
        assert len({tuple(ids) for ids in first}) == len(asks)
        assert len(catalog._search.answers) == len(asks)
        for _ in range(engine.POSTINGS_AFTER):  # kept answers, then the in-memory index
            assert answers() == first
        catalog._search.answers.clear()
        assert answers() == first  # ranked again, from the in-memory index
        assert "files.delete_file" in first[0] and "files.delete_file" not in first[4]


def test_a_caller_that_changes_its_answer_does_not_change_a_kept_one(tmp_path: Path) -> None:
    """A kept answer is rebuilt for each caller: hits and lists are the caller's own."""
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        first = catalog.search("remove an old file", mode="bm25", k=3)
        assert catalog._search.answers  # kept
        expected = [(h.rank, h.score, h.tool.id) for h in first.hits]
        first.hits[0].score = -1.0
        first.hits[0].rank = 99
        first.hits.reverse()
        first.warnings.append("changed by the caller")
        again = catalog.search("remove an old file", mode="bm25", k=3)
        assert [(h.rank, h.score, h.tool.id) for h in again.hits] == expected
        assert again.warnings == []


def summaries_of(catalog: Catalog, query: str, **options: Any) -> dict[str, Any]:
    """What ``search_summaries`` must equal: ``search``'s answer with each tool's summary."""
    result = catalog.search(query, **options)
    return {
        "revision": result.revision,
        "query": result.query,
        "mode": result.mode,
        "hits": [
            {"rank": h.rank, "score": h.score, "match": h.match, "tool": h.tool.summary()}
            for h in result.hits
        ],
        "warnings": result.warnings,
        "no_match": result.no_match,
    }


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"mode": "bm25"},
        {"mode": "embedding", "k": 3},
        {"mode": "hybrid", "tags": ["read-only"]},
        {"mode": "bm25", "toolkit": "files", "include_deferred": False},
        {"mode": "regex", "k": 5},
    ],
    ids=["default", "bm25", "embedding", "hybrid-tags", "bm25-toolkit", "regex"],
)
def test_summaries_are_the_search_without_models(
    indexed: tuple[Path, list[str]], options: dict[str, Any]
) -> None:
    path, queries = indexed
    asked = [*queries[:12], "files.delete_file", "DELETE_FILE", "", "then; after that", "zqxj"]
    if options.get("mode") == "regex":
        asked = ["file", "^get_", "read.*(file|dir)", "files\\.delete_file", "", "zqxj"]
    with Catalog(path) as catalog:
        no_match = set()
        for query in asked:
            expected = summaries_of(catalog, query, **options)
            assert catalog.search_summaries(query, **options) == expected, query
            # Asked again (kept answers, built hits): still equal.
            assert catalog.search_summaries(query, **options) == expected, query
            no_match.add(expected["no_match"])
        assert any(summaries_of(catalog, q, **options)["hits"] for q in asked)
        assert no_match == {True, False}  # "nothing fits" compared both ways


def test_summaries_refuse_what_search_refuses(indexed: tuple[Path, list[str]]) -> None:
    path, _ = indexed
    with Catalog(path) as catalog:
        for bad in ({"k": 0}, {"mode": "fuzzy"}, {"toolkit": "nosuchkit"}):
            with pytest.raises(Exception) as searched:
                catalog.search("read a file", **bad)
            with pytest.raises(type(searched.value), match=re.escape(str(searched.value))):
                catalog.search_summaries("read a file", **bad)


def test_a_call_after_summaries_is_learned_from(tmp_path: Path) -> None:
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        first = catalog.search_summaries("erase an old document", mode="bm25")["hits"][0]
        assert catalog.used(first["tool"]["id"])
        assert not catalog.used(first["tool"]["id"])  # recorded once


def keys_in_order(value: Any) -> Any:
    """Every dict's keys in order, nested (what a JSON dump of it would spell out)."""
    if isinstance(value, dict):
        return [(key, keys_in_order(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [keys_in_order(item) for item in value]
    return None


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_built_answers_dump_fields_in_the_models_order(
    indexed: tuple[Path, list[str]], mode: str
) -> None:
    """Hits are built without validation; their dumps (MCP, exports) keep the field order a
    validated model has."""
    from toolcat.models import SearchResult

    path, queries = indexed
    with Catalog(path) as catalog:
        for query in [queries[0], "files.read_file"]:
            for _ in range(2):  # ranked, then a kept answer or built hits
                dumped = catalog.search(query, mode=mode).model_dump()
                validated = SearchResult.model_validate(dumped).model_dump()
                assert dumped["hits"]
                assert keys_in_order(dumped) == keys_in_order(validated)


# -- filtered searches in a warm catalog are a fresh catalog's (FTS5) ------------------------

# Tags that mean something to SQL (LIKE, GLOB, quoting) or are unusual text.
HOSTILE_TAGS = ["it's", '"dq"', "50%", "a_b", "st*r", "q?", "[x]", "ünïcödé", "x" * 64]


def hostile_toolkits(version: str = "1") -> list[Toolkit]:
    """Small toolkits with hostile tags, two versions of one toolkit and tools whose texts
    tie (the same tool in three toolkits)."""
    words = ["file", "email", "weather", "units", "page", "invoice", "image", "city", "date"]
    kits = [
        Toolkit(
            name=f"odd{i}",
            version=version,
            tags=[tag],
            tools=[
                Tool(
                    name=f"{words[i]}_tool{j}",
                    description=f"Handle the {words[i]} and the {words[(i + j) % 9]} of a user",
                    tags=["even" if j % 2 else "uneven"],
                    defer_loading=j == 1,
                )
                for j in range(3)
            ],
        )
        for i, tag in enumerate(HOSTILE_TAGS)
    ]
    kits += [
        Toolkit(
            name=f"dup{i}",
            version="1",
            tags=["dup"],
            tools=[Tool(name="send_mail", description="Send an email message to a recipient")],
        )
        for i in range(3)
    ]
    return kits


HOSTILE_ASKS: list[dict[str, Any]] = [
    *({"tags": [tag]} for tag in HOSTILE_TAGS),
    {"tags": ["it's", "uneven"]},
    {"tags": ["dup"]},
    {"tags": ["nobody"]},
    {"toolkit": "odd2"},
    {"toolkit": "odd3@1"},
    {"toolkit": "files@9"},  # no such version: the same error both ways
    {"include_deferred": False, "tags": ["even"]},
    {"include_denied": True},
    {"include_denied": True, "tags": ["[x]"]},
    {},
]
HOSTILE_QUERIES = ["send an email", "send_mail", "odd1.email_tool0", "weather of a city", "file"]
POLICIES = [
    None,
    Policy(deny=["tag:[[]x]", "odd1.*", "tag:it's"]),
    Policy(deny=["tag:*"], allow=["dup?.*", "odd*.*_tool?"]),
]


def hostile_answers(
    catalog: Catalog, mode: str, asks: list[dict[str, Any]] = HOSTILE_ASKS
) -> list[Any]:
    found: list[Any] = []
    for ask in asks:
        for query in HOSTILE_QUERIES:
            for k in (1, 200):
                try:
                    hits = catalog.search(query, mode=mode, k=k, **ask).hits
                except ToolcatError as e:
                    found.append(type(e).__name__)
                else:
                    found.append([(h.tool.id, h.score, h.match) for h in hits])
    return found


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_hostile_filters_answer_in_a_warm_catalog_as_in_a_fresh_one(
    indexed: tuple[Path, list[str]], tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tags SQL could misread, pinned versions, deny globs with allow rules, exact names the
    filters exclude, ties, k = 1 and 200: the in-memory index (then a kept answer) gives
    FTS5's ids, scores and ``match``."""
    path = tmp_path / "catalog.db"
    shutil.copy(indexed[0], path)
    with Catalog(path) as catalog:
        catalog.register(hostile_toolkits())
        catalog.reindex(batch_size=32)
    for policy in POLICIES:
        with monkeypatch.context() as never_built:  # FTS5 and tools_fts rows only
            never_built.setattr(engine, "POSTINGS_AFTER", 10**9)
            with Catalog(path, policy=policy) as fresh:
                expected = hostile_answers(fresh, mode)
                assert fresh._search.postings.index is None
        with Catalog(path, policy=policy) as warm:
            for _ in range(engine.POSTINGS_AFTER):
                warm.search("file", mode="bm25")
            assert warm._search.postings.current(warm.revision, bm25.DEFAULT_WEIGHTS)
            assert hostile_answers(warm, mode) == expected, policy
            assert hostile_answers(warm, mode) == expected, policy  # kept, or ranked again
        kinds = {type(hits) for hits in expected}
        assert kinds == {list, str} and any(len(hits) > 3 for hits in expected)
        assert [] in expected  # a filter that lets nothing through


def test_filtered_answers_follow_every_change_from_another_catalog(tmp_path: Path) -> None:
    """Between filtered queries, another catalog on the file registers, re-tags (a new
    version), deprecates (the active version moves back, a pinned version goes inactive) and
    removes (row ids are reused): each next answer is the one a fresh catalog gives."""
    path = tmp_path / "catalog.db"
    asks: list[dict[str, Any]] = [
        {"tags": ["[x]"]},
        {"tags": ["uneven"]},
        {"toolkit": "odd3"},
        {"toolkit": "odd3@1"},
        {"tags": ["dup"], "include_deferred": False},
        {},
    ]
    policy = Policy(deny=["tag:it's"])
    fresh_answers: list[Any] = []

    def fresh() -> list[Any]:
        engine_after = engine.POSTINGS_AFTER
        engine.POSTINGS_AFTER = 10**9
        try:
            with Catalog(path, policy=policy) as first:
                return hostile_answers(first, "bm25", asks)
        finally:
            engine.POSTINGS_AFTER = engine_after

    retagged = [
        kit.model_copy(update={"tags": ["[x]"]})
        for kit in hostile_toolkits("2")
        if kit.name == "odd3"
    ]
    changes = [
        lambda admin: admin.register(retagged),
        lambda admin: admin.deprecate("odd3", "2"),
        lambda admin: admin.deprecate("odd3", "1"),
        lambda admin: admin.remove("dup2"),
        lambda admin: admin.register(hostile_toolkits()[-1:]),  # dup2 again, ids reused
        lambda admin: admin.remove("odd3"),
    ]
    with Catalog(path) as admin, Catalog(path, policy=policy) as warm:
        admin.register(SAMPLE_TOOLKITS)
        admin.register(hostile_toolkits())
        for change in [None, *changes]:
            if change is not None:
                change(admin)
            for _ in range(engine.POSTINGS_AFTER + 1):  # FTS5 first, then the index
                assert hostile_answers(warm, "bm25", asks) == fresh()
            assert warm._search.postings.current(admin.revision, bm25.DEFAULT_WEIGHTS)
            fresh_answers.append(fresh())
    assert len({repr(a) for a in fresh_answers}) >= 4  # the changes showed in answers
