"""Embedding and hybrid search with the real model (the packaged retriever, the default)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, SAMPLE_TOOLKITS, toolkit_data
from toolcat import Catalog, Toolkit
from toolcat.errors import EmbeddingError

pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sample catalog with vectors, built once for the module (copied per test)."""
    path = tmp_path_factory.mktemp("indexed") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        report = catalog.reindex(batch_size=16)
        assert (report.embedded, report.skipped, report.dimension) == (38, 0, 384)
    return path


@pytest.fixture
def catalog(indexed: Path, tmp_path: Path) -> Iterator[Catalog]:
    path = tmp_path / "catalog.db"
    shutil.copy(indexed, path)
    with Catalog(path) as cat:
        yield cat


def test_embedding_search_finds_by_meaning(catalog: Catalog) -> None:
    hits = catalog.search("erase an old document", mode="embedding", k=3).hits
    assert hits[0].tool.id == "files.delete_file"
    assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0
    hits = catalog.search("what hour is it in Tokyo", mode="embedding", k=3).hits
    assert hits[0].tool.id == "time.current_time"


def test_hybrid_is_the_default_once_vectors_exist(catalog: Catalog, tmp_path: Path) -> None:
    result = catalog.search("rename a file")
    assert result.mode == "hybrid" and result.warnings == []
    assert result.hits[0].tool.id == "files.move_file"
    with Catalog(tmp_path / "fresh.db") as fresh:
        fresh.register(SAMPLE_TOOLKITS)
        assert fresh.search("rename a file").mode == "bm25"


def test_filters_apply_before_embedding_ranking(catalog: Catalog) -> None:
    hits = catalog.search("erase an old document", mode="embedding", tags=["math"], k=50).hits
    assert hits and all("math" in h.tool.tags for h in hits)
    hits = catalog.search("erase", mode="hybrid", include_deferred=False, k=50).hits
    assert hits and not any(h.tool.defer_loading for h in hits)


def test_reindex_embeds_only_what_changed(catalog: Catalog) -> None:
    assert catalog.reindex().embedded == 0
    data = toolkit_data()
    catalog.register(Toolkit.model_validate(data))
    report = catalog.reindex()
    assert (report.embedded, report.skipped) == (2, 38)
    data["version"] = "1.1.0"
    data["tools"][1]["description"] = "Temperature and wind right now."
    catalog.register(Toolkit.model_validate(data))
    assert catalog.reindex().embedded == 1  # the unchanged tool keeps its vector
    catalog.remove("weather")
    report = catalog.reindex()
    assert (report.embedded, report.removed) == (0, 3)
    count = catalog._conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    assert count == 38


def test_missing_vectors_are_reported(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data()))
    result = catalog.search("weather forecast", mode="hybrid")
    assert "2 of 40 active tools have no vector" in result.warnings[0]
    assert "toolcat reindex" in result.warnings[0]
    assert "weather" in {h.tool.toolkit for h in result.hits}  # still found, by BM25
    assert "cannot be found" in catalog.search("forecast", mode="embedding").warnings[0]


def test_model_mismatch_and_unknown_model(catalog: Catalog) -> None:
    with Catalog(catalog.path, embedding_model="some/other-model") as other:
        with pytest.raises(EmbeddingError, match="reindex --model some/other-model"):
            other.search("delete", mode="embedding")
        with pytest.raises(EmbeddingError, match="cannot load embedding model"):
            other.reindex()
    assert catalog.search("delete", mode="embedding").hits  # nothing changed


def test_status_reports_coverage(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data()))
    status = catalog.status()
    assert status["coverage"]["embedding"] == {"indexed": 38, "of": 40}
    assert status["coverage"]["bm25"] == {"indexed": 40, "of": 40}
    assert (status["embedding_model"], status["embedding_dim"]) == (
        "toolcat-tool-retriever-v1",
        384,
    )
    assert status["default_mode"] == "hybrid"


def test_full_reindex_rebuilds_everything(catalog: Catalog) -> None:
    catalog._conn.execute("DELETE FROM tools_fts WHERE rowid IN (SELECT min(rowid) FROM tools_fts)")
    report = catalog.reindex(full=True)
    assert (report.embedded, report.fts_rebuilt) == (38, 38)


KILL_SCRIPT = """
import os, signal, sys
from toolcat import Catalog
catalog = Catalog(sys.argv[1])
def progress(done, total):
    if done >= 8:
        os.kill(os.getpid(), signal.SIGKILL)
catalog.reindex(batch_size=4, progress=progress)
"""


def test_reindex_killed_midway_resumes(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    child = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(path)], cwd=ROOT, capture_output=True
    )
    assert child.returncode == -signal.SIGKILL
    with Catalog(path) as catalog:
        # batches of 4, run shortest and longest in turn (4, 2, 4, ...): killed after 10
        assert catalog.status()["coverage"]["embedding"] == {"indexed": 10, "of": 38}
        assert catalog.search("delete file", mode="bm25").hits  # consistent and usable
        report = catalog.reindex()
        assert (report.embedded, report.skipped) == (28, 10)


def test_interrupted_reindex_keeps_committed_batches(catalog: Catalog, tmp_path: Path) -> None:
    with Catalog(tmp_path / "int.db") as fresh:
        fresh.register(SAMPLE_TOOLKITS)

        def interrupt(done: int, total: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            fresh.reindex(batch_size=5, progress=interrupt)
        assert fresh.status()["coverage"]["embedding"]["indexed"] == 5
        assert fresh.reindex().embedded == 33


def test_cli_reindex_status_and_modes(catalog: Catalog) -> None:
    env = {**os.environ}
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "toolcat", "--db", str(catalog.path), *a],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    catalog.register(Toolkit.model_validate(toolkit_data()))
    out = run("reindex", "--batch-size", "1")
    # the rate counts from the first stored batch; the last line says what is left
    assert re.search(r"^embedded 2/2 \(\d+ tools/s, ETA 0:00:00\)$", out.stderr, re.M)
    assert "embedded 2, skipped 38" in out.stdout
    assert json.loads(run("status", "--json").stdout)["coverage"]["embedding"]["indexed"] == 40
    hits = json.loads(
        run("search", "erase an old document", "--mode", "embedding", "--json").stdout
    )["hits"]
    assert hits[0]["tool"]["id"] == "files.delete_file"


@pytest.mark.parametrize("mode", ["embedding", "hybrid"])
def test_odd_queries_in_vector_modes(catalog: Catalog, mode: str) -> None:
    long_query = ("find the tool that converts kilometres to miles please " * 200)[:10_240]
    assert catalog.search(long_query, mode=mode, k=3).hits[0].tool.id == "math.convert_units"
    odd = catalog.search('"); DROP TABLE tools; -- 🙂', mode=mode)
    assert odd.hits is not None and odd.mode == mode and len(odd.hits) == 10
    assert catalog.list(include_deferred=True, limit=1000).tools  # the table is still there
    empty = catalog.search("", mode=mode, k=5)
    assert [h.tool.id for h in empty.hits] == [t.id for t in catalog.list(limit=5).tools]


def test_equal_vectors_rank_in_id_order_whatever_order_sqlite_reads_them(
    catalog: Catalog,
) -> None:
    """The matrix is filled in the order SQLite finds the rows (by toolkit and name, not by
    id); the ranking must not depend on it: tools as close as each other keep the lower id
    (the one registered first) first, as when the rows were read sorted."""
    tools = [
        {"name": name, "description": f"Look up the {word} of a postal parcel."}
        for name, word in [("zulu_track", "route"), ("alpha_track", "status")]
    ]
    catalog.register(Toolkit.model_validate(toolkit_data("parcels", tools=tools)))
    catalog.reindex()
    conn = catalog._conn
    ids = dict(conn.execute("SELECT name, id FROM tools WHERE toolkit = 'parcels'").fetchall())
    assert ids["zulu_track"] < ids["alpha_track"]  # registered first, read second
    hashes = dict(
        conn.execute("SELECT name, content_hash FROM tools WHERE toolkit = 'parcels'").fetchall()
    )
    conn.execute(  # alpha_track gets zulu_track's vector: a tie
        "UPDATE embeddings SET vector = (SELECT vector FROM embeddings WHERE content_hash = ?) "
        "WHERE content_hash = ?",
        (hashes["zulu_track"], hashes["alpha_track"]),
    )
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    hits = catalog.search("where is my parcel", mode="embedding", toolkit="parcels", k=2).hits
    assert catalog._search.vectors.order is not None  # the rows were read out of id order
    assert [h.tool.name for h in hits] == ["zulu_track", "alpha_track"]
    assert hits[0].score == hits[1].score


def test_embedding_text_includes_parameter_names_and_descriptions() -> None:
    """The document text holds each parameter's name, description and enum values, nested
    ones too (without them embedding mode fell below a plain MiniLM: issue 22)."""
    from toolcat.models import Tool
    from toolcat.search.embeddings import embedding_text

    tool = Tool.model_validate(
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "Name of the town"},
                    "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "where": {
                        "type": "object",
                        "properties": {"lat": {"description": "Latitude in degrees"}},
                    },
                },
            },
        }
    )
    text = embedding_text(tool)
    assert text.startswith("get weather: Current weather for a city.")
    for part in ("city", "Name of the town", "units", "celsius fahrenheit", "Latitude in degrees"):
        assert part in text
