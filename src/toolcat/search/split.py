"""Requests that need several tools: split a compound request into parts, merge the rankings.

"Find the movie The Dark Knight, then list its cast" needs a search tool and a credits tool;
one ranking of the whole request tends to fill its top hits with tools for the stronger half.
``split_request`` cuts a request at sentence ends and sequencing words ("then", "and then",
"after that", ";"), keeping parts of at least ``MIN_PART_WORDS`` words; ``merge`` keeps the
whole request's ranking and lets each part's best tool into the top hits. ``SEGMENTATION =
"clauses"`` also cuts at a comma before a conjunction and at "and" before a request verb: an
option, since leaving each benchmark source out it gained a few thousandths of R@5 with the
shipped retriever and lost as much with the base MiniLM; the coverage-aware merges measured
beside it lost (docs/benchmarks.md, "Requests that need several tools: clauses...").
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


# A run of whitespace becomes one character before splitting: every separator starts with
# ``\s+`` tried at each place, so a run of n blanks cost O(n^2) steps (2,000 blanks between
# two words: 0.3 s a query, 0.7 s with clauses). A run holding a line end stays a line end.
_BLANKS = re.compile(r"\s+")


def _squeezed(text: str) -> str:
    return _BLANKS.sub(lambda run: "\n" if "\n" in run.group() else " ", text)


_LEADING = re.compile(r"^(?:and then|then|after that|afterwards|and also|also)\s+", re.IGNORECASE)
# Clauses (``SEGMENTATION = "clauses"``): also a comma followed by a conjunction (", and I
# also need", ", plus"), "additionally"/"as well as"/"in addition", and "and" followed by a
# request verb ("find the movie and list its cast"). Every alternative is a fixed word list
# or a bounded run of whitespace: linear in the text, no backtracking blow-up.
_REQUEST_VERBS = (
    "tell|show|give|find|get|list|check|calculate|compute|provide|send|create|add|book|set|"
    "search|look|retrieve|fetch|delete|remove|update|make|convert|translate|schedule|"
    "recommend|suggest|play|open|cancel|share|post|buy|order|track|record|let me know"
)
_CLAUSES = re.compile(
    r"(?<=[.?!])\s+|\n+|;\s+"
    r"|,?\s+(?:and then|then|after that|afterwards|and also|additionally|as well as"
    r"|in addition(?: to that)?|plus)\s+"
    r",?|,\s+(?:and|but|also)\s+"
    rf"|\s+and\s+(?=(?:please\s+)?(?:{_REQUEST_VERBS})\b)",
    re.IGNORECASE,
)
_LEADING_CLAUSE = re.compile(
    r"^(?:and then|then|after that|afterwards|and also|also|additionally|and|but|plus"
    r"|in addition(?: to that)?|as well as)\b[\s,]*",
    re.IGNORECASE,
)
# Which segmentation ``split_request`` uses: "sequencing" (sentence ends and sequencing
# words) or "clauses" (those and the conjunctions above). Clauses were the retriever's pick
# leaving each source out, by +.001 to +.004 R@5 (noise at 40 queries a source), but that
# encoder was trained on those sources; with base MiniLM, trained on none, they lost .005
# to .010 on multi-tool queries (docs/benchmarks.md): no evidence that carries over.
SEGMENTATION = "sequencing"


def split_request(text: str, segmentation: str | None = None) -> list[str]:
    """The parts of a compound request, or ``[]`` when it is one request."""
    if len(text) > MAX_SPLIT_CHARS:
        return []
    if (segmentation or SEGMENTATION) == "clauses":
        separators, leading = _CLAUSES, _LEADING_CLAUSE
    else:
        separators, leading = _SEPARATORS, _LEADING
    parts = [leading.sub("", p.strip(" ,.;")) for p in separators.split(_squeezed(text)) if p]
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
