"""Attacks on BM25's native ranking in C (``_impacts.Index.best`` and ``held``, the common
terms spared): each test failed on the code before its fix."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import toolcat
from tests.search.test_lexical_index import built
from tests.search.test_native import every_tool_scored, impacts, make, pack
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog
from toolcat.search import bm25, lexical_index, native
from toolcat.search.lexical_index import K1, B

pytest.importorskip("tantivy")
pytestmark = pytest.mark.skipif(native.module() is None, reason="_impacts not compiled")


def norm(length: int) -> float:
    return 2.0 * K1 * (1 - B + B * length / 10.0)  # ``make``'s scale 2 and avgdl 10


def test_tools_of_spared_terms_alone_are_not_left_out_when_those_add_nothing() -> None:
    """A spared term whose largest impact is 0 (a forged save's counts of 0) made the
    spared bound 0, and an answer with every candidate scored was taken as certified: the
    tools holding spared terms alone were left out, though they belong among fewer than k
    candidates, or tied at 0 with lower row ids. Scoring every tool answers them."""
    tools = {
        1: pack(3, [(0, 0)]),
        2: pack(3, [(0, 0)]),
        3: pack(3, [(0, 0), (1, 1)]),  # the only tool holding the rare term
        9: pack(3, [(0, 0), (2, 0)]),  # the other rare term, with a count of 0 too
    }
    index = make(tools, [1.0, 2.0, 3.0])
    rare = 2.0 * 1 / (1 + norm(3))
    for spare_above in (-1, 0, 1):
        hits, rounds, _ = index.best([1, 0], 3, 3, 3, 0.0, spare_above)
        if rounds:
            assert hits == [(3, rare), (1, 0.0), (2, 0.0)], spare_above
        # every score 0: the lowest row id first (FTS5's order), not the candidate's
        hits, rounds, _ = index.best([2, 0], 1, 1, 1, 0.0, spare_above)
        if rounds:
            assert hits == [(1, 0.0)], spare_above
    # certified all the same when the k-th score is above 0, and not asked again
    hits, rounds, _ = index.best([1, 0], 1, 1, 10, 0.0, 0)
    assert rounds and hits == [(3, rare)]


def test_a_query_of_terms_no_tool_holds_spares_nothing() -> None:
    """No query term held by any tool (a term of tools since taken out): the rarest held
    term was none (-1), and ``ids[-1]`` was read before the query's ids (AddressSanitizer:
    heap-buffer-overflow in ``Index_best``; passes on the code before too without it: the
    byte read changed nothing). The answer: nothing, certified."""
    index = make({1: pack(3, [(0, 1)])}, [1.0, 2.0, 3.0])
    for spare_above in (0, 5):
        assert index.best([1, 2, -1, 7], 5, 5, 5, 0.0, spare_above) == ([], 1, 0)


def run_alone(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a Python of its own (a crash there is a failed assertion here)."""
    prelude = textwrap.dedent(
        """
        import struct
        from array import array
        from toolcat.search import native

        def pack(length, pairs):
            return (
                struct.pack("I", length)
                + array("I", [t for t, _ in pairs]).tobytes()
                + array("I", [c for _, c in pairs]).tobytes()
            )

        tools = {row: pack(3, [(0, 1), (1, 2)]) for row in range(100)}
        index = native.module().Index(tools, "I", array("d", [1.0, 2.0]), 1.0, 1.2, 0.75, 3.0)
        """
    )
    package_root = os.path.dirname(os.path.dirname(toolcat.__file__))  # this toolcat's
    path = os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_rows_and_labels_emptied_while_read_do_not_crash() -> None:
    """``held`` read its rows and labels in place, a borrowed item at a time: a row id's
    ``__index__`` or a label's ``__hash__`` emptying the list made the next read one past
    its end (a segmentation fault). A copy is read: the answer is of the rows as passed."""
    got = run_alone(
        """
        class Emptying:
            def __init__(self, items):
                self.items = items
            def __index__(self):
                self.items.clear()
                return 5
            def __hash__(self):
                self.items.clear()
                return 1

        rows = []
        rows.extend([Emptying(rows), 7, 10**6])
        assert index.held([0, 1], rows, ["a", "b"]) == [{"a", "b"}, {"a", "b"}, None]
        labels = []
        first = Emptying(labels)
        labels.extend([first, "b"])
        assert index.held([0, 1], [1, 2], labels) == [{first, "b"}, {first, "b"}]
        print("answered")
        """
    )
    assert got.returncode == 0 and "answered" in got.stdout, got.stderr[-2000:]


def test_a_row_id_that_is_not_an_int_is_refused_before_it_runs() -> None:
    """A row id of the packed tools read through ``__index__`` ran Python code between
    taking a blob from the dict and holding it: one that took its own blob out of the dict
    left a freed blob in the index (a segmentation fault). Row ids are ints."""
    got = run_alone(
        """
        class Taking:
            def __index__(self):
                tools.pop(self)
                for i in range(1000):
                    tools[1000 + i] = b"\\xff" * 2000  # the freed blob's memory reused
                return 5
            def __hash__(self):
                return 99

        tools = {row: pack(3, [(0, 1)]) for row in range(3)}
        tools[Taking()] = pack(3, [(0, 1)]) + bytes(500)
        try:
            native.module().Index(tools, "I", array("d", [1.0]), 1.0, 1.2, 0.75, 3.0)
        except TypeError as e:
            print("refused:", e)
        """
    )
    assert got.returncode == 0 and "refused: a row id must be an int" in got.stdout, got.stderr[
        -2000:
    ]


def compensated(values: Any, start: Any = 0) -> Any:
    """Python 3.12's ``sum`` of floats (gh-100425: Neumaier's compensated sum)."""
    values = list(values)
    if not values or not all(type(v) is float for v in values):
        return builtins.sum(values, start)
    total, compensation = float(start), 0.0
    for value in values:
        moved = total + value
        if abs(total) >= abs(value):
            compensation += (total - moved) + value
        else:
            compensation += (value - moved) + total
        total = moved
    return total + compensation


def test_exact_scores_are_the_native_stages_on_python_3_12(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_score`` summed a tool's contributions with ``sum``, which from Python 3.12 adds
    floats with compensation, while C (``best``) and FTS5's bm25() add them left to right:
    a filter's tools scanned (``_scan``) or tantivy's candidates rescored got other scores
    (an ulp apart) and other ties than the native stage's, on the same index. 3.12's
    ``sum`` is simulated here (this venv is 3.11)."""
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    monkeypatch.setattr(lexical_index, "sum", compensated, raising=False)
    checked = 0
    for query in queries[:120]:
        terms = index.terms(query, bm25.MAX_QUERY_TERMS)
        if len(terms) >= 3:
            assert index.rank(terms, 10) == every_tool_scored(index, terms, 10), query
            checked += 1
    assert checked > 50


def test_common_terms_are_spared_only_for_a_short_top(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sparing a query's common terms pays for a top 10 and costs for a deeper one, whose
    k-th score the spared terms' largest impacts keep from certifying until many more
    candidates are scored, or never (asked again): hybrid's BM25 depth of 50 cost 1.60x
    never sparing at 100k tools, a top 100 1.90x at 100k and 1.36x at 1M. A top deeper
    than ``SPARE_MOST_K`` is ranked with every term at once."""
    from tests.search.test_native import spare_everywhere

    spare_everywhere(monkeypatch)
    kits, queries = bench_toolkits(600)
    catalog.register(kits)
    index = built(catalog)
    impacts(index)
    long_queries = [
        t for t in (index.terms(q, bm25.MAX_QUERY_TERMS) for q in queries) if len(t) > 3
    ]
    for terms in long_queries[:40]:
        for k in (lexical_index.SPARE_MOST_K + 1, 50, 100):
            assert index.rank(terms, k) == every_tool_scored(index, terms, k)
    assert not index.spared  # not one spared
    for terms in long_queries[:40]:
        assert index.rank(terms, 10) == every_tool_scored(index, terms, 10)
    assert sum(index.spared.values()) > 20
