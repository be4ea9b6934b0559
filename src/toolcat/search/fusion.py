"""Combining rankings: weighted reciprocal rank fusion (scale-free, so BM25 scores and
cosine similarities need no common scale)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Sequence[tuple[float, Sequence[tuple[int, float]]]],
    limit: int,
    k: int = RRF_K,
) -> list[tuple[int, float]]:
    """Fuse ``(weight, [(id, score), ...best first])`` rankings into one, best first.

    Each id scores ``sum(weight / (k + rank))`` over the rankings it appears in.
    """
    fused: dict[int, float] = {}
    for weight, ranking in rankings:
        for rank, (item, _score) in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    ordered = sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))
    return ordered[:limit]


def score_fusion(
    rankings: Sequence[tuple[float, Sequence[tuple[int, float]]]],
    limit: int,
) -> list[tuple[int, float]]:
    """Fuse rankings by their scores: each list min-max normalised to [0, 1] (an id missing
    from a list gets 0 there), then weighted and summed. Unlike rank fusion this keeps how
    far ahead a ranking's best hits are."""
    fused: dict[int, float] = {}
    for weight, ranking in rankings:
        if not ranking:
            continue
        values = [score for _, score in ranking]
        low, high = min(values), max(values)
        span = high - low
        for item, score in ranking:
            normalised = (score - low) / span if span > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * normalised
    ordered = sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))
    return ordered[:limit]
