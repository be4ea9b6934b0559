from __future__ import annotations

import math

import pytest
from rank_bm25 import BM25Okapi

from toolcat import Catalog, InvalidQueryError, Tool, Toolkit
from toolcat.search import bm25
from toolcat.store.reader import Filters
from toolcat.text.tokenize import tokenize

# A fixed corpus: each tool's text is only its description (name and params are single
# unique words), so with equal column weights FTS5's BM25 and rank-bm25's should agree.
CORPUS = [
    "Read a text file from disk and return its contents",
    "Write text to a file on disk, replacing its contents",
    "Delete a file from disk permanently",
    "Send an email message to a recipient with a subject",
    "Search the web for pages matching a query",
    "Convert a temperature between celsius and fahrenheit",
    "Convert a distance between kilometers and miles",
    "Current weather conditions for a city",
    "Weather forecast for a city over several days",
    "Translate text from one language to another language",
    "Summarize a long text into a few sentences",
    "Schedule a meeting in the calendar with attendees",
]
QUERIES = [
    "convert celsius to fahrenheit",
    "weather forecast in a city",
    "read the contents of a text file",
    "send email",
    "translate this language text",
    "schedule calendar meeting attendees tomorrow",
]


@pytest.fixture
def corpus_catalog(catalog: Catalog) -> Catalog:
    tools = [Tool(name=f"tool{chr(97 + i)}", description=text) for i, text in enumerate(CORPUS)]
    catalog.register(Toolkit(name="corpus", version="1", tools=tools))
    return catalog


@pytest.mark.parametrize("query", QUERIES)
def test_fts5_ranking_agrees_with_rank_bm25(corpus_catalog: Catalog, query: str) -> None:
    docs = [
        tokenize(f"tool{chr(97 + i)}") + tokenize(text) + tokenize("corpus")
        for i, text in enumerate(CORPUS)
    ]
    oracle = BM25Okapi(docs, k1=1.2, b=0.75)
    terms = list(dict.fromkeys(tokenize(query)))
    expected = oracle.get_scores(terms)
    conn = corpus_catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, corpus_catalog.revision)
    ranked = bm25.search(conn, query, Filters(), len(CORPUS), stats, weights=(1, 1, 1, 1, 1))
    got = {row_id: score for row_id, score in ranked}
    # Terms in more than half the documents are pruned by design; none are, here.
    assert len(got) == sum(1 for s in expected if s > 0)
    for i, score in enumerate(expected):
        if score > 0:
            assert math.isclose(got[i + 1], score, rel_tol=1e-6), (i, got[i + 1], score)
    ours = sorted(got, key=lambda row_id: (-got[row_id], row_id))
    theirs = sorted(
        (i + 1 for i, s in enumerate(expected) if s > 0), key=lambda r: (-expected[r - 1], r)
    )
    assert ours == theirs


ODD_QUERIES = [
    '"unterminated quote',
    "read AND write OR NOT delete",
    "NEAR(file disk)",
    "*",
    "file*",
    "-file",
    "(((",
    "column:name",
    "^start",
    "🙂 weather 🌧",
    "'; DROP TABLE tools; --",
    "\x00\x01 null bytes",
    "the of and",
    "weather " * 2000,
    "ünïcödé tëxt",
]


@pytest.mark.parametrize("query", ODD_QUERIES, ids=range(len(ODD_QUERIES)))
def test_any_text_is_a_valid_query(sample_catalog: Catalog, query: str) -> None:
    result = sample_catalog.search(query, k=5)
    assert result.query == query
    assert len(result.hits) <= 5
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert sample_catalog.list(limit=1000).tools  # the catalog is intact


def test_punctuation_heavy_query_still_finds_the_tool(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search('"convert" -- (units)!!! OR *km* -> "miles"?').hits
    assert hits[0].tool.id == "math.convert_units"


def test_ten_kilobyte_query(sample_catalog: Catalog) -> None:
    query = ("please help me figure out what time it is in another time zone " * 200)[:10_240]
    hits = sample_catalog.search(query, k=3).hits
    assert "time.current_time" in {h.tool.id for h in hits}


def test_deferred_tools_are_searched_unless_excluded(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search("delete a file", k=3).hits
    assert hits[0].tool.id == "files.delete_file"
    assert hits[0].tool.defer_loading
    hits = sample_catalog.search("delete a file", include_deferred=False).hits
    assert all(not h.tool.defer_loading for h in hits)
    assert "files.delete_file" not in {h.tool.id for h in hits}


def test_filters_apply_before_ranking(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search("convert", tags=["time"], k=50).hits
    assert hits and all("time" in h.tool.tags for h in hits)
    assert hits[0].tool.id == "time.convert_timezone"
    hits = sample_catalog.search("file", toolkit="sqlite", k=50).hits
    assert hits and {h.tool.toolkit for h in hits} == {"sqlite"}
    assert sample_catalog.search("file", tags=["read-only", "destructive"]).hits == []


def test_exact_name_ranks_first(sample_catalog: Catalog) -> None:
    for query in ["calculate", "CALCULATE", "math.calculate", "  sqlite_execute  "]:
        hits = sample_catalog.search(query).hits
        assert hits[0].tool.name == query.strip().split(".")[-1].lower()
        assert all(hits[0].score > h.score for h in hits[1:])
    # "read" is a word of many descriptions, yet the tool named "read_file" wins outright
    assert sample_catalog.search("read_file").hits[0].tool.id == "files.read_file"
    hits = sample_catalog.search("json_diff", include_deferred=False).hits
    assert "data.json_diff" not in {h.tool.id for h in hits}  # filters still apply


def test_scores_are_higher_is_better_and_k_is_respected(sample_catalog: Catalog) -> None:
    hits = sample_catalog.search("convert a date between time zones", k=4).hits
    assert len(hits) == 4
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0].tool.id == "time.convert_timezone"


def test_empty_query_is_list_mode(sample_catalog: Catalog) -> None:
    result = sample_catalog.search("   ", k=100)
    assert [h.tool.id for h in result.hits] == [t.id for t in sample_catalog.list(limit=100).tools]


def test_bad_mode_and_k(sample_catalog: Catalog) -> None:
    with pytest.raises(InvalidQueryError, match="mode"):
        sample_catalog.search("x", mode="telepathy")
    with pytest.raises(InvalidQueryError):
        sample_catalog.search("x", k=0)


def test_common_terms_are_pruned_but_a_query_of_only_common_terms_still_works(
    catalog: Catalog,
) -> None:
    tools = [Tool(name=f"t{i}", description=f"get record number {i}") for i in range(10)]
    tools.append(Tool(name="special", description="get the rare thing"))
    catalog.register(Toolkit(name="kit", version="1", tools=tools))
    conn = catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, catalog.revision)
    assert bm25.query_terms(conn, "get rare", stats) == ["rare"]
    assert bm25.query_terms(conn, "get", stats) == ["get"]
    assert bm25.query_terms(conn, "nothing matches this", stats) == []
    assert stats.doc_freq == {"get": 11, "rare": 1, "noth": 0, "match": 0}
    assert catalog.search("get rare").hits[0].tool.name == "special"
    assert len(catalog.search("get", k=50).hits) == 11


@pytest.mark.parametrize("query", QUERIES)
def test_two_phase_rescoring_gives_fts5_scores(corpus_catalog: Catalog, query: str) -> None:
    conn = corpus_catalog._conn
    stats = bm25.TermStats()
    stats.refresh(conn, corpus_catalog.revision)
    assert stats.n_docs == len(CORPUS)
    weights = (4.0, 2.0, 1.5, 1.0, 0.5)
    exact = dict(bm25.search(conn, query, Filters(), len(CORPUS), stats, weights))
    # A budget of one posting forces the two-phase path: candidates come from the rarest
    # term alone, and each is rescored in Python with every term.
    two_phase = bm25.search(conn, query, Filters(), 5, stats, weights, exact_postings=1)
    assert two_phase
    for row_id, score in two_phase:
        assert math.isclose(exact[row_id], score, rel_tol=1e-9)
    assert two_phase[0][0] == max(exact, key=lambda r: exact[r])


def test_index_totals_match_a_count(corpus_catalog: Catalog) -> None:
    conn = corpus_catalog._conn
    rows, tokens = bm25.index_totals(conn)
    texts = conn.execute("SELECT name, hint, description, params, tags FROM tools_fts").fetchall()
    assert rows == len(CORPUS)
    assert tokens == sum(len(col.split()) for row in texts for col in row)
