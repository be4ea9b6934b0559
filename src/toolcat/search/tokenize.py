"""Turn tool text and queries into the same index terms.

Identifiers are split the way tool names are written (``getVehicleBatteryLevel``,
``get_forecast``, ``http-get``), everything is lowercased, stop words go, and English words
are stemmed (Snowball) so "forecasts" finds "forecast". Index and query go through the
same function, so whatever this does, both sides agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CHUNK = re.compile(r"[^\W_]+")
# camelCase / PascalCase / ACRONYMWord / digits, for ASCII chunks
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
MAX_TOKEN_LENGTH = 40

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "please",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)

_stem_cache: dict[str, str] = {}
_stemmer = None


def _stem(word: str) -> str:
    global _stemmer
    stem = _stem_cache.get(word)
    if stem is None:
        if _stemmer is None:
            import snowballstemmer

            _stemmer = snowballstemmer.stemmer("english")
        stem = _stemmer.stemWord(word) if word.isascii() and not word.isdigit() else word
        if len(_stem_cache) < 200_000:
            _stem_cache[word] = stem
    return stem


def split_words(text: str) -> list[str]:
    """Split ``text`` into lowercase words, breaking identifiers at case and digit changes."""
    words: list[str] = []
    for chunk in _CHUNK.findall(text):
        if chunk.isascii():
            words.extend(part.lower() for part in _CAMEL.findall(chunk))
        else:
            words.append(chunk.lower())
    return words


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: split, lowercased, stop words dropped, stemmed."""
    return [
        _stem(word)
        for word in split_words(text)
        if word not in STOP_WORDS and len(word) <= MAX_TOKEN_LENGTH
    ]


def tokenize_all(texts: Iterable[str | None]) -> list[str]:
    """Index terms of several texts, in order."""
    terms: list[str] = []
    for text in texts:
        if text:
            terms.extend(tokenize(text))
    return terms
