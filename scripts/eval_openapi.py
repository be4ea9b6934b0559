"""RestBench retrieval on a catalog built by importing the TMDB and Spotify OpenAPI documents,
beside the same queries on the benchmark's own tool texts.

    python scripts/eval_openapi.py [--shared ../shared] [--modes bm25,hybrid]

Gold tools (``tmdb_get_movie_movie_id_keywords``) are mapped to imported operations by their
``endpoint:METHOD /path`` tag, which is the operation's method and path in the document.
Prints R@1/5/10, nDCG@10 and MRR@10 per mode and corpus, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from toolcat import Catalog
from toolcat.quality.evaluate import _average, load_source, score_query
from toolcat.remote.openapi import parse_implementation

# ../shared beside the checkout (or a worktree's parent): the first ancestor holding it
SHARED = next(
    (p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "openapi").is_dir()),
    Path("../shared"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--modes", default="bm25,hybrid")
    args = parser.parse_args()
    bench = args.shared / "bench" / "restbench"
    documents = args.shared / "openapi"
    gold_endpoint: dict[str, str] = {}
    for line in (bench / "tools.jsonl").read_text().splitlines():
        tool = json.loads(line)
        endpoint = next(t for t in tool["tags"] if t.startswith("endpoint:"))
        gold_endpoint[tool["name"]] = endpoint.removeprefix("endpoint:")
    queries = [json.loads(line) for line in (bench / "queries.jsonl").read_text().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        imported = Catalog(Path(tmp) / "imported.db")
        for name, file in (("tmdb", "tmdb_oas.json"), ("spotify", "spotify_oas.json")):
            imported.register_openapi(documents / file, toolkit=name)
        by_endpoint = {}
        for tool in imported.iter_tools():
            plan = parse_implementation(tool.implementation or "")
            by_endpoint[f"{tool.toolkit}:{plan.method} {plan.path}"] = tool.id
        gold = {
            name: by_endpoint[f"{name.split('_', 1)[0]}:{endpoint}"]
            for name, endpoint in gold_endpoint.items()
        }
        own = Catalog(Path(tmp) / "own.db")
        source = load_source(bench)
        own.register(source.toolkit)
        own_gold = {
            raw: f"{source.toolkit.name}.{mapped}" for raw, mapped in source.name_map.items()
        }
        for catalog in (imported, own):
            catalog.reindex()
        for mode in args.modes.split(","):
            for label, catalog, mapping in (
                ("imported OpenAPI", imported, gold),
                ("benchmark texts", own, own_gold),
            ):
                rows = []
                for q in queries:
                    hits = catalog.search(q["query"], mode=mode, k=10).hits
                    rows.append(
                        score_query(
                            [h.tool.id for h in hits], [[mapping[g]] for g in q["relevant"]]
                        )
                    )
                print(json.dumps({"corpus": label, "mode": mode, **_average(rows)}))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
