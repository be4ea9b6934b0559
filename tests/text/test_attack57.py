"""attack57: words and terms in C (``text/_words.c``) against every ASCII character, a
stemmer that changes the stems dict under them, threads, leaks and long hostile texts."""

from __future__ import annotations

import itertools
import random
import threading
import time
import tracemalloc
from collections.abc import Callable

import pytest

from toolcat.text import tokenize as tk

pytestmark = pytest.mark.skipif(tk._words is None, reason="_words not compiled")

ASCII = [chr(i) for i in range(128)]


def python_terms(
    text: str, stems: dict[str, str], stop: frozenset[str], longest: int, stem: Callable[[str], str]
) -> list[str]:
    """``_terms``' loop over the Python's words, with the same dict and stemmer."""
    found = []
    tk.NATIVE_WORDS = False
    try:
        words = tk.split_words(text)
    finally:
        tk.NATIVE_WORDS = True
    for word in words:
        kept = stems.get(word)
        if kept is None:
            if word in stop or len(word) > longest:
                continue
            kept = stem(word)
        found.append(kept)
    return found


def test_every_pair_of_ascii_characters_splits_as_the_python() -> None:
    for pair in itertools.product(ASCII, repeat=2):
        text = "".join(pair) + "xY" + "".join(pair) + "AB"
        tk.NATIVE_WORDS = False
        try:
            expected = tk.split_words(text)
        finally:
            tk.NATIVE_WORDS = True
        assert tk._words.words(text) == expected, repr(text)


@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_pieces_give_the_pythons_terms(seed: int) -> None:
    pieces = [*ASCII, "the", "The", "THE", "a" * 40, "A" * 40, "b" * 41, "B" * 41, "0" * 41]
    pieces += ["HTTPServer", "aB", "Ab", "AB", "x1Y2", "ABCdef", "and", "AND", "please"]
    rng = random.Random(seed)
    stop = tk.STOP_WORDS
    for _ in range(5_000):
        text = "".join(rng.choices(pieces, k=rng.randrange(0, 25)))
        stems: dict[str, str] = {}
        got = tk._words.terms(text, stems, stop, tk.MAX_TOKEN_LENGTH, lambda w: w[::-1])
        assert got == python_terms(text, {}, stop, tk.MAX_TOKEN_LENGTH, lambda w: w[::-1])


def test_a_stemmer_that_changes_the_stems_dict_is_read_as_it_goes() -> None:
    """The stemmer runs Python: it may clear the dict the C looks stems up in, or fill it
    with what the next word will find. The C looks each word up when it reaches it, as the
    Python does, and holds nothing of the dict across the call."""
    text = "alpha beta alpha gamma Beta DELTA delta epsilon alpha"

    def stemmer(stems: dict[str, str]) -> Callable[[str], str]:
        def stem(word: str) -> str:
            stems.clear()
            stems["delta"] = "D" * 1000  # found by the next "delta", not stemmed
            stems[word + "x"] = word
            for i in range(200):  # the dict grows and is rebuilt under the walk
                stems[f"junk{i}"] = str(i)
            return word.upper()

        return stem

    native_stems: dict[str, str] = {"alpha": "A"}
    python_stems: dict[str, str] = {"alpha": "A"}
    native = tk._words.terms(text, native_stems, tk.STOP_WORDS, 40, stemmer(native_stems))
    python = python_terms(text, python_stems, tk.STOP_WORDS, 40, stemmer(python_stems))
    assert native == python
    assert native_stems == python_stems


def test_a_failing_or_odd_stemmer_is_passed_through() -> None:
    def fail(word: str) -> str:
        raise LookupError(word)

    with pytest.raises(LookupError, match="zorbify"):
        tk._words.terms("the zorbify", {}, tk.STOP_WORDS, 40, fail)
    odd = object()
    assert tk._words.terms("zorbify it", {}, tk.STOP_WORDS, 40, lambda w: odd) == [odd]
    with pytest.raises(TypeError):
        tk._words.terms("x", {}, set(tk.STOP_WORDS), 40, str)
    with pytest.raises(TypeError):
        tk._words.terms("x", {}, tk.STOP_WORDS, "40", str)


class Text(str):
    def lower(self) -> str:  # type: ignore[override]
        raise AssertionError("the C never calls a subclass's methods")


@pytest.mark.parametrize("text", [Text("HelloWorld"), "héllo", "\ud800", "a\x00é", 5, None, b"ab"])
def test_what_is_not_an_exact_ascii_str_is_left_to_the_python(text: object) -> None:
    assert tk._words.words(text) is None  # type: ignore[arg-type]
    assert tk._words.terms(text, {}, tk.STOP_WORDS, 40, str) is None  # type: ignore[arg-type]


def test_threads_clearing_the_stem_cache_change_no_terms() -> None:
    texts = [
        "getVehicleBatteryLevel forecasts of the HTTPServer",
        "running runners ran quickly " * 3,
        "XMLHttpRequest2JSON and IPv6Address lookups",
    ]
    expected = [tk._terms(text) for text in texts]
    stop = threading.Event()
    wrong: list[object] = []

    def clear() -> None:
        while not stop.is_set():
            tk._stem_cache.clear()
            tk._stem_cache.update({f"w{i}": "x" for i in range(100)})

    def terms() -> None:
        for _ in range(2_000):
            got = [tk._terms(text) for text in texts]
            if got != expected:
                wrong.append(got)

    clearer = threading.Thread(target=clear)
    workers = [threading.Thread(target=terms) for _ in range(3)]
    clearer.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    clearer.join()
    tk._stem_cache.clear()
    assert not wrong


def test_words_and_terms_leak_nothing() -> None:
    stems = {"forecast": "forecast"}

    def fail(word: str) -> str:
        raise ValueError(word)

    def calls() -> None:
        tk._words.words("getVehicleBatteryLevel the 42")
        tk._words.terms("forecast the Weather " + "x" * 50, stems, tk.STOP_WORDS, 40, str)
        try:
            tk._words.terms("forecast zorbify", stems, tk.STOP_WORDS, 40, fail)
        except ValueError:
            pass
        else:
            raise AssertionError("the stemmer's error was lost")

    for _ in range(200):
        calls()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            calls()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 10_000


@pytest.mark.parametrize(
    "hostile",
    ["A" * 200_000 + "a", "aB" * 100_000, "A1" * 100_000, "\x00" * 200_000, "Ab" * 100_000],
    ids=["acronym", "camel", "digits", "nul", "words"],
)
def test_hostile_text_is_split_in_linear_time(hostile: str) -> None:
    normal = ("forecast " * 25_000)[: len(hostile)]

    def timed(text: str) -> float:
        start = time.perf_counter()
        tk._words.words(text)
        return time.perf_counter() - start

    timed(normal)
    assert timed(hostile) < 20 * timed(normal) + 0.1
