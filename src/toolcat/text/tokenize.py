"""Turn tool text and queries into the same index terms.

Identifiers are split the way tool names are written (``getVehicleBatteryLevel``,
``get_forecast``, ``http-get``), everything is lowercased, stop words go, and English words
are stemmed (Snowball) so "forecasts" finds "forecast". Index and query go through the
same function, so whatever this does, both sides agree.

The stemmer is Snowball's English algorithm, from PyStemmer (C, ``pip install
'toolcat[fast]'``) when it is installed, else from snowballstemmer (pure Python, a required
dependency). They are the same algorithm and give the same stems — snowballstemmer itself
hands over to PyStemmer when it finds it — checked on every word of ../shared/bench's tools
and queries (20,442 words) and 85,995 identifiers from Python sources: 0 differences
(tests/text/test_tokenize.py compares them on a real vocabulary). A word is stemmed once
per process: stems are kept (``STEM_CACHE``), so a serving process pays the stemmer only for
words it has never seen (~3 µs in C, ~50 µs in Python).

ASCII text is split and its terms looked up in C (``_words.c``, built where there is a C
compiler: ``NATIVE_WORDS``), the same lists as the Python below, which splits other text
and stands in wherever the extension was not built (tests/text/test_words.py compares them).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterable

try:
    from . import _words
except ImportError:  # no C compiler where toolcat was installed: the Python splits
    _words = None  # type: ignore[assignment]

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

# Words whose stems are kept per process (a word's stem never changes); past this many,
# new words are stemmed each time they come (agents' vocabularies are far smaller).
STEM_CACHE = 200_000
_stem_cache: dict[str, str] = {}  # holds no stop word and no over-long word (see tokenize)
_stem_word: Callable[[str], str] | None = None
_stemmer_lock = threading.Lock()


def english_stemmer() -> Callable[[str], str]:
    """Snowball's English ``stemWord``: PyStemmer's when installed, else snowballstemmer's,
    imported without the package ``__init__`` (which loads ~30 languages, 15–30 ms cold)."""
    try:
        import Stemmer
    except ImportError:
        pass
    else:
        return Stemmer.Stemmer("english").stemWord  # type: ignore[no-any-return]
    if "snowballstemmer" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("snowballstemmer")
        if spec is not None and spec.submodule_search_locations is not None:
            # The package object without running its __init__, long enough to import the
            # English stemmer's three modules; a later ``import snowballstemmer`` elsewhere
            # runs the __init__ as usual (it finds these modules already imported).
            sys.modules["snowballstemmer"] = importlib.util.module_from_spec(spec)
            try:
                from snowballstemmer.english_stemmer import EnglishStemmer
            finally:
                del sys.modules["snowballstemmer"]
            return EnglishStemmer().stemWord  # type: ignore[no-any-return]
    import snowballstemmer

    return snowballstemmer.stemmer("english").stemWord  # type: ignore[no-any-return]


def _stem(word: str) -> str:
    """``word``'s stem (``word`` is lowercase, neither a stop word nor over-long)."""
    global _stem_word
    stem = _stem_cache.get(word)
    if stem is None:
        if not word.isascii() or word.isdigit():
            stem = word
        else:
            if _stem_word is None:
                with _stemmer_lock:
                    if _stem_word is None:
                        _stem_word = english_stemmer()
            stem = _stem_word(word)
        if len(_stem_cache) < STEM_CACHE:
            _stem_cache[word] = stem
    return stem


NATIVE_WORDS = _words is not None  # tests switch it off to compare the Python


def split_words(text: str) -> list[str]:
    """Split ``text`` into lowercase words, breaking identifiers at case and digit changes."""
    if NATIVE_WORDS:
        found = _words.words(text)
        if found is not None:  # an ASCII str
            return found
    if text.isascii():
        # The same words as chunk by chunk below (the identifier pattern never matches
        # across the punctuation between chunks), in two C calls instead of a loop.
        return " ".join(_CAMEL.findall(text)).lower().split()
    words: list[str] = []
    for chunk in _CHUNK.findall(text):
        if chunk.isascii():
            words.extend(part.lower() for part in _CAMEL.findall(chunk))
        else:
            words.append(chunk.lower())
    return words


# Short texts (parameter names and descriptions, tags, enum values) recur across thousands
# of tools: their terms are kept too, so a bulk registration splits each once per process.
SHORT_TEXT = 160
TEXT_CACHE = 100_000
_text_cache: dict[str, tuple[str, ...]] = {}


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: split, lowercased, stop words dropped, stemmed."""
    if len(text) <= SHORT_TEXT:
        kept = _text_cache.get(text)
        if kept is None:
            kept = tuple(_terms(text))
            if len(_text_cache) < TEXT_CACHE:
                _text_cache[text] = kept
        return list(kept)
    return _terms(text)


def _terms(text: str) -> list[str]:
    if NATIVE_WORDS:
        found = _words.terms(text, _stem_cache, STOP_WORDS, MAX_TOKEN_LENGTH, _stem)
        if found is not None:  # an ASCII str
            return found
    known = _stem_cache.get
    terms: list[str] = []
    for word in split_words(text):
        stem = known(word)  # a kept stem: neither a stop word nor over-long
        if stem is None:
            if word in STOP_WORDS or len(word) > MAX_TOKEN_LENGTH:
                continue
            stem = _stem(word)
        terms.append(stem)
    return terms


def tokenize_all(texts: Iterable[str | None]) -> list[str]:
    """Index terms of several texts, in order."""
    terms: list[str] = []
    for text in texts:
        if text:
            terms.extend(tokenize(text))
    return terms
