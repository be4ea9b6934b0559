"""Fetch the BM25 and embedding rankings of benchmark queries once, for fusion experiments.

For a seeded sample of queries per source (the same sample as ``toolcat eval --max-queries
N``), in the source's own catalog and in the pooled one (all sources' tools), store the top
50 of BM25 and the top ``--depth`` of the embeddings for the request and for each part
``search/split.py`` cuts it into, with each query's relevant tools, plus every catalog's
tokenized FTS5 columns (so fusion signals such as name coverage can be computed offline).
Rankings come from the search engine's own BM25 and vector index (``SearchEngine.bm25``,
``VectorIndex.search``), the ones hybrid mode fuses. scripts/research/tune_fusion.py reads the file.

    python scripts/research/gather_rankings.py OUT.json [BENCH] [--max-queries 600] [--max-tools 0]
    python scripts/research/gather_rankings.py SMALL.json --small
    python scripts/research/gather_rankings.py OUT.json [BENCH] --vectors V.npz --chunks C.npz

``--small`` instead saves the small catalogs and cases of tests/search/test_fusion.py (a clear
semantic match must beat one word of name overlap; a request that names the tool must win),
which scripts/research/tune_fusion.py --small uses to rule fusion settings out.

``--chunks C.npz`` also saves a multi-vector document of every tool: its name with each
sentence of its description (the first six) and with its parameter names, one vector each
(scripts/research/tune_feedback.py --extra C.npz).

``--max-tools N`` (N > 0) cuts a source's own catalog to the sampled queries' gold tools plus
seeded others; the default 0 keeps every tool (the vector cache embeds each tool once across
runs: the first run embeds the ~8,300 pooled tools, a few minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.quality.evaluate import (  # noqa: E402
    Query,
    Source,
    load_source,
    reindex_with_vector_cache,
    source_folders,
)
from toolcat.search.embeddings import MINILM, embedder  # noqa: E402
from toolcat.search.split import split_request  # noqa: E402
from toolcat.store import reader  # noqa: E402
from toolcat.store.reader import Filters  # noqa: E402

LEXICAL_DEPTH = 50
MODEL = MINILM  # the embedding model whose rankings are saved (--model)
EMPTY = {"type": "object", "properties": {}}


def reduced(source: Source, queries: list[Query], limit: int, seed: int) -> Source:
    """The source with at most ``limit`` tools (0: all): every gold tool of ``queries``,
    then seeded random others."""
    tools = source.toolkit.tools
    if limit <= 0 or len(tools) <= limit:
        return source
    gold = {n for q in queries for n in q.relevant}
    keep = [t for t in tools if t.name in gold]
    others = [t for t in tools if t.name not in gold]
    keep += random.Random(seed).sample(others, max(0, limit - len(keep)))
    toolkit = source.toolkit.model_copy(update={"tools": keep})
    return dataclasses.replace(source, toolkit=toolkit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent / "shared" / "bench"))
    parser.add_argument("--max-queries", type=int, default=600)
    parser.add_argument("--max-tools", type=int, default=0)
    parser.add_argument("--depth", type=int, default=100, help="Embedding hits kept.")
    parser.add_argument("--cache", default="vectors.db", help="Vector cache file.")
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--no-pooled", action="store_true")
    parser.add_argument("--small", action="store_true", help="Only the small catalogs' cases.")
    parser.add_argument(
        "--vectors",
        help="Also save the pooled catalog's tool vectors and the query vectors (.npz), for "
        "fusion experiments that re-query the vectors (scripts/research/tune_fusion.py --vectors).",
    )
    parser.add_argument("--chunks", help="Also save every tool's chunk vectors (.npz).")
    parser.add_argument("--model", default=MINILM, help=f"Embedding model (default {MINILM}).")
    args = parser.parse_args()
    global MODEL
    MODEL = args.model
    if args.small:
        Path(args.out).write_text(json.dumps({"own": small_catalogs(args)}))
        return
    sources = []
    samples = {}
    for folder in source_folders(Path(args.bench), args.source):
        source = load_source(folder)
        queries = source.queries
        if len(queries) > args.max_queries:
            queries = random.Random(0).sample(queries, args.max_queries)
        sources.append(reduced(source, queries, args.max_tools, 0))
        samples[source.name] = queries
    cache = Path(args.cache)
    if args.chunks:
        save_chunks(sources, Path(args.chunks))
    vectors = encode(samples)
    out: dict[str, Any] = {"own": {}, "pooled": {}}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_pooled:
            started = time.perf_counter()
            with Catalog(Path(tmp) / "pooled.db", embedding_model=MODEL) as catalog:
                catalog.register(*(s.toolkit for s in sources))
                reindex_with_vector_cache(catalog, cache)
                print(f"pooled catalog: {time.perf_counter() - started:.0f}s", flush=True)
                docs = documents(catalog, pooled=True)
                for source in sources:
                    entry = gather(catalog, source, samples[source.name], vectors, True, args)
                    out["pooled"][source.name] = entry
                out["pooled_docs"] = docs
                out["prefixes"] = {s.name: f"{s.toolkit.name}." for s in sources}
                if args.vectors:
                    save_vectors(catalog, vectors, Path(args.vectors))
                print(f"pooled: {time.perf_counter() - started:.0f}s", flush=True)
        for source in sources:
            started = time.perf_counter()
            with Catalog(Path(tmp) / f"{source.toolkit.name}.db", embedding_model=MODEL) as catalog:
                catalog.register(source.toolkit)
                reindex_with_vector_cache(catalog, cache)
                entry = gather(catalog, source, samples[source.name], vectors, False, args)
                entry["docs"] = documents(catalog, pooled=False)
                out["own"][source.name] = entry
            print(f"{source.name}: {time.perf_counter() - started:.0f}s", flush=True)
    Path(args.out).write_text(json.dumps(out))


def small_catalogs(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.search.test_fusion import CASES, CATALOGS

    from toolcat import Toolkit

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tools in CATALOGS.items():
            queries = [
                Query(id=f"{name}-{i}", text=text, relevant=[tool], split="", any_of=None)
                for i, (catalog, text, tool) in enumerate(CASES)
                if catalog == name
            ]
            toolkit = Toolkit(
                name="team",
                version="1",
                tools=[{"name": n, "description": d, "parameters": EMPTY} for n, d in tools],
            )
            source = Source(name=name, toolkit=toolkit, queries=queries)
            with Catalog(Path(tmp) / f"{name}.db", embedding_model=MODEL) as catalog:
                catalog.register(toolkit)
                catalog.reindex()
                vectors = encode({name: queries})
                entry = gather(catalog, source, queries, vectors, False, args)
                entry["docs"] = documents(catalog, pooled=False)
                out[name] = entry
    return out


def save_vectors(catalog: Catalog, queries: dict[str, Any], path: Path) -> None:
    """The pooled catalog's tool vectors (keyed ``toolkit.name``; a source's own catalog
    holds the same vectors) and every query's and part's vector."""
    import numpy as np

    engine = catalog._search
    conn = catalog._conn
    engine.vectors.refresh(conn, reader.revision(conn), MODEL)
    assert engine.vectors.ids is not None and engine.vectors.matrix is not None
    keys = {r[0]: f"{r[1]}.{r[2]}" for r in conn.execute("SELECT id, toolkit, name FROM tools")}
    texts = list(queries)
    np.savez(
        path,
        tool_keys=np.array([keys[int(i)] for i in engine.vectors.ids]),
        tool_vectors=engine.vectors.matrix[: engine.vectors.tool_rows],
        query_texts=np.array(texts),
        query_vectors=np.stack([queries[t] for t in texts]),
    )


def save_chunks(sources: list[Source], path: Path) -> None:
    """Each tool's name with each description sentence (at most 6) and with its parameter
    names, one vector each, keyed ``toolkit.name`` (a key per vector)."""
    import re

    import numpy as np

    from toolcat.text.tokenize import split_words

    keys, texts = [], []
    for source in sources:
        for tool in source.toolkit.tools:
            name = " ".join(split_words(tool.name))
            sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", tool.description) if s.strip()]
            chunks = [f"{name}: {s.strip()}" for s in sentences[:6]]
            properties = tool.parameters.get("properties") or {}
            if isinstance(properties, dict) and properties:
                chunks.append(f"{name}: " + ", ".join(" ".join(split_words(p)) for p in properties))
            keys += [f"{source.toolkit.name}.{tool.name}"] * len(chunks)
            texts += chunks
    vectors = embedder(MODEL).encode(texts)
    np.savez(path, tool_keys=np.array(keys), tool_vectors=vectors)


def encode(samples: dict[str, list[Query]]) -> dict[str, Any]:
    """Every query's and part's vector, in batches (the same model call search makes)."""
    every = [q for queries in samples.values() for q in queries]
    texts = list(dict.fromkeys(t for q in every for t in [q.text, *split_request(q.text)]))
    model = embedder(MODEL)
    found: dict[str, Any] = {}
    for start in range(0, len(texts), 64):
        chunk = texts[start : start + 64]
        found.update(zip(chunk, model.encode_queries(chunk), strict=True))
    return found


def documents(catalog: Catalog, pooled: bool) -> dict[str, list[str]]:
    """Tool key (id when pooled, else name) -> its tokenized FTS5 columns."""
    conn = catalog._conn
    rows = conn.execute(
        "SELECT t.toolkit, t.name, f.name, f.hint, f.description, f.params, f.tags "
        "FROM tools t JOIN tools_fts f ON f.rowid = t.id"
    ).fetchall()
    return {(f"{r[0]}.{r[1]}" if pooled else r[1]): list(r[2:]) for r in rows}


def gather(
    catalog: Catalog,
    source: Source,
    queries: list[Query],
    vectors: dict[str, Any],
    pooled: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    engine = catalog._search
    conn = catalog._conn
    revision = reader.revision(conn)
    keys = {
        r[0]: (f"{r[1]}.{r[2]}" if pooled else r[2])
        for r in conn.execute("SELECT id, toolkit, name FROM tools")
    }
    engine.vectors.refresh(conn, revision, MODEL)
    prefix = f"{source.toolkit.name}." if pooled else ""

    def ranked(text: str, depth: int) -> dict[str, Any]:
        lexical = engine.bm25(conn, text, Filters(), LEXICAL_DEPTH, revision)
        semantic = engine.vectors.search(vectors[text], depth)
        return {
            "lex": [(keys[i], s) for i, s in lexical],
            "sem": [(keys[i], round(float(s), 5)) for i, s in semantic],
        }

    rows = []
    for q in queries:
        row = {"id": q.id, "text": q.text, "relevant": [prefix + n for n in q.relevant]}
        row.update(ranked(q.text, args.depth))
        row["parts"] = [
            {"text": part, **ranked(part, LEXICAL_DEPTH)} for part in split_request(q.text)
        ]
        if q.any_of is not None:
            row["any_of"] = [[prefix + n for n in g] for g in q.any_of]
        rows.append(row)
    return {"tools": len(source.toolkit.tools), "queries": rows}


if __name__ == "__main__":
    main()
