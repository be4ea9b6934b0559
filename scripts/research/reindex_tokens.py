"""What reindex's document side holds, in tokens: per ../shared/bench source and for
``bench_scale.py``'s seeded generator, the token counts of the texts reindex encodes
(``embedding_text`` of each stored definition, before truncation), how many pass 128, 192
and 256 tokens, and the token slots (rows x longest) reindex's batching runs at each
truncation against the tokens themselves and against catalog order padded per batch.

Run it again when the embedding text, the retriever's length or reindex's batching changes
(docs/benchmarks.md, "What the document side needs: tokens, padding, truncation").

    python scripts/research/reindex_tokens.py [--generated 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

CAPS = (256, 192, 128)


def token_counts(tokenizer: object, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]  # type: ignore[attr-defined]


def slots(sizes: list[int], order: list[int], batch: int) -> int:
    """Token slots reindex runs: ``order`` cut into batches of ``batch``, each sorted by
    token count and split as ``OnnxEncoder.encode`` splits it (PAD_RATIO, BATCH_TOKENS)."""
    from toolcat.search.encoders.export import BATCH_TOKENS, PAD_RATIO

    total = 0
    for start in range(0, len(order), batch):
        groups: list[list[int]] = []
        for size in sorted(sizes[i] for i in order[start : start + batch]):
            if (
                not groups
                or size > PAD_RATIO * groups[-1][0]
                or (len(groups[-1]) + 1) * size > BATCH_TOKENS
            ):
                groups.append([size])
            else:
                groups[-1].append(size)
        total += sum(max(g) * len(g) for g in groups)
    return total


def padded(sizes: list[int], batch: int) -> int:
    """Token slots of catalog order, each batch padded to its longest."""
    return sum(
        max(sizes[i : i + batch]) * len(sizes[i : i + batch]) for i in range(0, len(sizes), batch)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generated", type=int, default=5000, help="generated tools")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    from tokenizers import Tokenizer

    import bench_scale
    from toolcat import Tool
    from toolcat.models import canonical_json
    from toolcat.quality.evaluate import load_source
    from toolcat.search.embeddings import embedding_text

    tokenizer = Tokenizer.from_file(str(ROOT / "src/toolcat/retriever/tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def stored(tool: Tool) -> str:  # the text reindex makes from the stored definition
        definition = json.loads(canonical_json(tool.model_dump(mode="json", exclude_none=True)))
        return embedding_text(Tool.model_construct(**definition))

    workloads: dict[str, list[str]] = {}
    for folder in sorted((ROOT.parent / "shared" / "bench").iterdir()):
        if (folder / "tools.jsonl").is_file():
            workloads[folder.name] = [stored(t) for t in load_source(folder).toolkit.tools]
    workloads["generated"] = [
        stored(Tool.model_validate(tool))
        for data in bench_scale.generate(args.generated, args.seed)
        for tool in data["tools"]
    ]
    for name, texts in workloads.items():
        full = token_counts(tokenizer, texts)
        ranked = sorted(full)
        row: dict[str, object] = {
            "source": name,
            "texts": len(texts),
            "mean": round(sum(full) / len(full), 1),
            **{f"p{p}": ranked[min(len(ranked) - 1, len(ranked) * p // 100)] for p in (50, 90, 99)},
            "max": ranked[-1],
        }
        by_chars = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for cap in CAPS:
            sizes = [min(n, cap) for n in full]
            tokens = sum(sizes)
            row[f"over_{cap}"] = round(sum(n > cap for n in full) / len(full), 4)
            row[f"tokens_{cap}"] = tokens
            row[f"slots_{cap}"] = round(slots(sizes, by_chars, args.batch_size) / tokens, 3)
            row[f"catalog_order_{cap}"] = round(padded(sizes, args.batch_size) / tokens, 2)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
