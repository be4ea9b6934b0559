"""Requests that need several tools: split a compound request into parts, merge the rankings.

"Find the movie The Dark Knight, then list its cast" needs a search tool and a credits tool;
one ranking of the whole request tends to fill its top hits with tools for the stronger half.
``split_request`` cuts a request at sentence ends and at sequencing words ("then", "and
then", "after that", ";"), keeping parts of at least ``MIN_PART_TERMS`` words; ``merge``
keeps the whole request's ranking and lets each part's best tool into the top hits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_PARTS = 4
MIN_PART_WORDS = 3
MAX_SPLIT_CHARS = 2000  # longer text (documents pasted in) is not split
PART_MIN_COSINE = 0.5
PART_MIN_COVER = 0.8
_SEPARATORS = re.compile(
    r"(?<=[.?!])\s+(?=[A-Z])|\n+|;\s+|,?\s+(?:and then|then|after that|afterwards|and also)\s+",
    re.IGNORECASE,
)


_LEADING = re.compile(r"^(?:and then|then|after that|afterwards|and also|also)\s+", re.IGNORECASE)


def split_request(text: str) -> list[str]:
    """The parts of a compound request, or ``[]`` when it is one request."""
    if len(text) > MAX_SPLIT_CHARS:
        return []
    parts = [_LEADING.sub("", p.strip(" ,.;")) for p in _SEPARATORS.split(text)]
    parts = [p for p in parts if len(p.split()) >= MIN_PART_WORDS]
    if len(parts) < 2:
        return []
    return parts[:MAX_PARTS]


def fits(cosine: float, cover: float) -> bool:
    """Whether a part's best tool fits the part clearly enough to join the top hits."""
    return cosine >= PART_MIN_COSINE or cover >= PART_MIN_COVER


def merge(
    whole: Sequence[tuple[int, float]],
    parts: Sequence[Sequence[tuple[int, float]]],
    limit: int,
) -> list[tuple[int, float]]:
    """The whole request's ranking, with each part's best tool moved up to just after the
    whole ranking's first hit (in part order) when it is not already above it. Scores stay
    those of the whole ranking (a moved tool takes the score of the place it moved to)."""
    if not whole:
        return []
    order = [whole[0][0]]
    for ranking in parts:
        for item, _ in ranking[:1]:
            if item not in order:
                order.append(item)
    merged = order + [item for item, _ in whole if item not in order]
    scores = [score for _, score in whole]
    return list(zip(merged, scores, strict=False))[:limit]
