from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolcat.text import tokenize as tokenize_module
from toolcat.text.tokenize import _CAMEL, MAX_TOKEN_LENGTH, STOP_WORDS, split_words, tokenize


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("getVehicleBatteryLevel", ["get", "vehicle", "battery", "level"]),
        ("get_forecast", ["get", "forecast"]),
        ("http-get", ["http", "get"]),
        ("HTTPServerError", ["http", "server", "error"]),
        ("convert2PDF", ["convert", "2", "pdf"]),
        ("math.factorial", ["math", "factorial"]),
        ("GET /movie/{movie_id}/keywords", ["get", "movie", "movie", "id", "keywords"]),
        ("Café München", ["café", "münchen"]),
        ("账户管理", ["账户管理"]),
        ("", []),
        ("🙂 *** ()", []),
    ],
)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_tokenize_drops_stop_words_and_stems() -> None:
    assert tokenize("What is the weather forecasts for the weekend?") == [
        "weather",
        "forecast",
        "weekend",
    ]
    assert tokenize("listFiles") == tokenize("list the files")


# -- speed paths that must not change a term ---------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT.parent / "shared" / "bench"


def real_texts() -> list[str]:
    """Every line of ../shared/bench's tools and queries when present (every source), plus
    the sample catalog's manifests, the README and docs/ (always here)."""
    texts = [p.read_text() for p in sorted((ROOT / "data" / "toolkits").glob("*.yaml"))]
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        texts += doc.read_text().splitlines()
    if BENCH.is_dir():
        for source in sorted(BENCH.iterdir()):
            for name in ("tools.jsonl", "queries.jsonl"):
                if (source / name).exists():
                    for line in (source / name).read_text().splitlines():
                        texts.append(line)
                        texts.append(json.dumps(json.loads(line), ensure_ascii=False))
    return texts


@pytest.fixture(scope="module")
def vocabulary() -> tuple[list[str], list[str]]:
    """(real texts, the distinct words of them the stemmer sees)."""
    texts = real_texts()
    words = {w for text in texts for w in split_words(text)}
    stemmed = sorted(
        w
        for w in words
        if w.isascii() and not w.isdigit() and w not in STOP_WORDS and len(w) <= MAX_TOKEN_LENGTH
    )
    assert len(stemmed) > (15_000 if BENCH.is_dir() else 1_000)
    return texts, stemmed


def chunked_split(text: str) -> list[str]:
    """``split_words`` as it was written before its ASCII fast path: chunk by chunk."""
    words: list[str] = []
    for chunk in re.findall(r"[^\W_]+", text):
        if chunk.isascii():
            words.extend(p.lower() for p in _CAMEL.findall(chunk))
        else:
            words.append(chunk.lower())
    return words


@pytest.mark.slow
def test_split_words_fast_path_equals_the_chunked_split(
    vocabulary: tuple[list[str], list[str]],
) -> None:
    texts, _ = vocabulary
    rng = random.Random(7)
    alphabet = "aAbBzZ09_-. /'éÜ账🙂\tXYlowerUPPERCamelCase"
    texts = texts + ["".join(rng.choices(alphabet, k=rng.randint(0, 24))) for _ in range(20_000)]
    assert [split_words(t) for t in texts] == [chunked_split(t) for t in texts]


def test_memoised_stems_equal_fresh_stems(vocabulary: tuple[list[str], list[str]]) -> None:
    texts, words = vocabulary
    stem = tokenize_module.english_stemmer()
    fresh = [stem(w) for w in words]  # no cache involved
    tokenize_module._stem_cache.clear()
    assert [tokenize_module._stem(w) for w in words] == fresh  # stemmed, then kept
    assert all(tokenize_module._stem_cache[w] == s for w, s in zip(words, fresh, strict=True))
    assert [tokenize_module._stem(w) for w in words] == fresh  # from the cache
    # Whole texts: the kept stems give the terms the stemmer gives word by word.
    for text in texts[:3000]:
        expected = [
            stem(w) if w.isascii() and not w.isdigit() else w
            for w in chunked_split(text)
            if w not in STOP_WORDS and len(w) <= MAX_TOKEN_LENGTH
        ]
        assert tokenize(text) == expected


def test_pystemmer_and_snowballstemmer_agree_on_every_word(
    vocabulary: tuple[list[str], list[str]],
) -> None:
    """PyStemmer (C) is used when installed; the index may have been built by the other."""
    stemmer = pytest.importorskip("Stemmer")
    from snowballstemmer.english_stemmer import EnglishStemmer

    _, words = vocabulary
    python, c = EnglishStemmer(), stemmer.Stemmer("english")
    differ = [w for w in words if python.stemWord(w) != c.stemWord(w)]
    assert differ == []


def test_the_pure_python_stemmer_loads_english_only() -> None:
    """Without PyStemmer, snowballstemmer's English stemmer comes without its ~30 other
    languages, and a later ``import snowballstemmer`` elsewhere still works."""
    script = (
        "import sys\n"
        "sys.modules['Stemmer'] = None  # as if PyStemmer were not installed\n"
        "from toolcat.text.tokenize import tokenize\n"
        "assert tokenize('running forecasts') == ['run', 'forecast'], tokenize('running')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('snowballstemmer'))\n"
        "assert loaded == ['snowballstemmer.among', 'snowballstemmer.basestemmer',\n"
        "                  'snowballstemmer.english_stemmer'], loaded\n"
        "import snowballstemmer\n"
        "assert snowballstemmer.stemmer('french').stemWord('maisons') == 'maison'\n"
        "assert snowballstemmer.stemmer('english').stemWord('running') == 'run'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
