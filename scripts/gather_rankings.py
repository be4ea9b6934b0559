"""Fetch the BM25 and embedding rankings of benchmark queries once, for fusion experiments.

For a seeded sample of queries per source, in the source's own catalog and in the pooled one,
store the top 50 of ``bm25`` and the top 300 of ``embedding`` (tool name or id, score)
through the public search API, with each query's relevant tools (OUT.json and
OUT.pooled.json). Sources with more than ``--max-tools`` tools keep every gold tool of the
sampled queries plus seeded random others. scripts/tune_fusion.py reads the files.

    python scripts/gather_rankings.py OUT.json [BENCH] [--max-queries 300] [--max-tools 800]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.evaluate import Query, Source, load_source, source_folders  # noqa: E402
from toolcat.search.embeddings import DEFAULT_MODEL  # noqa: E402

VECTOR_CACHE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS embeddings (content_hash TEXT NOT NULL, model TEXT NOT NULL, "
    "vector BLOB NOT NULL, PRIMARY KEY (content_hash, model))"
)


def with_cached_vectors(catalog: Catalog, cache: Path) -> None:
    """Reindex, taking vectors from ``cache`` (a file of content-hash keyed vectors) first
    and putting the new ones back: the same tool is embedded once across runs."""
    conn = catalog._conn
    with sqlite3.connect(cache) as db:
        db.execute(VECTOR_CACHE_SCHEMA)
    conn.execute("ATTACH DATABASE ? AS cache", (str(cache),))
    conn.execute(
        "INSERT OR IGNORE INTO embeddings SELECT c.* FROM cache.embeddings c "
        "WHERE c.content_hash IN (SELECT content_hash FROM tools)"
    )
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?), "
        "('embedding_dim', 384)",
        (DEFAULT_MODEL,),
    )
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    conn.execute("DETACH DATABASE cache")
    catalog.reindex()
    conn.execute("ATTACH DATABASE ? AS cache", (str(cache),))
    conn.execute("INSERT OR IGNORE INTO cache.embeddings SELECT * FROM main.embeddings")
    conn.execute("DETACH DATABASE cache")


def reduced(source: Source, queries: list[Query], limit: int, seed: int) -> Source:
    """The source with at most ``limit`` tools: every gold tool of ``queries``, then seeded
    random others (embedding 8,300 tools does not fit this machine's time)."""
    tools = source.toolkit.tools
    if len(tools) <= limit:
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
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent.parent / "shared" / "bench"))
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument("--max-tools", type=int, default=800)
    parser.add_argument("--cache", default="vectors.db", help="Vector cache file.")
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--no-pooled", action="store_true")
    args = parser.parse_args()
    sources = []
    samples = {}
    for folder in source_folders(Path(args.bench), args.source):
        source = load_source(folder)
        queries = source.queries
        if len(queries) > args.max_queries:
            queries = random.Random(0).sample(queries, args.max_queries)
        source = reduced(source, queries, args.max_tools, 0)
        sources.append(source)
        samples[source.name] = queries
    cache = Path(args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        own: dict[str, Any] = {}
        catalogs = {}
        for source in sources:
            started = time.perf_counter()
            catalog = catalogs[source.name] = Catalog(Path(tmp) / f"{source.toolkit.name}.db")
            catalog.register(source.toolkit)
            with_cached_vectors(catalog, cache)
            own[source.name] = gather(catalog, source, samples[source.name], "")
            print(f"{source.name}: {time.perf_counter() - started:.0f}s", flush=True)
        # "Nothing fits": each source's queries in the next source's catalog (no right answer).
        for source, other in zip(sources, sources[1:] + sources[:1], strict=True):
            if other is not source:
                found = gather(catalogs[other.name], other, samples[source.name], "")
                own[source.name]["foreign"] = found["queries"]
        for catalog in catalogs.values():
            catalog.close()
        Path(args.out).write_text(json.dumps(own))
        if args.no_pooled:
            return
        pooled: dict[str, object] = {}
        with Catalog(Path(tmp) / "pooled.db") as catalog:
            catalog.register(*(s.toolkit for s in sources))
            with_cached_vectors(catalog, cache)
            for source in sources:
                prefix = f"{source.toolkit.name}."
                pooled[source.name] = gather(catalog, source, samples[source.name], prefix)
        Path(args.out.replace(".json", ".pooled.json")).write_text(json.dumps(pooled))


def gather(catalog: Catalog, source: Source, queries: list[Query], prefix: str) -> dict:
    rows = []
    for q in queries:
        lists = []
        for mode, depth in (("bm25", 50), ("embedding", 300)):
            hits = catalog.search(q.text, mode=mode, k=depth).hits
            lists.append([(h.tool.id if prefix else h.tool.name, h.score) for h in hits])
        rows.append(
            {
                "id": q.id,
                "text": q.text,
                "relevant": [prefix + n for n in q.relevant],
                "lex": lists[0],
                "sem": lists[1],
            }
        )
    return {"tools": len(source.toolkit.tools), "queries": rows}


if __name__ == "__main__":
    main()
