""" "Nothing fits" from the request's own score distribution (search/calibration.py), with the
real model on a team-sized catalog, and how it decides each hit's ``match``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolcat import Catalog, Toolkit
from toolcat.search import calibration
from toolcat.search.calibration import QueryContext, match, query_context
from toolcat.search.embeddings import DEFAULT_MODEL, MINILM, RETRIEVER
from toolcat.search.fusion import Candidate

from .test_fusion import SMALL

pytest.importorskip("sentence_transformers")

TOOLS = [
    *SMALL,
    ("list_calendar_events", "Show the events on a calendar between two dates."),
    ("create_calendar_event", "Add a meeting or appointment to a calendar."),
    ("reset_user_password", "Send a password reset link to a user."),
    ("translate_text", "Translate text from one language into another."),
    ("get_stock_price", "Latest trading price of a company's shares."),
    ("create_invoice", "Bill a customer: create an invoice with line items and a due date."),
    ("get_directions", "Driving or walking route between two places, with travel time."),
    ("play_music", "Play a song, album or playlist on the speaker."),
    ("track_package", "Where a shipped parcel is now and when it will arrive."),
]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    with Catalog(tmp_path_factory.mktemp("team") / "c.db") as catalog:
        catalog.register(
            Toolkit(
                name="team",
                version="1",
                tools=[
                    {"name": n, "description": d, "parameters": {"type": "object"}}
                    for n, d in TOOLS
                ],
            )
        )
        catalog.reindex()
        yield catalog


@pytest.mark.parametrize(
    "query",
    [
        "what's the weather going to be like in Oslo tomorrow",
        "put a dentist appointment on my calendar for Friday at 3",
        "how much is 250 dollars in yen",
        "where is my parcel right now",
        "email the report to Dana",
    ],
)
def test_requests_a_tool_answers_fit(team: Catalog, query: str) -> None:
    result = team.search(query, k=5)
    assert not result.no_match
    assert result.hits[0].match in ("weak", "strong")


@pytest.mark.parametrize(
    "query",
    [
        "sing me a lullaby about dragons",
        "quantum chromodynamics lattice simulation",
        "what is the airspeed velocity of an unladen swallow",
        "recommend a knitting pattern for a winter scarf",
    ],
)
def test_requests_nothing_answers_are_told_so(team: Catalog, query: str) -> None:
    result = team.search(query, k=5)
    assert result.no_match
    assert all(h.match == "none" for h in result.hits)


def test_context_sums_up_the_whole_ranking(team: Catalog) -> None:
    seen: list[QueryContext | None] = []
    original = calibration.query_context

    asked: list[calibration.Calibration] = []

    def recording(
        signals: dict[int, Candidate], fitted: calibration.Calibration
    ) -> QueryContext | None:
        asked.append(fitted)
        seen.append(original(signals, fitted))
        return seen[-1]

    calibration.query_context = recording  # type: ignore[assignment]
    try:
        hits = team.search("reserve a table for four tonight", k=5).hits
        team.search("reserve a table for four tonight", mode="bm25", k=5)  # no context
    finally:
        calibration.query_context = original
    assert len(seen) == 1 and seen[0] is not None
    # The catalog's model (the default) is judged by its own calibration.
    assert asked == [calibration.for_model(DEFAULT_MODEL)]
    context = seen[0]
    assert context.calibration is asked[0]
    assert len(context.features()) == len(calibration.WEIGHTS)
    assert context.best_cosine >= context.tenth_cosine >= 0.0
    assert context.best_cosine >= context.mean_cosine and context.spread > 0.0
    assert 0.0 <= context.top_cover <= context.best_cover <= 1.0
    assert hits[0].tool.name == "make_restaurant_reservation"
    assert context.top.semantic == pytest.approx(context.best_cosine)


def _context(top: Candidate, nothing_fits: bool) -> QueryContext:
    # A context whose decision is known: its score is the intercept, moved past the threshold.
    zero = QueryContext(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, top)
    assert zero.foreign_score() == pytest.approx(calibration.INTERCEPT)
    shift = calibration.THRESHOLD - calibration.INTERCEPT + (1.0 if nothing_fits else -1.0)
    # Move along the trust feature (the last one) to land on the wanted side.
    trust = shift / calibration.WEIGHTS[-1]
    context = QueryContext(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, trust, top)
    assert context.nothing_fits is nothing_fits
    return context


def test_match_follows_the_context_between_weak_and_none() -> None:
    top = Candidate(semantic=0.2, cover=0.1, fused=1.0)  # "none" by its own signals
    other_weak = Candidate(semantic=0.35, cover=0.2, fused=0.5)  # "weak" by its own
    other_none = Candidate(semantic=0.1, cover=0.1, fused=0.2)
    strong = Candidate(semantic=0.7, cover=0.9, fused=0.4)
    assert [match(c, "hybrid") for c in (top, other_weak, other_none, strong)] == [
        "none",
        "weak",
        "none",
        "strong",
    ]
    fits = _context(top, nothing_fits=False)
    assert [match(c, "hybrid", fits) for c in (top, other_weak, other_none, strong)] == [
        "weak",
        "weak",
        "none",
        "strong",
    ]
    nothing = _context(top, nothing_fits=True)
    assert [match(c, "hybrid", nothing) for c in (top, other_weak, other_none, strong)] == [
        "none",
        "none",
        "none",
        "strong",
    ]
    # Other modes keep the per-hit rule.
    assert match(other_weak, "embedding", nothing) == "weak"


def test_nothing_to_sum_up() -> None:
    assert query_context({}) is None
    assert query_context({1: Candidate(semantic=0.0, cover=0.4)}) is None


def test_each_model_has_its_calibration() -> None:
    assert calibration.for_model(RETRIEVER) is calibration.CALIBRATIONS[RETRIEVER]
    assert calibration.for_model(MINILM) is calibration.MINILM_CALIBRATION
    assert calibration.for_model("some/other-model") is calibration.MINILM_CALIBRATION
    top = Candidate(semantic=0.3, cover=0.2, fused=1.0)
    scores = {
        name: QueryContext(0.3, 0.2, 0.25, 0.05, 0.2, 0.2, 0.0, 0.5, top, calibration=c)
        for name, c in [
            ("loose", calibration.Calibration(threshold=100.0)),
            ("strict", calibration.Calibration(threshold=-100.0)),
        ]
    }
    assert not scores["loose"].nothing_fits and scores["strict"].nothing_fits
