"""Whether anything in the catalog fits a request ("nothing fits"), from the request's own
score distribution.

A hit's cosine and query coverage alone cannot tell a request some tool answers from one
that only has near misses: in a catalog of thousands the best near miss is as close as an
answer (README, "Nothing fits"). How the best hit stands against the rest of the ranking
tells more: an answerable request has a clear best tool and a cluster of related tools about
it. ``QueryContext`` sums up one hybrid search — the best cosine, the mean, spread and 10th of
the top 50 cosines, the best coverage, the top hit's coverage and name hit, and the query's
visibility to BM25 — and ``nothing_fits`` is a logistic combination of them.

The constants were fitted with scripts/research/tune_match.py on half of each benchmark source's
queries: answerable ones (each source's queries in its own catalog and in the catalog of every
source) against foreign ones (in every other source's catalog, in one other source's, and in
as many tools drawn from the others as the source has), so that catalog size alone, which
moves every one of these numbers, tells nothing. The threshold keeps "nothing fits" to about
10% of answerable queries on that half; the other half is reported in the README.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .fusion import Candidate

DEPTH = 50  # cosines summed up: hybrid search's depth (engine.HYBRID_DEPTH)

# Feature order: best cosine, top hit's coverage, best coverage, best cosine minus the 10th,
# best cosine minus the mean of the top 50, their standard deviation, the top hit's name
# hit, the query's BM25 weight (fusion.Candidate.trust). Positive weights: more foreign.
# The base MiniLM's, fitted on its cosines (and any model's without its own entry below).
WEIGHTS: tuple[float, ...] = (-9.091, -1.705, -1.193, -4.330, 9.361, -19.115, -0.699, 2.891)
INTERCEPT = 4.037
THRESHOLD = 1.003


@dataclass(frozen=True)
class Calibration:
    """One model's logistic: ``WEIGHTS``, ``INTERCEPT`` and ``THRESHOLD`` as above."""

    weights: tuple[float, ...] = WEIGHTS
    intercept: float = INTERCEPT
    threshold: float = THRESHOLD


MINILM_CALIBRATION = Calibration()
# Per model, as fusion.MODEL_PARAMS: every feature but the coverages and the trust is a
# cosine, on the model's own scale. Keyed by model id (embeddings.RETRIEVER). The packaged
# retriever keeps the base MiniLM's: refitted on its leave-one-source-out models' cosines
# (scripts/research/tune_match.py --loso), the whole logistic and the threshold alone both
# told more answerable requests "nothing fits" on the source left out (.096 -> .147 and .131
# of own-catalog requests; metatool .33 -> .54) for little more on foreign ones
# (docs/benchmarks.md, "Fusion and 'nothing fits' for the retriever").
CALIBRATIONS: dict[str, Calibration] = {
    "toolcat-tool-retriever-v1": MINILM_CALIBRATION,
}


def for_model(model_id: str) -> Calibration:
    """The calibration fitted for ``model_id`` (the base MiniLM's when it has none)."""
    return CALIBRATIONS.get(model_id, MINILM_CALIBRATION)


@dataclass(frozen=True)
class QueryContext:
    """What one hybrid search says about the request as a whole."""

    best_cosine: float
    tenth_cosine: float
    mean_cosine: float
    spread: float  # population standard deviation of the top cosines
    best_cover: float
    top_cover: float  # of the best-fused hit
    top_name_hit: float
    trust: float
    top: Candidate  # the best-fused hit
    hits_fit: bool = True  # whether any candidate fits by the single modes' rules
    calibration: Calibration = MINILM_CALIBRATION  # the model's (``for_model``)

    def features(self) -> tuple[float, ...]:
        return (
            self.best_cosine,
            self.top_cover,
            self.best_cover,
            self.best_cosine - self.tenth_cosine,
            self.best_cosine - self.mean_cosine,
            self.spread,
            self.top_name_hit,
            self.trust,
        )

    def foreign_score(self) -> float:
        """The logistic's log-odds that no tool fits (higher: less fits)."""
        fitted = self.calibration
        return fitted.intercept + math.fsum(
            w * x for w, x in zip(fitted.weights, self.features(), strict=True)
        )

    @functools.cached_property
    def nothing_fits(self) -> bool:
        """Asked once per hit by ``match``: decided once per request."""
        return self.foreign_score() > self.calibration.threshold


def query_context(
    signals: Mapping[int, Candidate], calibration: Calibration = MINILM_CALIBRATION
) -> QueryContext | None:
    """The context of a hybrid search from its candidates (each ranking's top hits, with
    their signals), judged by the model's ``calibration``; None when there is nothing to sum
    up (no tool has a vector)."""
    if not signals:
        return None
    cosines = sorted((c.semantic for c in signals.values()), reverse=True)[:DEPTH]
    if not cosines or all(c == 0.0 for c in cosines):
        return None
    _, best = max(signals.items(), key=lambda pair: (pair[1].fused, -pair[0]))
    mean = math.fsum(cosines) / len(cosines)
    return QueryContext(
        best_cosine=cosines[0],
        tenth_cosine=cosines[min(9, len(cosines) - 1)],
        mean_cosine=mean,
        spread=math.sqrt(math.fsum((c - mean) ** 2 for c in cosines) / len(cosines)),
        best_cover=max(c.cover for c in signals.values()),
        top_cover=best.cover,
        top_name_hit=best.name_hit,
        trust=best.trust,
        top=best,
        hits_fit=any(_fits_alone(c) for c in signals.values()),
        calibration=calibration,
    )


def _fits_alone(candidate: Candidate) -> bool:
    """Whether the embedding or the BM25 mode alone would call this candidate a fit."""
    return (
        candidate.semantic >= WEAK_COSINE
        or candidate.cover >= WEAK_COVER
        or _fits_known_words(candidate)
    )


# Calibration of ``match``: a hit is "none" below both WEAK thresholds, fitted with
# scripts/research/tune_match.py on half of each source's queries (the most foreign queries told
# "nothing fits" while few answerable ones are). Refitting against every other source's tools
# (.32 / .45) did no better on the held-out half than these (README, "Nothing fits").
STRONG_COSINE = 0.55
WEAK_COSINE = 0.30
STRONG_COVER = 0.8
WEAK_COVER = 0.7


def match(candidate: Candidate | None, mode: str, context: QueryContext | None = None) -> str:
    """``strong``, ``weak`` or ``none``: how well one hit fits the request.

    ``strong`` and, without a ``context``, ``weak`` come from the hit's own cosine and query
    coverage. With the hybrid search's ``context`` (search/calibration.py), the request as a
    whole decides between the other two: when it says nothing fits, every hit short of
    ``strong`` is ``none``; else the best-fused hit is at least ``weak``.
    """
    if candidate is None:
        return "weak"
    cosine = candidate.semantic if mode != "bm25" else None
    cover = candidate.cover
    if (
        (cosine is not None and cosine >= STRONG_COSINE)
        or (cover >= STRONG_COVER and candidate.name_cover > 0)
        or candidate.name_hit >= 1.0  # the request spells out the whole name (hybrid mode)
    ):
        return "strong"
    if context is not None and mode == "hybrid" and context.nothing_fits:
        return "none"
    fits = (cosine is not None and cosine >= WEAK_COSINE) or cover >= WEAK_COVER
    if fits or _fits_known_words(candidate):
        return "weak"
    if context is not None and mode == "hybrid" and candidate is context.top:
        # The request as a whole fits, by the calibrated rule; the best hit says so as long
        # as either single mode would find a fit among the hits too (else the two single
        # modes said "nothing fits" and hybrid "weak": the signals must agree).
        return "weak" if context.hits_fit else "none"
    return "none"


FIT_ORDER = {"none": 0, "weak": 1, "strong": 2}


def down_the_ranks(hits: Sequence[tuple[int, float, str]]) -> list[tuple[int, float, str]]:
    """The hits (row, score, match) with labels that never rise down the ranks: each hit is
    lifted to the best label at or below its rank. A hit never fits better than one the
    ranking put above it, and the ranking is the better judge of order than one hit's
    thresholds; lifting (not capping) keeps the list's best label, so ``no_match`` is what
    the hits alone said."""
    lifted: list[tuple[int, float, str]] = []
    best = "none"
    for row, score, label in reversed(hits):
        best = label if FIT_ORDER[label] > FIT_ORDER[best] else best
        lifted.append((row, score, best))
    return lifted[::-1]


def _fits_known_words(candidate: Candidate) -> bool:
    """A hit that holds nearly all of the request's distinctive words (``fusion.distinctive``:
    some tools have them, few do), one of them in its name. The request's other words are
    either words no tool has, most often its arguments (a film's title, a person, a file
    name), which say nothing against the tool (BM25 told "find movies similar to Inception"
    nothing fits with "Get Similar Movies" first), or words most tools have ("get")."""
    return (
        candidate.known_terms > 0
        and candidate.known_cover >= STRONG_COVER
        and candidate.known_in_name
    )
