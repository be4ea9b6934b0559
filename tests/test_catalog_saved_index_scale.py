"""At 100k tools: registering returns with the BM25 index saved at the new revision, and a
fresh process that loads it ranks exactly as a warm process that built its own (ids and
scores, a few hundred seeded queries); so does the index a small write then brought forward
instead of building it again."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT
from toolcat import Catalog
from toolcat.search import engine, lexical_file

pytestmark = pytest.mark.slow
pytest.importorskip("tantivy")

SIZE = 100_000
QUERIES = 300


def bench_scale() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_scale", ROOT / "scripts" / "bench_scale.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.BENCH.is_dir():
        pytest.skip("../shared/bench is not here")
    return module


# A fresh process: its index loaded from the save (a build would fail it).
FRESH = """
import json, sys
from toolcat import Catalog
from toolcat.search import engine
from toolcat.search.lexical_index import TantivyIndex

def refused(*args, **kwargs):
    raise AssertionError("built, not loaded")

TantivyIndex.build = refused
queries = json.loads(sys.stdin.read())
with Catalog(sys.argv[1]) as catalog:
    for _ in range(engine.POSTINGS_AFTER):
        catalog.search("warm up", mode="bm25")
    catalog._search.postings.wait(600)
    assert catalog._search.postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS)
    loaded = [[[h.tool.id, h.score] for h in catalog.search(q, mode="bm25").hits] for q in queries]
print(json.dumps(loaded))
"""


def test_registering_100k_tools_leaves_the_index_saved_and_ranking_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scale = bench_scale()
    path = tmp_path / "scale.db"
    with Catalog(path) as catalog:
        scale.register_generated(catalog, SIZE)  # in a bulk() block: saved once, at its end
        revision = catalog.revision
        with catalog._snapshot() as conn:
            valid_for = lexical_file.stamp(conn, revision, engine.bm25.DEFAULT_WEIGHTS)
    assert valid_for["rows"] == SIZE
    assert lexical_file.load(str(path), valid_for) is not None  # at this revision, whole

    import random

    queries = scale.queries(random.Random(scale.SEED), QUERIES)
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)  # built here, in memory
    built = warm_answers(path, revision, queries)
    assert sum(map(len, built)) > QUERIES * 5  # the queries find tools
    assert fresh_answers(path, queries) == built
    assert_brought_forward_alike(scale, path, queries)


def warm_answers(path: Path, revision: int, queries: list[str]) -> list[Any]:
    """A warm process's answers, its index built in memory (``BACKGROUND_BUILD_FROM``)."""
    with Catalog(path) as warm:
        for _ in range(engine.POSTINGS_AFTER):
            warm.search("warm up", mode="bm25")
        assert warm._search.postings.at(revision, engine.bm25.DEFAULT_WEIGHTS)
        assert warm.revision == revision
        return [[[h.tool.id, h.score] for h in warm.search(q, mode="bm25").hits] for q in queries]


def fresh_answers(path: Path, queries: list[str]) -> Any:
    """A fresh process's answers from the saved index (``FRESH``: a build fails it)."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(path)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def assert_brought_forward_alike(scale: Any, path: Path, queries: list[str]) -> None:
    """A write of one toolkit and the removal of another: the saved index is brought
    forward (tantivy's part kept), and a fresh process loading it ranks as a new build."""
    from toolcat import Toolkit

    before = json.loads((lexical_file.folder(str(path)) / lexical_file.STAMP).read_text())
    with Catalog(path) as catalog:
        names = [n for (n,) in catalog._conn.execute("SELECT name FROM toolkits LIMIT 2")]
        manifest = next(iter(scale.generate(200)))
        catalog.register(Toolkit.model_validate({**manifest, "toolkit": "brought_forward"}))
        catalog.remove(names[0])
        revision = catalog.revision
    after = json.loads((lexical_file.folder(str(path)) / lexical_file.STAMP).read_text())
    assert after["revision"] == revision and after["tantivy"] == before["tantivy"]
    assert after["meta"]["delta"] > 0
    assert fresh_answers(path, queries) == warm_answers(path, revision, queries)
