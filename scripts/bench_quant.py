"""Measure int8 variants of the query encoder against the fp32 export.

Each variant is made from the current ONNX export (``toolcat reindex`` makes it) with
``onnxruntime.quantization``, saved as onnxruntime optimises it (as reindex saves the fp32
graph) and loaded with optimisation off. For each: cosine of its query vectors to the fp32
ones on benchmark queries, and per-query encode time for short (first 8 words) and whole
queries, one query per run on one thread, interleaved with fp32 in the same run. With
``--eval``, each variant also encodes the queries of ``toolcat eval`` (tool vectors stay
fp32) and the rows are printed beside fp32's.

    python scripts/bench_quant.py [--variants NAME...] [--queries 300] [--eval]
        [--max-queries 200]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from toolcat.search import embeddings  # noqa: E402
from toolcat.search.embeddings import MINILM, model_location  # noqa: E402
from toolcat.search.encoders import export as exports  # noqa: E402
from toolcat.search.encoders import onnx as onnx_encoder  # noqa: E402

BENCH = ROOT.parent / "shared" / "bench"
# Which weight MatMuls a variant quantises (node names of the export).
PATTERNS = {
    "weights": re.compile(r"/(query|key|value|dense)/MatMul$"),
    "ffn": re.compile(r"/(intermediate|layer\.\d+/output)/dense/MatMul$"),
    "attention": re.compile(r"/(query|key|value|attention/output/dense)/MatMul$"),
    "attention-no-value": re.compile(r"/(query|key|attention/output/dense)/MatMul$"),
}


def weight_matmuls(graph: Any, pattern: re.Pattern[str]) -> list[str]:
    """Names of the MatMul nodes whose second input is a weight and whose name matches."""
    inits = {i.name for i in graph.initializer}
    return [
        n.name
        for n in graph.node
        if n.op_type == "MatMul" and n.input[1] in inits and pattern.search(n.name)
    ]


def make_variant(folder: Path, out: Path, spec: dict[str, Any]) -> Path:
    """Quantise the export (or its optimised graph) as ``spec`` says; returns the folder of
    the graph as onnxruntime optimised it (weights in their own file)."""
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.mkdir(parents=True, exist_ok=True)
    source = folder / "model.onnx"
    if spec.get("order") == "optimise-first":
        source = exports.fast_dir(folder, onnxruntime.__version__) / exports.FAST_GRAPH
    quantised = out / "quantised.onnx"
    if "smooth" in spec:
        source = smooth(source, out / "smoothed.onnx", folder, spec["smooth"], spec["smooth_only"])
    if spec["kind"] == "nbits":  # what reindex saves, at INT8_BLOCK (onnx_encoder.quantise)
        onnx.save(onnx_encoder.int8_model(source, spec["block"]), str(quantised))
    else:
        graph = onnx.load(str(source), load_external_data=False).graph
        only = spec.get("only", "weights")
        nodes = None if only == "all" else weight_matmuls(graph, PATTERNS[only])
        quantize_dynamic(
            source,
            quantised,
            op_types_to_quantize=spec.get("ops", ["MatMul"]),
            per_channel=spec["per_channel"],
            reduce_range=spec["reduce_range"],
            weight_type=QuantType.QUInt8 if spec["weights"] == "u8" else QuantType.QInt8,
            nodes_to_quantize=nodes,
            # the optimised graph's contrib ops defeat shape inference
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    fast = out / "fast"
    fast.mkdir(exist_ok=True)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(fast / exports.FAST_GRAPH)
    options.log_severity_level = 3
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", exports.FAST_WEIGHTS
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    onnxruntime.InferenceSession(str(quantised), options, providers=["CPUExecutionProvider"])
    return fast


def calibration_texts() -> list[str]:
    """Texts that are not benchmark data: the sample catalog's tools and their examples."""
    from toolcat import Catalog
    from toolcat.search.embeddings import embedding_text

    texts: list[str] = []
    with Catalog(":memory:") as catalog:
        catalog.register(ROOT / "data" / "toolkits")
        for tool in catalog.list(include_deferred=True, limit=1000).tools:
            texts.append(embedding_text(tool))
            texts += list(tool.examples)
            texts.append(tool.description)
    return texts


def smooth(source: Path, target: Path, folder: Path, alpha: float, only: str) -> Path:
    """SmoothQuant: divide each matched MatMul's input by a per-channel scale (a Mul before
    it) and multiply the weight's rows by it, so dynamic per-tensor activation quantisation
    is not dominated by a few outlier channels. Scales from the inputs' per-channel maxima on
    ``calibration_texts``: s = max|x|^alpha / max|w|^(1-alpha)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    names = set(weight_matmuls(graph, PATTERNS[only]))
    targets = [n for n in graph.node if n.name in names]
    inputs = list(dict.fromkeys(n.input[0] for n in targets))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in inputs:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    encoder = onnx_encoder.OnnxEncoder(folder, threads=1)
    peak = {name: np.zeros(0, dtype=np.float32) for name in inputs}
    for text in calibration_texts():
        e = encoder.tokenizer.encode(text)
        feed = {
            "input_ids": np.array([e.ids], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids], dtype=np.int64),
        }
        feed = {k: v for k, v in feed.items() if k in encoder.inputs}
        for name, value in zip(inputs, session.run(inputs, feed), strict=True):
            m = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            peak[name] = m if not len(peak[name]) else np.maximum(peak[name], m)
    inits = {i.name: i for i in graph.initializer}
    for index, node in enumerate(list(graph.node)):
        if node.name not in names:
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        x = np.maximum(peak[node.input[0]], 1e-5)
        w = np.maximum(np.abs(weight).max(axis=1), 1e-5)
        scale = (x**alpha / w ** (1 - alpha)).astype(np.float32)
        new_weight = numpy_helper.from_array(
            (weight * scale[:, None]).astype(np.float32), node.input[1] + "_smoothed"
        )
        inverse = numpy_helper.from_array((1 / scale).astype(np.float32), node.name + "_inv_s")
        graph.initializer.extend([new_weight, inverse])
        smoothed = node.name + "_smoothed_input"
        mul = helper.make_node(
            "Mul", [node.input[0], inverse.name], [smoothed], name=node.name + "_smooth"
        )
        node.input[0] = smoothed
        node.input[1] = new_weight.name
        position = list(graph.node).index(node)
        graph.node.insert(position, mul)
        del index
    onnx.save(model, str(target))
    return target


# name -> how it is made. "only": which MatMuls (all weight MatMuls, the FFN's two, or all
# ops the quantiser knows, the embedding table's Gather included).
VARIANTS: dict[str, dict[str, Any]] = {
    "default-ops-tensor-s8": {
        "kind": "dynamic",
        "only": "all",
        "ops": None,
        "per_channel": False,
        "reduce_range": False,
        "weights": "s8",
    },
    "matmul-tensor-s8": {
        "kind": "dynamic",
        "only": "weights",
        "per_channel": False,
        "reduce_range": False,
        "weights": "s8",
    },
    "matmul-channel-s8": {
        "kind": "dynamic",
        "only": "weights",
        "per_channel": True,
        "reduce_range": False,
        "weights": "s8",
    },
    "matmul-channel-s8-rr": {
        "kind": "dynamic",
        "only": "weights",
        "per_channel": True,
        "reduce_range": True,
        "weights": "s8",
    },
    "matmul-channel-u8": {
        "kind": "dynamic",
        "only": "weights",
        "per_channel": True,
        "reduce_range": False,
        "weights": "u8",
    },
    "ffn-channel-s8": {
        "kind": "dynamic",
        "only": "ffn",
        "per_channel": True,
        "reduce_range": False,
        "weights": "s8",
    },
    "ffn-channel-s8-rr": {
        "kind": "dynamic",
        "only": "ffn",
        "per_channel": True,
        "reduce_range": True,
        "weights": "s8",
    },
    "ffn-tensor-s8": {
        "kind": "dynamic",
        "only": "ffn",
        "per_channel": False,
        "reduce_range": False,
        "weights": "s8",
    },
    "ffn-channel-u8": {
        "kind": "dynamic",
        "only": "ffn",
        "per_channel": True,
        "reduce_range": False,
        "weights": "u8",
    },
    "matmul-channel-s8-optfirst": {
        "kind": "dynamic",
        "only": "weights",
        "per_channel": True,
        "reduce_range": False,
        "weights": "s8",
        "order": "optimise-first",
    },
    "attention-channel-s8": {
        "kind": "dynamic",
        "only": "attention",
        "per_channel": True,
        "reduce_range": False,
        "weights": "s8",
    },
    "attention-no-value-channel-s8": {
        "kind": "dynamic",
        "only": "attention-no-value",
        "per_channel": True,
        "reduce_range": False,
        "weights": "s8",
    },
    **{
        f"smooth{alpha}-{only}-channel-s8": {
            "kind": "dynamic",
            "only": "weights",
            "per_channel": True,
            "reduce_range": False,
            "weights": "s8",
            "smooth": alpha,
            "smooth_only": only,
        }
        for alpha in (0.5, 0.7, 0.8, 0.9, 1.0)
        for only in ("ffn", "weights")
    },
    "nbits8-b32": {"kind": "nbits", "bits": 8, "block": 32},
    "nbits8-b128": {"kind": "nbits", "bits": 8, "block": 128},
    "nbits8-b16": {"kind": "nbits", "bits": 8, "block": 16},
}


def bench_queries(count: int) -> list[str]:
    """A seeded sample of queries from every benchmark source, alike per source."""
    rng = random.Random(0)
    sources = sorted(p for p in BENCH.iterdir() if (p / "queries.jsonl").exists())
    out: list[str] = []
    for source in sources:
        lines = (source / "queries.jsonl").read_text().splitlines()
        picked = rng.sample(lines, min(len(lines), count // len(sources) + 1))
        out += [json.loads(line)["query"] for line in picked]
    return out[:count]


def encoder_for(folder: Path, graph: Path | None) -> onnx_encoder.OnnxEncoder:
    """A one-thread query encoder on the export, its session on ``graph`` when given."""
    import onnxruntime

    encoder = onnx_encoder.OnnxEncoder(folder, threads=1)
    if graph is not None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        encoder.session = onnxruntime.InferenceSession(
            str(graph / exports.FAST_GRAPH), options, providers=["CPUExecutionProvider"]
        )
    return encoder


def timings(encoders: dict[str, onnx_encoder.OnnxEncoder], queries: list[str]) -> dict[str, Any]:
    """p50 ms per query, each query run by every encoder in turn (load hits them alike)."""
    samples: dict[str, list[float]] = {name: [] for name in encoders}
    for query in queries:
        for name, encoder in encoders.items():
            start = time.perf_counter()
            encoder.encode([query])
            samples[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(s) * 1000, 3) for name, s in samples.items()}


def run_eval(
    encode: Callable[[list[str]], Any] | None, max_queries: int, cache: Path
) -> dict[str, dict[str, float]]:
    """``toolcat eval`` rows (hybrid and embedding, every source) with the queries encoded
    by ``encode`` (None: as toolcat does)."""
    from toolcat.quality.evaluate import evaluate

    embedder = embeddings.embedder(MINILM)
    fast = embedder.query_encoder()
    assert fast is not None, embedder.note
    original = fast.encode
    if encode is not None:
        fast.encode = encode  # type: ignore[method-assign]
    embedder._queries.clear()
    try:
        rows = evaluate(
            BENCH, modes=["hybrid", "embedding"], max_queries=max_queries, vector_cache=cache
        )
    finally:
        fast.encode = original  # type: ignore[method-assign]
        embedder._queries.clear()
    return {
        f"{r['source']}/{r['mode']}": {"R@1": r["R@1"], "R@5": r["R@5"], "nDCG@10": r["nDCG@10"]}
        for r in rows
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--eval", action="store_true")
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--vector-cache", type=Path, help="tool vectors for --eval (reused)")
    parser.add_argument("--keep", type=Path, help="keep the variants' graphs in this folder")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the quantisers log every node
    import numpy as np

    embeddings.embedder(MINILM).export_onnx()
    folder = exports.export_dir(MINILM, model_location(MINILM))
    queries = bench_queries(args.queries)
    short = [" ".join(q.split()[:8]) for q in queries]
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        reference = encoder_for(folder, None)
        want = reference.encode(queries)
        lengths = [len(e.ids) for e in reference.tokenizer.encode_batch(queries)]
        short_lengths = [len(e.ids) for e in reference.tokenizer.encode_batch(short)]
        print(
            json.dumps(
                {
                    "queries": len(queries),
                    "tokens_p50": statistics.median(lengths),
                    "short_tokens_p50": statistics.median(short_lengths),
                }
            ),
            flush=True,
        )
        cache = args.vector_cache or where / "vectors.db"
        baseline = run_eval(None, args.max_queries, cache) if args.eval else {}
        for name in args.variants:
            start = time.perf_counter()
            graph = make_variant(folder, where / name, VARIANTS[name])
            built = time.perf_counter() - start
            variant = encoder_for(folder, graph)
            got = np.vstack([variant.encode([q]) for q in queries])
            cosines = (want * got).sum(axis=1)
            pair = {"fp32": reference, name: variant}
            timings(pair, short[:20])  # warm
            whole, eight = timings(pair, queries), timings(pair, short)
            row: dict[str, Any] = {
                "variant": name,
                "build_s": round(built, 1),
                "weights_mb": round((graph / exports.FAST_WEIGHTS).stat().st_size / 1e6, 1),
                "cosine_min": round(float(cosines.min()), 5),
                "cosine_p01": round(float(np.quantile(cosines, 0.01)), 5),
                "cosine_median": round(float(np.median(cosines)), 5),
                "whole_ms": whole,
                "whole_ratio": round(whole[name] / whole["fp32"], 3),
                "short_ms": eight,
                "short_ratio": round(eight[name] / eight["fp32"], 3),
            }
            if args.eval:
                rows = run_eval(variant.encode, args.max_queries, cache)
                delta = {
                    key: {m: round((rows[key][m] - base[m]) * 100, 2) for m in ("R@1", "R@5")}
                    for key, base in baseline.items()
                }
                row["eval_delta_points"] = delta
                row["worst_delta"] = min(v for d in delta.values() for v in d.values())
            print(json.dumps(row), flush=True)
        if args.eval:
            print(json.dumps({"fp32_eval": baseline}), flush=True)


if __name__ == "__main__":
    main()
