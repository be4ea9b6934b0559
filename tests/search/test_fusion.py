"""Hybrid fusion, "nothing fits" and learned query vectors on small catalogs, with the real
model: the common case of a team's few dozen tools, where one word of overlap in a wrong
tool's name must not outrank the other ranking's clear semantic match."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Toolkit
from toolcat.search.calibration import match
from toolcat.search.embeddings import DEFAULT_MODEL, MINILM, RETRIEVER
from toolcat.search.fusion import (
    HYBRID_PARAMS,
    MODEL_PARAMS,
    Candidate,
    agreement,
    coverage,
    fts_document,
    guarded_trust,
    hybrid_fusion,
    lift_part_tops,
    params_for,
)
from toolcat.search.split import fits, merge, split_request

pytest.importorskip("sentence_transformers")

SMALL = [
    ("book_flight", "Book an airline flight between two airports."),
    ("make_restaurant_reservation", "Reserve a table at a restaurant for a time and party size."),
    ("send_email", "Send an email message to a recipient."),
    ("get_weather", "Current weather conditions and forecast for a city."),
    ("delete_file", "Delete a file from disk."),
    ("convert_currency", "Convert an amount of money between currencies."),
]
# A few dozen tools whose names share words ("list", "get", "create", "file", "user") with
# requests that mean another tool.
MEDIUM = [
    *SMALL,
    ("list_calendar_events", "Show the events on a calendar between two dates."),
    ("create_calendar_event", "Add a meeting or appointment to a calendar."),
    ("get_user_profile", "Fetch a user's profile: name, email address, avatar."),
    ("reset_user_password", "Send a password reset link to a user."),
    ("upload_file", "Upload a local file to cloud storage."),
    ("share_file_link", "Create a public link that lets others download a file."),
    ("translate_text", "Translate text from one language into another."),
    ("summarize_document", "Write a short summary of a long document."),
    ("get_stock_price", "Latest trading price of a company's shares."),
    ("create_invoice", "Bill a customer: create an invoice with line items and a due date."),
    ("list_open_tickets", "Support tickets that are still waiting for an answer."),
    ("get_directions", "Driving or walking route between two places, with travel time."),
    ("play_music", "Play a song, album or playlist on the speaker."),
    ("set_timer", "Start a countdown timer that rings after a duration."),
    ("order_groceries", "Buy food and household items for home delivery."),
    ("track_package", "Where a shipped parcel is now and when it will arrive."),
]

# A dev team's tools: names share words ("list", "issue", "deploy") with requests for others.
DEVOPS = [
    ("create_issue", "Open a new issue in the project tracker with a title and body."),
    ("close_issue", "Mark a tracker issue as resolved."),
    ("list_pull_requests", "Pull requests waiting for review in a repository."),
    ("merge_pull_request", "Merge an approved pull request into the main branch."),
    ("deploy_service", "Release a new version of a service to production."),
    ("rollback_deploy", "Revert a service to the version it ran before the last release."),
    ("get_build_logs", "Console output of a CI build, to see why it failed."),
    ("page_oncall", "Alert the engineer on call with an urgent notification."),
    ("post_chat_message", "Post a message to a team chat channel."),
    ("search_docs", "Search the internal documentation wiki."),
    ("run_sql_query", "Run a read-only SQL query against the analytics database."),
    ("restart_pod", "Restart a Kubernetes pod by name."),
]


def _catalog(path: Path, tools: list[tuple[str, str]], model: str | None = None) -> Catalog:
    catalog = Catalog(path, embedding_model=model)  # None: the default model
    catalog.register(
        Toolkit(
            name="team",
            version="1",
            tools=[
                {"name": n, "description": d, "parameters": {"type": "object", "properties": {}}}
                for n, d in tools
            ],
        )
    )
    catalog.reindex()
    return catalog


CATALOGS = {"small": SMALL, "medium": MEDIUM, "devops": DEVOPS}
# Each model ranks with the fusion constants fitted for it (fusion.MODEL_PARAMS).
MODELS = [RETRIEVER, MINILM]


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Catalog]]:
    made = {
        (model, name): _catalog(tmp_path_factory.mktemp(name) / "c.db", tools, model)
        for model in MODELS
        for name, tools in CATALOGS.items()
    }
    yield made
    for catalog in made.values():
        catalog.close()


@pytest.fixture(scope="module")
def small(catalogs: dict[tuple[str, str], Catalog]) -> Catalog:
    return catalogs[(DEFAULT_MODEL, "small")]


def _top(catalog: Catalog, query: str, mode: str = "hybrid") -> str:
    return catalog.search(query, mode=mode, k=3).hits[0].tool.name


def test_one_word_of_name_overlap_does_not_beat_a_clear_semantic_match(
    catalogs: dict[tuple[str, str], Catalog],
) -> None:
    # The base MiniLM sees the request as the restaurant's (cosine .33 against .27): a clear
    # semantic match, which one word of name overlap must not outrank.
    minilm = catalogs[(MINILM, "small")]
    query = "book me somewhere to eat tonight"
    assert _top(minilm, query, "bm25") == "book_flight"  # the trap: "book" in the name
    assert _top(minilm, query, "embedding") == "make_restaurant_reservation"
    assert _top(minilm, query) == "make_restaurant_reservation"
    # The retriever has no clear match here: its embedding ranking puts book_flight first
    # too (.261 against .257), so both rankings fusion reads agree and no fusion constants
    # move the restaurant up (docs/benchmarks.md, "Fusion and 'nothing fits' for the
    # retriever"); it stays second, ahead of every tool neither ranking favours.
    hits = catalogs[(RETRIEVER, "small")].search(query, k=3).hits
    assert [h.tool.name for h in hits[:2]] == ["book_flight", "make_restaurant_reservation"]


# "order" is in order_groceries' name and covers most of the request's known words, so
# BM25's case is strong; embeddings prefer track_package by a clear margin. No fusion rule
# that keeps the benchmarks' figures flips it (README, "Hybrid fusion"): strict, so a fix shows.
STILL_OPEN = pytest.mark.xfail(
    strict=True, reason="one word of name overlap covering the request's known words still wins"
)
# The retriever's own ranking puts book_flight first (above): a model miss, not fusion's.
RETRIEVER_MISS = pytest.mark.xfail(
    strict=True, reason="the retriever's embedding ranks book_flight first (.261 against .257)"
)


# (catalog, request, the tool that must rank first): scripts/research/tune_fusion.py --small and
# scripts/research/tune_loso.py --small keep only fusion settings that get most of these right.
CASES = [
    ("small", "book me somewhere to eat tonight", "make_restaurant_reservation"),
    ("small", "book a flight to Rome next Tuesday", "book_flight"),
    ("medium", "book me somewhere to eat tonight", "make_restaurant_reservation"),
    ("medium", "get me to the airport by car", "get_directions"),
    ("medium", "list what my customers owe me this month", "create_invoice"),
    ("medium", "file a bill for the client for last month's work", "create_invoice"),
    ("medium", "get rid of the old report on disk", "delete_file"),
    ("medium", "user forgot their login, help them back in", "reset_user_password"),
    ("medium", "let a colleague download the file", "share_file_link"),
    ("medium", "create calendar event for Friday 3pm", "create_calendar_event"),
    ("medium", "get stock price of ACME", "get_stock_price"),
    ("medium", "translate text to German", "translate_text"),
    ("devops", "undo yesterday's release, it broke checkout", "rollback_deploy"),
    ("devops", "why did the CI run fail", "get_build_logs"),
    ("devops", "the site is down, wake someone up", "page_oncall"),
    ("devops", "tell the team in the channel that we are shipping today", "post_chat_message"),
    ("devops", "list the issues someone still has to review", "list_pull_requests"),
    ("devops", "merge pull request 42", "merge_pull_request"),
    ("devops", "restart pod api-7", "restart_pod"),
    ("devops", "close issue 311", "close_issue"),
]


def _cases() -> list[Any]:
    out = []
    for model in MODELS:
        for catalog, query, tool in CASES:
            eat = model == RETRIEVER and query == "book me somewhere to eat tonight"
            marks = [RETRIEVER_MISS] if eat else []
            out.append(pytest.param(model, catalog, query, tool, marks=marks))
        track = (model, "medium", "when will my order get here", "track_package")
        out.append(pytest.param(*track, marks=STILL_OPEN))
    return out


@pytest.mark.parametrize(("model", "catalog", "query", "tool"), _cases())
def test_small_catalogs_clear_semantic_matches_and_named_tools_win(
    catalogs: dict[tuple[str, str], Catalog], model: str, catalog: str, query: str, tool: str
) -> None:
    assert _top(catalogs[(model, catalog)], query) == tool


def test_sample_catalog_hybrid(tmp_path: Path) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
        assert _top(catalog, "erase an old document") == "delete_file"
        assert _top(catalog, "prime factors of a number") == "prime_factors"
        result = catalog.search("what is the capital of the moon's second ocean", k=5)
        assert result.no_match and all(h.match == "none" for h in result.hits)
        result = catalog.search("factor 360 into primes", k=5)
        assert not result.no_match and result.hits[0].match == "strong"


def test_nothing_fits_in_a_small_catalog(small: Catalog) -> None:
    assert small.search("quantum chromodynamics lattice simulation").no_match
    assert small.search("sing me a lullaby about dragons").no_match
    fits = small.search("book a flight to Rome next Tuesday")
    assert not fits.no_match and fits.hits[0].match == "strong"


def test_learned_query_vectors_find_the_tool(tmp_path: Path) -> None:
    with _catalog(tmp_path / "c.db", MEDIUM) as catalog:
        query = "wake up whoever is on duty, the site is down"
        assert _top(catalog, query, "embedding") != "send_email"
        catalog.record_use("wake the on-duty engineer: the site is down", "team.send_email")
        catalog.reindex()
        assert _top(catalog, query, "embedding") == "send_email"
        assert _top(catalog, query) == "send_email"


def test_each_model_ranks_with_its_own_fusion_constants() -> None:
    assert params_for(RETRIEVER) is MODEL_PARAMS[RETRIEVER]
    assert params_for(RETRIEVER) != HYBRID_PARAMS  # refitted on its cosines
    assert params_for(MINILM) is HYBRID_PARAMS
    assert params_for("some/other-model") is HYBRID_PARAMS


def test_coverage_is_idf_weighted_and_by_field() -> None:
    weights = {"book": 1.0, "eat": 3.0}
    anywhere, name = coverage(["book", "eat"], weights, ("book flight", "", "eat", "", ""))
    assert (anywhere, name) == (1.0, 0.25)
    assert coverage([], {}, ("x",) * 5) == (0.0, 0.0)


def test_fusion_trusts_bm25_by_how_much_of_the_query_the_catalog_knows() -> None:
    columns = {1: ("book flight", "", "", "", ""), 2: ("reserve table", "", "", "", "")}
    docs = {i: fts_document(c, ["book", "flight", "eat", "tonight"]) for i, c in columns.items()}
    names = {"book": 1, "flight": 1, "reserve": 1, "table": 1}
    # Every query word is known: BM25's only hit, which the request names, wins.
    fused, found = hybrid_fusion(
        ["book", "flight"], names, 2, [(1, 5.0)], [(2, 0.4), (1, 0.3)], docs, 50, 2
    )
    assert fused[0][0] == 1 and found[1].name_hit == 1.0 and found[1].trust == 0.6
    # One word of three is known to the catalog: the embeddings' match wins.
    fused, found = hybrid_fusion(
        ["book", "eat", "tonight"], names, 2, [(1, 2.0)], [(2, 0.45), (1, 0.2)], docs, 50, 2
    )
    assert fused[0][0] == 2 and found[1].name_hit == 0.5
    assert found[1].trust == pytest.approx(0.6 / 9)


def test_fusion_bm25_floor_is_zero_when_bm25_matched_fewer_than_depth() -> None:
    docs = {i: fts_document((f"t{i}", "", "", "", ""), ["x"]) for i in (1, 2, 3)}
    lexical = [(1, 4.0), (2, 2.0)]
    df = {"x": 2}
    short, _ = hybrid_fusion(["x"], df, 3, lexical, [], docs, 50, 3)
    full, _ = hybrid_fusion(["x"], df, 3, lexical, [], docs, 2, 3)
    assert dict(short)[2] == pytest.approx(0.6 * 0.5)  # [0, best]: half the best score
    assert dict(full)[2] == 0.0  # a full list: min-max


def test_fusion_adds_the_cosine_and_the_cosine_times_coverage() -> None:
    # Equal cosines (min-max: both 1), no name hit: only tool 1's text holds the query word.
    docs = {
        i: fts_document((name, "", text, "", ""), ["x"])
        for i, name, text in [(1, "alpha", "x"), (2, "beta", "y")]
    }
    fused, found = hybrid_fusion(["x"], {"x": 1}, 2, [], [(1, 0.5), (2, 0.5)], docs, 50, 2)
    p = HYBRID_PARAMS
    assert found[1].cover == 1.0 and found[2].cover == 0.0
    assert dict(fused)[2] == pytest.approx(0.4 + 0.5 * p.cosine_weight)
    assert dict(fused)[1] - dict(fused)[2] == pytest.approx(0.5 * p.cosine_cover_weight)


def test_each_parts_best_tool_is_lifted_once_up_to_the_whole_requests_first_hit() -> None:
    bonus = HYBRID_PARAMS.part_bonus
    found = {
        1: Candidate(fused=0.9),
        2: Candidate(fused=0.8),
        3: Candidate(fused=0.75),
        4: Candidate(fused=0.9 - bonus - 0.05),
    }
    # The best of three parts (twice 3); 9 is not a candidate.
    ranked = lift_part_tops(found, [3, 3, 4, 9], 4)
    assert [i for i, _ in ranked] == [1, 3, 4, 2]  # 3 stops just below 1, 4 gains the bonus once
    assert ranked[0][1] == 0.9 and 0.9 - 1e-9 < ranked[1][1] < 0.9
    assert ranked[2][1] == pytest.approx(0.85)
    assert found[3].fused == ranked[1][1]  # raised in place: "nothing fits" reads the scores
    top = {5: Candidate(fused=0.6), 6: Candidate(fused=0.5)}
    assert lift_part_tops(top, [5], 1) == [(5, pytest.approx(0.6 + bonus))]  # the first is free
    assert lift_part_tops({}, [5], 1) == []


def test_match_levels() -> None:
    assert match(Candidate(semantic=0.9), "hybrid") == "strong"
    assert match(Candidate(semantic=0.0, cover=0.0), "hybrid") == "none"
    assert match(Candidate(semantic=0.9), "bm25") == "none"  # bm25 has no cosine
    assert match(None, "regex") == "weak"


def test_split_request_and_merge() -> None:
    assert split_request("Who directed Inception? Then list his other movies.") == [
        "Who directed Inception?",
        "list his other movies",
    ]
    assert split_request("weather in Paris") == []
    assert split_request("x " * 2000) == []
    merged = merge([(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)], [[(1, 0.5)], [(4, 0.9)]], 3)
    assert [i for i, _ in merged] == [1, 4, 2]
    assert [s for _, s in merged] == [0.9, 0.8, 0.7]
    assert fits(0.6, 0.0) and fits(0.1, 0.9) and not fits(0.3, 0.5)


def test_the_guard_follows_the_surer_ranking_where_the_two_part() -> None:
    """BM25 and the embeddings share none of their top hits; BM25's are level (one word of
    a long request in each name), the embeddings' first stands far above the rest. The
    unguarded fusion trusts BM25 for a request whose every word the catalog knows and puts
    its first hit on top; the guard moves the weight to the surer ranking."""
    terms = ["send", "invoice", "customer", "overdue"]
    df = {t: 3 for t in terms}
    lexical = [(i, 5.0 - 0.01 * i) for i in range(1, 6)]
    semantic = [(10, 0.72), (11, 0.41), (12, 0.40), (13, 0.39), (14, 0.38)]
    docs = {i: fts_document((f"tool{i}", "", "", "", ""), terms) for i in range(1, 15)}
    plain, found = hybrid_fusion(terms, df, 200, lexical, semantic, docs, 5, 3)
    assert plain[0][0] == 1 and found[1].trust == pytest.approx(HYBRID_PARAMS.lexical_weight)
    guard = dataclasses.replace(
        HYBRID_PARAMS, guard_bias=-0.2, guard_lexical=0.2, guard_semantic=4.0
    )
    guarded, found = hybrid_fusion(terms, df, 200, lexical, semantic, docs, 5, 3, guard)
    assert guarded[0][0] == 10 and found[10].trust < 0.1
    # Rankings that agree keep the weight the query's visibility gave.
    assert guarded_trust(0.6, lexical, lexical, guard) == 0.6
    assert agreement(lexical, semantic) == 0.0 and agreement([], semantic) == 1.0


def test_the_guard_is_off_for_the_shipped_models() -> None:
    """No guard is shipped: fitted leaving each source out it leaned on the packaged
    retriever's in-sample embeddings, and for the base MiniLM it did not carry to the source
    left out (docs/benchmarks.md, "One catalog of everything")."""
    for params in (HYBRID_PARAMS, *MODEL_PARAMS.values()):
        assert (params.guard_bias, params.guard_lexical, params.guard_semantic) == (0, 0, 0)
