"""Words and index terms of ASCII text in C (``text/_words.c``) are the Python's, word for
word; other text, and anything but an exact str, is left to the Python."""

from __future__ import annotations

import random
import string

import pytest

from toolcat.text import tokenize as tk

pytestmark = pytest.mark.skipif(tk._words is None, reason="_words not compiled")

IDENTIFIERS = [
    "getVehicleBatteryLevel",
    "HTTPServerError",
    "XMLHttpRequest2JSON",
    "ABCd",
    "Ab",
    "AB",
    "A",
    "aB1C2dE",
    "get_forecast",
    "http-get",
    "__init__",
    "v2API",
    "IPv6Address",
    "",
    "   ",
    "x" * 41 + " The and of",
]


def both(function: str, text: str) -> tuple[object, object]:
    tk.NATIVE_WORDS = True
    try:
        native = getattr(tk, function)(text)
    finally:
        tk.NATIVE_WORDS = False
    try:
        return native, getattr(tk, function)(text)
    finally:
        tk.NATIVE_WORDS = True


@pytest.mark.parametrize("text", IDENTIFIERS)
def test_identifiers_split_as_the_python_splits_them(text: str) -> None:
    native, python = both("split_words", text)
    assert native == python
    native, python = both("_terms", text)
    assert native == python


def test_random_ascii_text_gives_the_same_words_and_terms() -> None:
    rng = random.Random(11)
    alphabet = string.ascii_letters + string.digits + " _-./:;'\"\t\n()[]{}@\x00\x7f" + "AaZz09"
    for _ in range(20_000):
        text = "".join(rng.choices(alphabet, k=rng.randrange(0, 50)))
        for function in ("split_words", "_terms"):
            native, python = both(function, text)
            assert native == python, (function, text)


def test_non_ascii_text_is_left_to_the_python() -> None:
    assert tk._words.words("café au lait") is None
    stems, stop = tk._stem_cache, tk.STOP_WORDS
    assert tk._words.terms("naïve", stems, stop, 40, tk._stem) is None
    for text in ("café Bar", "北京 weather", "x\ud800y", "emoji 😀 here"):
        for function in ("split_words", "_terms"):
            native, python = both(function, text)
            assert native == python, (function, text)


def test_a_str_subclass_is_left_to_the_python() -> None:
    class Loud(str):
        def lower(self) -> str:  # the Python path would call this; C must not read past it
            return "LOUD"

    assert tk._words.words(Loud("getThing")) is None
    assert tk._words.terms(Loud("getThing"), {}, frozenset(), 40, str) is None


def test_stop_words_and_long_words_go_and_unknown_words_are_stemmed() -> None:
    asked: list[str] = []

    def stem(word: str) -> str:
        asked.append(word)
        return word.upper()

    stems = {"kept": "KEPT-STEM"}
    found = tk._words.terms("the kept Forecasts " + "y" * 41, stems, frozenset({"the"}), 40, stem)
    assert found == ["KEPT-STEM", "FORECASTS"]
    assert asked == ["forecasts"]


def test_a_stemmer_that_fails_raises_and_leaks_nothing() -> None:
    def stem(word: str) -> str:
        raise RuntimeError(f"no stem for {word}")

    with pytest.raises(RuntimeError, match="no stem for bar"):
        tk._words.terms("foo bar", {"foo": "foo"}, frozenset(), 40, stem)


def test_a_stemmer_that_changes_the_stems_while_they_are_read_is_safe() -> None:
    stems: dict[str, str] = {}

    def stem(word: str) -> str:
        stems.clear()  # the dict the C looks words up in
        stems.update({f"w{i}": "x" for i in range(200)})
        return word

    text = " ".join(f"word{i} w{i}" for i in range(300))
    found = tk._words.terms(text, stems, frozenset(), 40, stem)
    words = tk._words.words(text)
    assert found is not None and words is not None and len(found) == len(words) == 1200


@pytest.mark.parametrize(
    "args",
    [
        ("x", [], frozenset(), 40, str),
        ("x", {}, {"a"}, 40, str),
        ("x", {}, frozenset(), "40", str),
        ("x", {}, frozenset()),
    ],
)
def test_wrong_arguments_are_a_type_error(args: tuple[object, ...]) -> None:
    with pytest.raises(TypeError):
        tk._words.terms(*args)  # type: ignore[arg-type]


def test_the_index_text_of_a_catalog_is_the_same_either_way() -> None:
    from toolcat.registry.manifest import load_manifest
    from toolcat.text.documents import index_fields, toolkit_terms

    from ..helpers import SAMPLE_TOOLKITS

    for path in sorted(SAMPLE_TOOLKITS.glob("*.*")):
        toolkit = load_manifest(path)
        for tool in toolkit.tools:
            tk.NATIVE_WORDS = False
            tk._text_cache.clear()
            python = index_fields(tool, toolkit, ("a learned query",), toolkit_terms(toolkit))
            tk.NATIVE_WORDS = True
            tk._text_cache.clear()
            assert index_fields(tool, toolkit, ("a learned query",)) == python
