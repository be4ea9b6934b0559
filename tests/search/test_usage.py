"""Learning from use: recorded (query, tool) pairs reach the search documents at reindex.

Searches here are BM25 (the learned query vectors are covered in test_fusion.py).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, UnknownToolError
from toolcat.catalog import LEARNED_PER_TOOL
from toolcat.cli import cli

QUERY = "zorbify the quarterly ledger"  # words no sample tool has


def _ids(catalog: Catalog, query: str) -> list[str]:
    return [h.tool.id for h in catalog.search(query, mode="bm25", k=5).hits]


def test_a_recorded_use_is_found_after_reindex(sample_catalog: Catalog) -> None:
    assert "data.json_diff" not in _ids(sample_catalog, QUERY)
    assert sample_catalog.record_use(QUERY, "data.json_diff") is True
    assert "data.json_diff" not in _ids(sample_catalog, QUERY)  # not before reindex
    sample_catalog.reindex()
    assert _ids(sample_catalog, QUERY)[0] == "data.json_diff"
    [use] = sample_catalog.usage()
    assert (use["tool"], use["query"]) == ("data.json_diff", QUERY)


def test_unknown_tools_are_refused(sample_catalog: Catalog) -> None:
    with pytest.raises(UnknownToolError):
        sample_catalog.record_use(QUERY, "data.no_such_tool")
    assert sample_catalog.usage() == []


def test_uses_are_deduplicated_and_bounded_newest_kept(sample_catalog: Catalog) -> None:
    sample_catalog.record_use(QUERY, "data.json_diff")
    sample_catalog.record_use("  " + QUERY.upper() + " ", "data.json_diff")
    assert len(sample_catalog.usage()) == 1
    for i in range(LEARNED_PER_TOOL + 5):
        sample_catalog.record_use(f"request number {i}", "data.json_diff")
    uses = sample_catalog.usage()
    assert len(uses) == LEARNED_PER_TOOL
    assert uses[0]["query"] == f"request number {LEARNED_PER_TOOL + 4}"
    assert QUERY.upper() not in {u["query"].strip() for u in uses}  # the oldest went


def test_learning_off_records_nothing_and_reindex_unlearns(sample_catalog: Catalog) -> None:
    sample_catalog.record_use(QUERY, "data.json_diff")
    sample_catalog.reindex()
    assert _ids(sample_catalog, QUERY)[:1] == ["data.json_diff"]
    sample_catalog.learning = False
    assert sample_catalog.learning is False
    assert sample_catalog.record_use("another request", "data.json_diff") is False
    sample_catalog.reindex()
    assert "data.json_diff" not in _ids(sample_catalog, QUERY)
    sample_catalog.learning = True
    sample_catalog.reindex()
    assert _ids(sample_catalog, QUERY)[:1] == ["data.json_diff"]


def test_clear_forgets_and_reindex_drops_from_the_index(sample_catalog: Catalog) -> None:
    sample_catalog.record_use(QUERY, "data.json_diff")
    sample_catalog.reindex()
    assert sample_catalog.clear_usage() == 1
    sample_catalog.reindex()
    assert sample_catalog.usage() == []
    assert "data.json_diff" not in _ids(sample_catalog, QUERY)


def test_a_call_after_a_search_records_the_use(sample_catalog: Catalog) -> None:
    query = "prime factors of a number"
    hits = sample_catalog.search(query, mode="bm25", k=3).hits
    assert hits[0].tool.id == "math.prime_factors"
    assert sample_catalog.call("math.prime_factors", {"n": 12}).success
    assert [(u["tool"], u["query"]) for u in sample_catalog.usage()] == [
        ("math.prime_factors", query)
    ]
    # a call of a tool no search returned records nothing
    assert sample_catalog.call("math.percent_change", {"old": 4, "new": 6}).success
    assert len(sample_catalog.usage()) == 1


def test_learned_queries_survive_a_new_version(sample_catalog: Catalog, tmp_path: Path) -> None:
    sample_catalog.record_use(QUERY, "data.json_diff")
    sample_catalog.reindex()
    db = sqlite3.connect(sample_catalog.path)
    hint, tags = db.execute(
        "SELECT f.hint, f.tags FROM tools_fts f JOIN tools t ON t.id = f.rowid "
        "WHERE t.toolkit = 'data' AND t.name = 'json_diff'"
    ).fetchone()
    db.close()
    # learned requests join the lightest column, not the search hint (documents.index_fields)
    assert ("zorbifi" in tags or "zorbify" in tags) and "zorbif" not in hint


def test_usage_cli(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "register", str(SAMPLE_TOOLKITS)]).exit_code == 0
    with Catalog(db) as catalog:
        catalog.record_use(QUERY, "data.json_diff")
    shown = runner.invoke(cli, ["--db", db, "usage"])
    assert shown.exit_code == 0 and "data.json_diff" in shown.output and "1 use" in shown.output
    off = runner.invoke(cli, ["--db", db, "usage", "off"])
    assert off.exit_code == 0 and "off" in off.output
    cleared = runner.invoke(cli, ["--db", db, "usage", "clear"])
    assert cleared.exit_code == 0 and "cleared 1 use" in cleared.output
    with Catalog(db) as catalog:
        assert catalog.usage() == [] and catalog.learning is False


def test_record_uses_in_one_go_checks_every_tool_first(sample_catalog: Catalog) -> None:
    uses = [(f"request number {i}", "data.json_diff") for i in range(LEARNED_PER_TOOL + 3)]
    uses += [("  ", "math.prime_factors"), (QUERY, "math.prime_factors")]
    with pytest.raises(UnknownToolError):
        sample_catalog.record_uses([*uses, (QUERY, "data.no_such_tool")])
    assert sample_catalog.usage() == []  # nothing half-recorded
    assert sample_catalog.record_uses(uses) == LEARNED_PER_TOOL + 4  # the blank one skipped
    recorded = sample_catalog.usage()
    assert [u["tool"] for u in recorded].count("data.json_diff") == LEARNED_PER_TOOL
    assert recorded[0] == {**recorded[0], "tool": "math.prime_factors", "query": QUERY}
    assert f"request number {LEARNED_PER_TOOL + 2}" in {u["query"] for u in recorded}
    assert "request number 0" not in {u["query"] for u in recorded}  # the oldest went
    sample_catalog.learning = False
    assert sample_catalog.record_uses(uses) == 0


def test_a_compound_request_teaches_each_tool_its_own_part(sample_catalog: Catalog) -> None:
    request = "Convert 5 km into miles please. Then find the prime factors of 360"
    parts = {
        "math.convert_units": "Convert 5 km into miles please",
        "math.prime_factors": "find the prime factors of 360",
    }
    # Answered by one tool, the request is kept whole (its other parts may be arguments).
    sample_catalog.record_use(request, "math.convert_units")
    assert sample_catalog.usage()[0]["query"] == request
    # A second tool answering the same request splits it, the earlier use included.
    assert sample_catalog.record_use(request, "math.prime_factors")
    assert {u["tool"]: u["query"] for u in sample_catalog.usage()} == parts
    sample_catalog.clear_usage()
    pairs = [(request, "math.convert_units"), (request, "math.prime_factors")]
    assert sample_catalog.record_uses(pairs) == 2  # both in one batch
    assert {u["tool"]: u["query"] for u in sample_catalog.usage()} == parts
    # A part that names nothing of the tool teaches nothing on its own: the whole is kept.
    unrelated = "Zorbify the ledger. Then frobnicate the quarterly widgets"
    sample_catalog.record_uses([(unrelated, "data.json_diff"), (unrelated, "math.prime_factors")])
    assert sample_catalog.usage()[1] == {
        **sample_catalog.usage()[1],
        "tool": "data.json_diff",
        "query": unrelated,
    }


def test_a_principals_uses_lift_its_own_results_within_the_bound(
    sample_catalog: Catalog,
) -> None:
    """A server caller's uses (``principal=``) never reach the shared index nor another
    caller's results, and move each of its own hits by at most LEARNED_LIFT places, however
    many uses it records."""
    from toolcat.search.learned import LEARNED_LIFT

    query = "delete the file report.txt"

    def ranking(principal: str | None) -> list[str]:
        found = sample_catalog.search(query, mode="bm25", k=20, principal=principal)
        return [h.tool.id for h in found.hits]

    before = ranking(None)
    last = before[-1]
    uses = [(f"{query} now {i}" if i < 39 else query, last) for i in range(40)]
    assert sample_catalog.record_uses(uses, principal="mallory") == 40
    sample_catalog.reindex()
    assert ranking(None) == before  # the shared index learned nothing
    assert ranking("alice") == before  # nor does anyone else's ranking move
    mine = ranking("mallory")
    assert sorted(mine) == sorted(before)  # nothing pulled in from outside the hits
    assert before.index(last) - mine.index(last) == LEARNED_LIFT
    assert all(abs(before.index(t) - mine.index(t)) <= LEARNED_LIFT for t in before)
    assert {u["principal"] for u in sample_catalog.usage()} == {"mallory"}
    assert len(sample_catalog.usage()) == LEARNED_PER_TOOL  # bounded per principal too


def test_a_principals_uses_never_pass_the_tool_a_query_names(sample_catalog: Catalog) -> None:
    ranked = [h.tool.id for h in sample_catalog.search("read_file", mode="bm25", k=10).hits]
    assert ranked[0] == "files.read_file"
    sample_catalog.record_uses([("read_file", ranked[2])], principal="mallory")
    mine = [
        h.tool.id
        for h in sample_catalog.search("read_file", mode="bm25", k=10, principal="mallory").hits
    ]
    assert mine[0] == "files.read_file" and mine[1] == ranked[2]


def test_a_principal_without_uses_reads_no_hit_for_them(sample_catalog: Catalog) -> None:
    """A search for a principal that recorded nothing (a new caller) looks the principal up
    once in the uses' index and reads no hit's row for its uses; one that recorded uses of
    other tools than the hits still has them read, and finds none of them there."""
    from toolcat.store import reader

    query = "delete the file report.txt"
    sample_catalog.record_uses([("convert a time zone", "time.convert_timezone")], principal="bob")
    ids = [
        row_id
        for row_id, _ in sample_catalog._search.bm25(
            sample_catalog._conn, query, reader.Filters(), 5, reader.revision(sample_catalog._conn)
        )
    ]
    assert ids
    statements: list[str] = []
    sample_catalog._conn.set_trace_callback(statements.append)
    try:
        assert reader.principal_uses(sample_catalog._conn, "alice", ids) == {}
        assert not any("JOIN usage" in s for s in statements)
        assert reader.principal_uses(sample_catalog._conn, "bob", ids) == {}
        assert any("JOIN usage" in s for s in statements)
        (timezone,) = sample_catalog._conn.execute(
            "SELECT id FROM tools WHERE toolkit = 'time' AND name = 'convert_timezone'"
        ).fetchone()
        assert reader.principal_uses(sample_catalog._conn, "bob", [*ids, timezone]) == {
            timezone: ["convert a time zone"]
        }
    finally:
        sample_catalog._conn.set_trace_callback(None)
    assert [
        h.tool.id for h in sample_catalog.search(query, mode="bm25", k=5, principal="alice").hits
    ] == [h.tool.id for h in sample_catalog.search(query, mode="bm25", k=5).hits]
