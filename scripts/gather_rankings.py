"""Fetch the BM25 and embedding rankings of benchmark queries once, for fusion experiments.

For a seeded sample of queries per source (own catalog, or the pooled one), store the top 50
of ``bm25`` and the top 300 of ``embedding`` (tool name or id, score) through the public
search API, with each query's relevant tools. scripts/tune_fusion.py reads the file.

    python scripts/gather_rankings.py OUT.json [--max-queries 600] [--pooled] [BENCH]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat import Catalog  # noqa: E402
from toolcat.evaluate import load_source, source_folders  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--max-queries", type=int, default=600)
    parser.add_argument("--pooled", action="store_true")
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("bench", nargs="?", default=str(ROOT.parent.parent / "shared" / "bench"))
    args = parser.parse_args()
    sources = [load_source(f) for f in source_folders(Path(args.bench), args.source)]
    with tempfile.TemporaryDirectory() as tmp:
        # Every catalog embeds the same tools: embed them once, in the pooled catalog, and
        # copy the vectors into each source's own catalog.
        started = time.perf_counter()
        pooled = Catalog(Path(tmp) / "pooled.db")
        pooled.register(*(s.toolkit for s in sources))
        pooled.reindex()
        print(f"pooled catalog embedded in {time.perf_counter() - started:.0f}s", flush=True)
        for pooled_run in [False, True] if args.pooled else [False]:
            out = gather(args, sources, tmp, pooled if pooled_run else None)
            name = args.out.replace(".json", ".pooled.json") if pooled_run else args.out
            Path(name).write_text(json.dumps(out))
        pooled.close()


def gather(args: argparse.Namespace, sources: list, tmp: str, pooled: Catalog | None) -> dict:
    out: dict[str, object] = {}
    if True:
        for source in sources:
            started = time.perf_counter()
            queries = source.queries
            if len(queries) > args.max_queries:
                queries = random.Random(0).sample(queries, args.max_queries)
            prefix = f"{source.toolkit.name}." if pooled is not None else ""
            catalog = pooled
            if catalog is None:
                catalog = Catalog(Path(tmp) / f"{source.toolkit.name}.db")
                catalog.register(source.toolkit)
                conn = catalog._conn
                conn.execute("ATTACH DATABASE ? AS pooled", (str(Path(tmp) / "pooled.db"),))
                conn.execute("INSERT OR IGNORE INTO embeddings SELECT * FROM pooled.embeddings")
                conn.execute(
                    "INSERT OR REPLACE INTO meta SELECT * FROM pooled.meta "
                    "WHERE key IN ('embedding_model', 'embedding_dim')"
                )
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
                conn.execute("DETACH DATABASE pooled")
                catalog.reindex()  # prunes the other sources' vectors
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
            out[source.name] = {"tools": len(source.toolkit.tools), "queries": rows}
            if pooled is None:
                catalog.close()
            print(f"{source.name}: {len(rows)} in {time.perf_counter() - started:.0f}s", flush=True)
    return out


if __name__ == "__main__":
    main()
