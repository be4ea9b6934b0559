"""Attacks on a saved BM25 index's first pass in C (``_impacts.TermCounts``, attack55).

The rows it counts are FTS5's copy of the indexed text (``tools_fts_content``): anything a
manifest's author wrote, or anything at all in a hand-edited or damaged catalog file. Its
answers must be the Python first pass's (``TantivyIndex._count_terms``) byte for byte, and
no caller of the type, however odd, may crash the process, corrupt a row, or make it hash
its way into quadratic time.
"""

from __future__ import annotations

import copy
import gc
import itertools
import pickle
import random
import sqlite3
import subprocess
import sys
import threading
import time
from array import array
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, lexical_file, lexical_index, native
from toolcat.search.lexical_index import TantivyIndex, _pack, _weighted

pytest.importorskip("tantivy")
pytestmark = pytest.mark.skipif(native.module() is None, reason="_impacts not compiled")

SRC = str(Path(lexical_index.__file__).resolve().parents[2])
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
# one letter of each kind (1, 2 and 4 bytes a code point), a lone surrogate, NUL, a
# zero-width joiner and a combining mark: none of them whitespace
LETTERS = [
    "a",
    "Z",
    "é",
    "ÿ",
    "Ā",
    "€",
    "ꙮ",
    "\u200d",
    "\u0301",
    "😀",
    "\U0010ffff",
    "\ud800",
    "\x00",
]


def counter() -> Any:
    made = native.term_counts()
    assert made is not None
    return made


def python_counts(rows: list[list[str]], times: list[int]) -> tuple[Any, ...]:
    """What ``TantivyIndex._count_terms`` makes of ``rows``: each row's (packed, length,
    tokens), the term ids and their tool counts as bytes."""
    doc_freq: Counter[str] = Counter()
    term_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    out = []
    for texts in rows:
        weights = [float(t) for t in times]
        length, found, tokens_in = _weighted(list(texts), weights, times, 1.0, True)
        doc_freq.update(found.keys())
        out.append((_pack(length, found, term_ids, "I"), length, tokens_in))
    ids = dict(term_ids)
    return out, ids, array("I", map(doc_freq.__getitem__, ids)).tobytes()


def c_counts(rows: list[list[str]], times: list[int]) -> tuple[Any, ...]:
    made = counter()
    out = [made.add(list(texts), times) for texts in rows]
    return out, made.term_ids, made.doc_freq()


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 8)):
        parts.append("".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 3))))
        parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 2))))
    if rng.random() < 0.5:
        parts.insert(0, rng.choice(WHITESPACE))
    return "".join(parts)


def run_python(code: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    """``code`` in a process of its own (a crash there is an answer, not a dead test run)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )


# -- the same answers as Python ---------------------------------------------------------------


def test_c_counting_matches_python_on_random_unicode_rows() -> None:
    rng = random.Random(55)
    for _ in range(600):
        columns = rng.randint(1, 12)  # past the 8 repeats held without an allocation
        times = [rng.randint(0, 16) for _ in range(columns)]
        rows = [[random_text(rng) for _ in range(columns)] for _ in range(rng.randint(1, 6))]
        assert c_counts(rows, times) == python_counts(rows, times), (rows, times)


@pytest.mark.parametrize("space", WHITESPACE, ids=[f"U+{ord(s):04X}" for s in WHITESPACE])
def test_every_whitespace_python_splits_on_cuts_terms_in_c(space: str) -> None:
    # the same separator in texts of each kind: ASCII, Latin-1, 2 and 4 bytes a code point
    for other in ("", "é", "€", "😀"):
        rows = [[f"x{space}y{space}{space}x{other}", f"{space}y{other}{space}"]]
        assert c_counts(rows, [3, 1]) == python_counts(rows, [3, 1])


def test_a_word_is_one_term_whatever_the_kind_of_its_text() -> None:
    # "café" held in a Latin-1 text, a 2-byte one and a 4-byte one: one term, one id
    rows = [["café"], ["café €"], ["😀 café"], ["café\u3000café"]]
    out, ids, df = c_counts(rows, [1])
    assert (out, ids, df) == python_counts(rows, [1])
    assert ids == {"café": 0, "€": 1, "😀": 2}
    assert array("I", df).tolist() == [4, 1, 1]


def test_str_subclasses_count_as_their_text() -> None:
    class Text(str):
        def split(self, *args: Any) -> list[str]:  # the C reads the characters, not this
            return ["nothing"]

    made = counter()
    got = made.add([Text("alpha beta alpha")], [2])
    assert got == c_counts([["alpha beta alpha"]], [2])[0][0]
    assert all(type(term) is str for term in made.term_ids)


def test_many_distinct_terms_keep_first_seen_ids_as_the_table_grows() -> None:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(120_000)]
    rows = [
        [" ".join(words[i : i + 1000]), " ".join(rng.sample(words[: i + 1000], 50))]
        for i in range(0, len(words), 1000)
    ]
    got = c_counts(rows, [2, 1])
    assert got == python_counts(rows, [2, 1])
    assert list(got[1]) == words


def test_repeats_of_zero_leave_a_column_out_of_the_terms_but_in_the_length() -> None:
    rows = [["only in zero", "seen"], ["seen again", "zero"]]
    out, ids, _ = c_counts(rows, [0, 1])
    assert (out, ids, _) == python_counts(rows, [0, 1])
    assert set(ids) == {"seen", "zero"}
    assert [length for _, length, _ in out] == [4, 3]


@pytest.mark.parametrize(
    ("repeat", "error"),
    [
        (-1, ValueError),
        (65536, ValueError),
        (2**70, OverflowError),
        (1.0, TypeError),
        (None, TypeError),
        ("1", TypeError),
    ],
    ids=["negative", "past-16-bits", "past-64-bits", "float", "none", "text"],
)
def test_a_repeat_out_of_range_or_not_a_number_is_refused(repeat: Any, error: type) -> None:
    with pytest.raises(error):
        counter().add(["a b"], [repeat])


def test_a_term_count_past_32_bits_is_an_overflow_error() -> None:
    # (Python's first pass would list the 4 billion tokens first: build repeats at most 16)
    text = "a " * 65_538  # 65,538 x 65,535 > 2**32 - 1
    with pytest.raises(OverflowError):
        counter().add([text], [65_535])
    # one fewer fits exactly
    packed, _, _ = counter().add(["a " * 65_537], [65_535])
    assert packed[-4:] == (2**32 - 1).to_bytes(4, "little")


@pytest.mark.parametrize(
    "column",
    [b"bytes here", bytearray(b"x"), 7, 1.5, None, ["a"]],
    ids=["bytes", "bytearray", "int", "float", "none", "list"],
)
def test_a_column_that_is_not_text_is_a_type_error(column: Any) -> None:
    with pytest.raises(TypeError):
        counter().add(["name", column], [1, 1])


def test_a_refused_row_leaves_the_counter_as_it_was() -> None:
    made = counter()
    made.add(["one two"], [1])
    for bad, times in (
        (["three four", 5], [1, 1]),
        (["five six", "seven"], [1, -1]),
        (["eight", "nine"], [1, "x"]),
        (["ten"], [1, 1]),
    ):
        with pytest.raises((TypeError, ValueError)):
            made.add(bad, times)
    assert made.add(["two three"], [1]) == c_counts([["one two"], ["two three"]], [1])[0][1]
    assert made.term_ids == {"one": 0, "two": 1, "three": 2}
    assert array("I", made.doc_freq()).tolist() == [1, 2, 1]


# -- callers that run Python code in the middle of a row ---------------------------------------


def test_a_repeat_whose_index_frees_the_texts_does_not_crash() -> None:
    done = run_python(
        "from toolcat.search import _impacts\n"
        "c = _impacts.TermCounts()\n"
        "texts = ['x ' * 10, ''.join('w%d ' % i for i in range(300000))]\n"
        "class Repeat:\n"
        "    def __index__(self):\n"
        "        texts.clear()\n"
        "        return 1\n"
        "packed, length, _ = c.add(texts, [1, Repeat()])\n"
        "print(length)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["300010"]


def test_a_term_ids_key_whose_eq_frees_the_text_does_not_crash() -> None:
    done = run_python(
        "from toolcat.search import _impacts\n"
        "c = _impacts.TermCounts()\n"
        "texts = [''.join(['evil '] + ['w%d ' % i for i in range(300000)])]\n"
        "class Key:\n"
        "    def __hash__(self):\n"
        "        return hash('evil')\n"
        "    def __eq__(self, other):\n"
        "        texts[0] = 'gone'\n"
        "        return False\n"
        "c.term_ids[Key()] = -1\n"
        "packed, length, _ = c.add(texts, [1])\n"
        "print(length)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["300001"]


def test_add_from_inside_add_is_refused_and_the_outer_row_is_right() -> None:
    made = counter()
    inner: list[Any] = []

    class Repeat:
        def __index__(self) -> int:
            try:
                inner.append(made.add(["zz yy xx"], [1]))
            except RuntimeError as e:
                inner.append(e)
            return 1

    got = made.add(["a b c", "d a"], [1, Repeat()])
    assert got == c_counts([["a b c", "d a"]], [1, 1])[0][0]
    assert len(inner) == 1 and isinstance(inner[0], RuntimeError)
    assert made.term_ids == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_term_ids_changed_by_the_caller_do_not_change_the_packed_rows() -> None:
    made = counter()
    first = made.add(["alpha beta"], [1])
    made.term_ids.clear()
    made.term_ids["gamma"] = 99
    made.term_ids[12345] = "not a term"
    rest = [made.add(["gamma alpha"], [2]), made.add(["beta delta"], [1])]
    assert first == c_counts([["alpha beta"]], [1])[0][0]
    fresh = counter()
    fresh.add(["alpha beta"], [1])
    assert rest == [fresh.add(["gamma alpha"], [2]), fresh.add(["beta delta"], [1])]
    assert made.term_ids["gamma"] == 2 and made.term_ids["delta"] == 3


# -- hash flooding ------------------------------------------------------------------------------

FNV_BASIS, FNV_PRIME = 1469598103934665603, 1099511628211


def fnv_colliding_terms(n: int, bits: int) -> list[str]:
    """``n`` two-character terms whose unkeyed FNV-1a hash (as _impacts.c hashed terms
    before attack55: ``h ^= h >> 29`` of FNV-1a from its standard basis) falls in slot 0 of
    every table up to ``2**bits`` slots: each probe of one walked a cluster of the others."""
    np = pytest.importorskip("numpy")
    mask = np.uint64((1 << bits) - 1)
    points = np.arange(0x100000, dtype=np.uint64)
    spaces = np.array([ord(s) for s in WHITESPACE], dtype=np.uint64)
    usable = ~(((points >= 0xD800) & (points <= 0xDFFF)) | np.isin(points, spaces))
    found: list[str] = []
    first = 0x4E00  # CJK ideographs: letters
    while len(found) < n:
        state = np.uint64(((FNV_BASIS ^ first) * FNV_PRIME) % 2**64)
        h = (state ^ points) * np.uint64(FNV_PRIME)
        h ^= h >> np.uint64(29)
        hits = np.nonzero(((h & mask) == 0) & usable)[0]
        found += [chr(first) + chr(int(x)) for x in hits]
        first += 1
    return found[:n]


def _seconds_to_count(words: list[str], rounds: int = 20) -> float:
    text = " ".join(words)
    best = float("inf")
    for _ in range(3):
        made = counter()
        start = time.perf_counter()
        for _ in range(rounds):
            made.add([text], [1])
        best = min(best, time.perf_counter() - start)
    return best


def test_crafted_hash_collisions_cost_no_more_than_other_terms() -> None:
    """8,000 words a manifest could hold, chosen offline to share one slot of the term
    table: with the unkeyed hash each lookup walked all of them (quadratic: 45x slower at
    8,000, ~50x more with each doubling); keyed per process, as Python's dict is, they
    cost what any words do."""
    crafted = fnv_colliding_terms(8000, 14)
    assert len(set(crafted)) == 8000
    rng = random.Random(3)
    plain = list(dict.fromkeys("".join(rng.choices("abcdefghij", k=6)) for _ in range(9000)))
    plain = plain[:8000]
    assert _seconds_to_count(crafted) < 8 * _seconds_to_count(plain)


# -- objects, references, threads ------------------------------------------------------------


def test_a_counter_cannot_be_pickled_or_copied() -> None:
    made = counter()
    made.add(["a b"], [1])
    with pytest.raises(TypeError):
        pickle.dumps(made)
    with pytest.raises(TypeError):
        copy.copy(made)
    with pytest.raises(TypeError):
        type(made)(1)
    with pytest.raises(TypeError):

        class Sub(type(made)):  # type: ignore[misc]
            pass


def test_add_keeps_no_reference_to_its_texts_and_one_to_each_term() -> None:
    texts = ["".join(["alpha beta ", str(i)]) for i in range(3)]
    before = [sys.getrefcount(t) for t in texts]
    made = counter()
    for _ in range(100):
        made.add(texts, [1, 2, 3])
    with pytest.raises(TypeError):
        made.add([*texts[:2], 5], [1, 2, 3])
    assert [sys.getrefcount(t) for t in texts] == before
    term = next(iter(made.term_ids))
    assert sys.getrefcount(term) == 4  # the dict, the C table, ``term``, the call
    ids = made.term_ids
    del made
    gc.collect()
    assert sys.getrefcount(term) == 3 and ids == {"alpha": 0, "beta": 1, "0": 2, "1": 3, "2": 4}


def test_many_counters_and_refused_rows_leak_no_memory() -> None:
    done = run_python(
        "import gc, os\n"
        "from toolcat.search import _impacts\n"
        "def rss():\n"
        "    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"
        "texts = [' '.join('t%d' % i for i in range(200)), 'é ' * 50, '😀 x']\n"
        "def burn(n):\n"
        "    for i in range(n):\n"
        "        c = _impacts.TermCounts()\n"
        "        c.add(texts, [2, 1, 0])\n"
        "        for bad in ([texts[0], b'x', 'y'], [texts[0], 'y', None]):\n"
        "            try:\n"
        "                c.add(bad, [1, 1, 1])\n"
        "            except TypeError:\n"
        "                pass\n"
        "        c.term_ids\n"
        "        c.doc_freq()\n"
        "burn(2000); gc.collect(); first = rss()\n"
        "burn(20000); gc.collect()\n"
        "print((rss() - first) // 2**20)\n",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 8  # MB


def test_two_threads_with_counters_of_their_own_count_as_one_would() -> None:
    rng = random.Random(9)
    rows = [[random_text(rng) for _ in range(3)] for _ in range(1500)]
    expected = c_counts(rows, [4, 2, 1])
    got: list[Any] = [None, None]

    def count(slot: int) -> None:
        got[slot] = c_counts(rows, [4, 2, 1])

    threads = [threading.Thread(target=count, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [expected, expected]


# -- the index built, saved and searched ---------------------------------------------------------


def built_with(conn: sqlite3.Connection, revision: int, in_c: bool) -> TantivyIndex:
    saved = native.COUNT_TERMS
    native.COUNT_TERMS = in_c
    try:
        index = TantivyIndex()
        index.build(conn, revision, bm25.DEFAULT_WEIGHTS)
        return index
    finally:
        native.COUNT_TERMS = saved


def hostile_toolkit() -> Toolkit:
    rng = random.Random(5)
    tools = []
    for i in range(60):
        words = [
            "".join(rng.choice(LETTERS[:10]) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(1, 30))
        ]
        spaces = [rng.choice(WHITESPACE[:-1]) for _ in words]  # not U+3000: kept for the name
        description = "".join(w + s for w, s in zip(words, spaces, strict=True))
        tools.append(Tool(name=f"odd_{i}", description=description or "x", tags=["odd"]))
    return Toolkit(name="odd", version="1", tools=tools)


def test_indexes_counted_in_c_and_in_python_are_the_same(catalog: Catalog) -> None:
    kits, queries = bench_toolkits(600)
    catalog.register([*kits, hostile_toolkit()])
    with catalog._snapshot() as conn:
        in_c = built_with(conn, catalog.revision, True)
        in_python = built_with(conn, catalog.revision, False)
    assert in_c.state() == in_python.state()
    assert list(in_c._term_ids.items()) == list(in_python._term_ids.items())
    rng = random.Random(1)
    odd = [" ".join(rng.sample(t.description.split(), 1)) for t in hostile_toolkit().tools]
    for query in [*queries[:60], *odd]:
        assert in_c.search(query, 10, bm25.MAX_QUERY_TERMS) == in_python.search(
            query, 10, bm25.MAX_QUERY_TERMS
        ), query


def test_catalog_search_is_the_same_from_an_index_saved_by_c_or_python(tmp_path: Path) -> None:
    kits, queries = bench_toolkits(400)
    answers = []
    for in_c in (True, False):
        db = tmp_path / f"{in_c}.db"
        with Catalog(db, create=True) as cat:
            cat.register([*kits, hostile_toolkit(), SAMPLE_TOOLKITS])
        saved = native.COUNT_TERMS
        native.COUNT_TERMS = in_c
        try:
            assert lexical_index.save_current(str(db), bm25.DEFAULT_WEIGHTS) is not None
        finally:
            native.COUNT_TERMS = saved
        with Catalog(db) as cat:
            answers.append(
                [
                    [(h.tool.id, round(h.score, 9)) for h in cat.search(q, k=5, mode="bm25").hits]
                    for q in queries[:40]
                    for _ in range(2)
                ]
            )
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    "damage",
    [
        "c1 = 12345 WHERE id = (SELECT max(id) FROM tools_fts_content)",
        "c2 = 2.5 WHERE id = (SELECT min(id) FROM tools_fts_content)",
        "c0 = x'616263' WHERE id = (SELECT min(id) FROM tools_fts_content)",
        "c3 = -1 WHERE id = (SELECT min(id) FROM tools_fts_content)",
    ],
    ids=["int", "float", "blob-name", "negative"],
)
def test_save_current_on_non_text_content_fails_in_one_oserror_and_leaves_nothing(
    tmp_path: Path, damage: str
) -> None:
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as cat:
        cat.register(SAMPLE_TOOLKITS)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"UPDATE tools_fts_content SET {damage}")
    conn.close()
    for in_c in (True, False):
        saved = native.COUNT_TERMS
        native.COUNT_TERMS = in_c
        try:
            with pytest.raises(OSError, match="building it failed") as raised:
                lexical_index.save_current(str(db), bm25.DEFAULT_WEIGHTS)
        finally:
            native.COUNT_TERMS = saved
        assert "\n" not in str(raised.value)
        root = lexical_file.folder(str(db))
        assert not [p.name for p in root.iterdir() if p.name.startswith(("tantivy-", "data-"))]
        assert not (root / lexical_file.STAMP).exists()


def test_save_current_counts_empty_blobs_zeros_and_nulls_as_empty_text(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as cat:
        cat.register(SAMPLE_TOOLKITS)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE tools_fts_content SET c3 = x'' WHERE id % 3 = 0")
        conn.execute("UPDATE tools_fts_content SET c4 = 0 WHERE id % 3 = 1")
        conn.execute("UPDATE tools_fts_content SET c2 = NULL WHERE id % 3 = 2")
        conn.execute("UPDATE tools_fts_content SET c1 = 0.0 WHERE id % 2 = 0")
    conn.close()
    states = []
    for in_c in (True, False):
        saved = native.COUNT_TERMS
        native.COUNT_TERMS = in_c
        try:
            conn = sqlite3.connect(db)
            conn.execute("BEGIN")
            states.append(built_with(conn, 1, in_c).state())
            conn.close()
        finally:
            native.COUNT_TERMS = saved
    assert states[0] == states[1]


@pytest.mark.slow
def test_huge_and_unusual_text_is_saved_as_python_counts_it(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as cat:
        cat.register(SAMPLE_TOOLKITS)
    rng = random.Random(11)
    huge = " ".join(f"t{i}" for i in range(400_000))  # 400k distinct terms in one row
    unusual = "\x00 \ud7ff\ufeff \u2028x\u2029y\x85z \U000e0001 " * 2000
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE tools_fts_content SET c2 = ? WHERE id = (SELECT min(id) FROM tools)", (huge,)
        )
        conn.execute(
            "UPDATE tools_fts_content SET c3 = ? WHERE id = (SELECT max(id) FROM tools)", (unusual,)
        )
        conn.execute(
            "UPDATE tools_fts_content SET c4 = ? WHERE id % 2 = 1",
            ("".join(rng.choice(LETTERS[:11] + WHITESPACE) for _ in range(300)),),
        )
    conn.close()
    states = []
    for in_c in (True, False):
        conn = sqlite3.connect(db)
        conn.execute("BEGIN")
        states.append(built_with(conn, 1, in_c).state())
        conn.close()
    assert states[0] == states[1]
