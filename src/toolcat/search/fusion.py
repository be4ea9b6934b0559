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
