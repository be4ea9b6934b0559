"""One revision, one ranking: a fresh process (its first BM25 query asks FTS5) and a warm
one (the in-memory index, built in the query or in the background) give the same hits with
the same scores. A restarted replica answers with the first while its peers answer with the
second, behind one balancer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.search import engine

QUERIES = [
    "read a file",
    "add two numbers",
    "convert a time zone",
    "delete the file",
    "count the words in a text",
    "files files files read write",
    "statistics mean median of numbers and unit conversion",
    "zzz-not-a-word",
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rank") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def warm_hits(
    db: Path, background: bool, monkeypatch: pytest.MonkeyPatch
) -> dict[str, list[tuple[str, float]]]:
    """Each query's (id, score) list from a catalog whose BM25 index is built."""
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 0 if background else 10**9)
    with Catalog(db) as warm:
        for _ in range(engine.POSTINGS_AFTER):
            warm.search("warm up", mode="bm25")
        searcher = warm._search
        searcher.postings.wait(60)
        assert searcher.postings.at(warm.revision, engine.bm25.DEFAULT_WEIGHTS) is not None
        return {
            q: [(h.tool.id, h.score) for h in warm.search(q, k=10, mode="bm25").hits]
            for q in QUERIES
        }


@pytest.mark.parametrize("background", [False, True], ids=["built-in-query", "background"])
def test_a_fresh_catalog_ranks_as_a_warm_one(
    db: Path, background: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm = warm_hits(db, background, monkeypatch)
    for query in QUERIES:
        with Catalog(db) as fresh:  # its first query: FTS5
            hits = [(h.tool.id, h.score) for h in fresh.search(query, k=10, mode="bm25").hits]
        assert hits == warm[query], query


def test_a_fresh_process_ranks_as_a_warm_one(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warm = warm_hits(db, True, monkeypatch)
    for query in QUERIES[:4]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolcat",
                "--db",
                str(db),
                "search",
                query,
                "--mode",
                "bm25",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        hits = [(h["tool"]["id"], h["score"]) for h in json.loads(done.stdout)["hits"]]
        assert hits == [(tool, round(score, 6)) for tool, score in warm[query]], query
