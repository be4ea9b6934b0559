"""A saved index's first pass in C (``_impacts.TermCounts``) counts and packs each row as the
Python does (``_weighted`` and ``_pack``): the same bytes, term ids in the same first-seen
order, the same tool counts; and an index built with it is the one the Python builds, on
real tools and on FTS5 content edited by hand (every whitespace ``str.split`` knows, words
of one-, two- and four-byte texts, thousands of terms past the table's first size)."""

from __future__ import annotations

import random
import sqlite3
from array import array
from collections import Counter, defaultdict
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from tests.search.test_postings import bench_toolkits
from tests.search.test_weighted_counts import SPACES, WORDS, _text
from toolcat import Catalog
from toolcat.search import bm25, lexical_index, native
from toolcat.search.lexical_index import TantivyIndex

compiled = native.module()
pytestmark = pytest.mark.skipif(compiled is None, reason="the C extension was not built")
# Words whose texts are stored one, two and four bytes a character, the same word in each.
WIDE = ["ä", "ā", "😀", "get😀", "Ω", "ω", "\U0001f600x", "ÿ", "Ā"]


def _python_pass(
    rows: list[list[str]], times: list[int]
) -> tuple[list[Any], dict[str, int], list[int]]:
    term_ids: defaultdict[str, int] = defaultdict(count().__next__)
    doc_freq: Counter[str] = Counter()
    out = []
    for texts in rows:
        length, found, tokens = lexical_index._weighted(texts, (), times, 1.0, True)
        doc_freq.update(found.keys())
        out.append((lexical_index._pack(length, found, term_ids, "I"), length, tokens))
    ids = dict(term_ids)
    return out, ids, [doc_freq[t] for t in ids]


def _c_pass(rows: list[list[str]], times: list[int]) -> tuple[list[Any], dict[str, int], list[int]]:
    counter = compiled.TermCounts()
    out = [counter.add(texts, times) for texts in rows]
    df = array("I")
    df.frombytes(counter.doc_freq())
    return out, dict(counter.term_ids), list(df)


def _rows(rng: random.Random, n: int, words: list[str]) -> list[list[str]]:
    rows = []
    for _ in range(n):
        row = []
        for _ in range(5):
            text = _text(rng)
            if rng.random() < 0.5:  # some of them in wider kinds
                text = text.replace("x", rng.choice(words))
            row.append(text)
        rows.append(row)
    return rows


@pytest.mark.parametrize("weights", [bm25.DEFAULT_WEIGHTS, (1.0, 0.0, 2.0, 16.0, 1.0)])
def test_rows_count_and_pack_as_the_python_does(weights: tuple[float, ...]) -> None:
    rng = random.Random(20261130)
    times = lexical_index.repeats(weights)
    rows = _rows(rng, 3_000, WIDE + WORDS)
    assert _c_pass(rows, times) == _python_pass(rows, times)


def test_thousands_of_terms_and_one_word_in_three_widths() -> None:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(20_000)] + [f"w{i}😀" for i in range(3_000)]
    rows = [
        [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 40))) for _ in range(5)]
        for _ in range(2_000)
    ]
    # "w1" in a one-byte text, a two-byte one and a four-byte one: one term, one id
    rows += [["w1 Ω", "w1 😀", "w1", "", "Ω\u3000w1\x1cw1"]]
    times = [4, 2, 1, 1, 1]
    got = _c_pass(rows, times)
    assert got == _python_pass(rows, times)
    assert len(got[1]) > 10_000


def test_whitespace_only_and_empty_rows() -> None:
    rows = [["", "", "", "", ""], ["".join(SPACES)] * 5, ["a"] + [""] * 4]
    assert _c_pass(rows, [4, 2, 1, 1, 1]) == _python_pass(rows, [4, 2, 1, 1, 1])


def test_bad_arguments_raise_and_count_nothing() -> None:
    counter = compiled.TermCounts()
    with pytest.raises(TypeError, match="column 1 is bytes"):
        counter.add(["a", b"b", "c"], [1, 1, 1])
    with pytest.raises(ValueError):
        counter.add(["a"], [1, 1])
    with pytest.raises(ValueError):
        counter.add(["a"], [-1])
    with pytest.raises(TypeError):
        counter.add(["a"], ["1"])
    assert counter.add(["b b"], [3])[1:] == (2, 6)
    assert "b" in counter.term_ids


def _index_state(db: Path, c_pass: bool) -> dict[str, Any]:
    native.COUNT_TERMS = c_pass
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            conn.execute("BEGIN")
            index = TantivyIndex()
            index.build(conn, 1, bm25.DEFAULT_WEIGHTS)
        finally:
            conn.close()
    finally:
        native.COUNT_TERMS = True
    return index.state()


def test_an_index_built_with_it_is_the_pythons(catalog: Catalog, tmp_path: Path) -> None:
    pytest.importorskip("tantivy")
    kits, _ = bench_toolkits(400)
    catalog.register(kits)
    db = Path(catalog.path)
    assert _index_state(db, True) == _index_state(db, False)
    # FTS5's copy edited by hand: other whitespace, wide words, a row with nothing in it
    rng = random.Random(3)
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM tools_fts_content")]
        for row_id in rng.sample(ids, 60):
            texts = [rng.choice(SPACES).join(rng.choices(WIDE + WORDS, k=6)) for _ in range(5)]
            conn.execute(
                "UPDATE tools_fts_content SET c0 = ?, c1 = ?, c2 = ?, c3 = ?, c4 = ? WHERE id = ?",
                (*texts, row_id),
            )
        conn.execute("UPDATE tools_fts_content SET c2 = NULL, c3 = '' WHERE id = ?", (ids[0],))
    assert _index_state(db, True) == _index_state(db, False)


def test_a_column_that_is_not_text_fails_the_save_in_one_line(catalog: Catalog) -> None:
    pytest.importorskip("tantivy")
    kits, _ = bench_toolkits(30)
    catalog.register(kits)
    with sqlite3.connect(catalog.path) as conn:
        conn.execute(
            "UPDATE tools_fts_content SET c2 = x'00ff'"
            " WHERE id = (SELECT min(id) FROM tools_fts_content)"
        )
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    with pytest.raises(OSError, match="building it failed: column 2 is bytes, not text"):
        lexical_index.save_current(str(catalog.path), bm25.DEFAULT_WEIGHTS)
