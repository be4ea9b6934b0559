"""A smaller document encoder for reindex: how fast it would run, how close it gets.

Issue 32 asks for a 1M reindex in ≤ 3 h on two CPU cores (~93 tools/s, 1.55x today) without
losing R@5 anywhere; padding and truncation are spent (docs/benchmarks.md, "What the document
side needs"). This script measures the next step: a student with fewer layers trained to give
the packaged retriever's document vectors (queries stay the retriever's), in the shipped
format (int8 ``MatMulNBits`` blocks of 32).

    python scripts/research/distill_documents.py corpus OUT.jsonl [--most N]
    python scripts/research/distill_documents.py targets CORPUS.jsonl OUT.npy
    python scripts/research/distill_documents.py bench-texts TEACHER_CACHE.db OUT SOURCE...
    python scripts/research/distill_documents.py train CORPUS.jsonl TARGETS.npy OUT.pt \
        [--keep 0,2,4] [--epochs 1] [--lr 1e-4] [--start CKPT.pt] [--extra OUT --repeat 3]
    python scripts/research/distill_documents.py export CKPT.pt|teacher OUT.onnx
    python scripts/research/distill_documents.py speed CORPUS.jsonl N GRAPH.onnx...
    python scripts/research/distill_documents.py cache GRAPH.onnx TEACHER_CACHE.db OUT.db

``corpus``: no benchmark text. Every public function and method with a docstring in the
standard library and the installed libraries becomes a tool definition (its name, the
docstring's first paragraphs, its parameters with their documented types and descriptions)
and then the text reindex encodes (``embedding_text``). ``targets``: the packaged retriever's
vectors of those texts, as reindex makes them. ``train``: a student built from the
retriever's own weights (``encoders.torch.build``), keeping the layers ``--keep``, its word
embeddings frozen, trained on cosine loss to the targets (1,000 texts held out for the
cosine it prints); ``--extra`` adds the documents (never the queries) of some benchmark
sources with the retriever's vectors of them (``bench-texts``, from a cache an eval with the
retriever filled), so the sources left out score a student that never saw their tools.
``export``: the student as an ONNX graph, then int8 as toolcat makes the
int8 graph (``onnx.int8_model``). ``speed``: texts per CPU-second on one thread (reindex's
workers), each graph in turn, batches sorted by tokens. ``cache``: a file for ``toolcat
eval --vector-cache`` holding the student's vectors of every tool of ../shared/bench under
the retriever's model id and producer (copied from a cache an eval with the retriever
filled): ``toolcat eval`` then scores the student's documents against the retriever's
queries.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
PACKAGED = ROOT / "src" / "toolcat" / "retriever"
BENCH = ROOT.parent / "shared" / "bench"
HELD_OUT = 1000  # corpus texts kept out of training, for the cosine printed
SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3"}
LIBRARIES = [
    *("numpy", "scipy", "sklearn", "networkx", "sympy", "mpmath", "openai", "selenium"),
    *("httpx", "jinja2", "pydantic", "dateutil", "jsonschema", "rich", "pygments", "click"),
    *("cryptography", "huggingface_hub", "fsspec", "joblib", "regex", "markdown_it", "anyio"),
    *("jwt", "prometheus_client"),
]
JSON_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
JSON_TYPES |= {"list": "array", "tuple": "array", "dict": "object"}


# -- corpus ---------------------------------------------------------------------------------


def _modules() -> Any:
    import importlib
    import pkgutil

    for root in sorted(sys.stdlib_module_names - SKIP) + LIBRARIES:
        try:
            module = importlib.import_module(root)
        except BaseException:  # a module that cannot import here (a platform's, a GUI's)
            continue
        yield module
        for info in pkgutil.walk_packages(getattr(module, "__path__", None) or [], root + "."):
            parts = info.name.split(".")[1:]
            if any(p.startswith("_") or p in ("tests", "test", "testing") for p in parts):
                continue
            try:
                yield importlib.import_module(info.name)
            except BaseException:
                continue


def _clean(text: str | None, limit: int) -> str:
    text = re.sub(r"\s+", " ", text or "").strip()
    return text[:limit].rsplit(" ", 1)[0] if len(text) > limit else text


def _tool(name: str, obj: Any) -> Any:
    import inspect

    import docstring_parser

    from toolcat import Tool

    doc = inspect.getdoc(obj)
    if not doc or len(doc) < 20:
        return None
    parsed = docstring_parser.parse(doc)
    described = {p.arg_name: p for p in parsed.params}
    try:
        params = [
            p
            for p in inspect.signature(obj).parameters.values()
            if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    properties: dict[str, Any] = {}
    required = []
    for p in params[:12]:
        d = described.get(p.name)
        kind = JSON_TYPES.get((d.type_name or "").split(",")[0].strip()) if d else None
        if kind is None and p.default is not p.empty:
            kind = JSON_TYPES.get(type(p.default).__name__)
        properties[p.name] = {"type": kind or "string"}
        if d and d.description:
            properties[p.name]["description"] = _clean(d.description, 200)
        if p.default is p.empty:
            required.append(p.name)
    about = " ".join(x for x in (parsed.short_description, parsed.long_description) if x)
    if not _clean(about, 400):
        return None
    return Tool(
        name=re.sub(r"[^A-Za-z0-9_]", "_", name)[:60].strip("_") or "tool",
        description=_clean(about, 400),
        parameters={"type": "object", "properties": properties, "required": required},
    )


def corpus(out: Path, most: int) -> None:
    import inspect
    import warnings

    from toolcat.search.embeddings import embedding_text

    warnings.filterwarnings("ignore")
    seen: set[str] = set()
    texts: list[str] = []
    for module in _modules():
        for attr, obj in list(vars(module).items()):
            if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            found = []
            if inspect.isfunction(obj) or inspect.isbuiltin(obj):
                found.append((attr, obj))
            elif inspect.isclass(obj):
                found.append((attr, obj))
                found += [
                    (f"{attr}_{name}", f)
                    for name, f in list(vars(obj).items())
                    if not name.startswith("_")
                    and (inspect.isfunction(f) or inspect.ismethoddescriptor(f))
                ]
            for name, f in found:
                try:
                    tool = _tool(name, f)
                    text = embedding_text(tool) if tool is not None else None
                except Exception:  # a docstring the parser or the model refuses
                    continue
                if text and text not in seen:
                    seen.add(text)
                    texts.append(text)
    random.Random(0).shuffle(texts)
    out.write_text("".join(json.dumps(t) + "\n" for t in texts[:most]))
    print(f"{min(len(texts), most)} texts")


def _texts(path: Path) -> list[str]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def targets(corpus_path: Path, out: Path) -> None:
    import numpy as np

    from toolcat.search.embeddings import DEFAULT_MODEL, embedder

    texts = _texts(corpus_path)
    started = time.monotonic()
    vectors = embedder(DEFAULT_MODEL).encode(texts)
    print(f"{len(texts)} texts in {time.monotonic() - started:.0f} s")
    np.save(out, vectors.astype(np.float32))


# -- the student ----------------------------------------------------------------------------


def _student(keep: list[int] | None, saved: dict[str, Any] | None = None) -> Any:
    """The retriever's module keeping the layers ``keep`` (all: None), with ``saved``'s
    weights when given (a checkpoint: ``{"keep", "state"}``)."""
    import torch

    from toolcat.search.encoders.export import checked_export
    from toolcat.search.encoders.torch import build

    export, _ = checked_export(PACKAGED)
    model = build(export.folder / "model.onnx")
    if keep is not None:
        model.encoder.layer = torch.nn.ModuleList([model.encoder.layer[i] for i in keep])
    if saved is not None:
        model.load_state_dict(saved["state"])
    return model


class _Batches:
    """Padded batches of like length from tokenized texts (the retriever's tokenizer)."""

    def __init__(self, texts: list[str]) -> None:
        from toolcat.search.encoders.export import checked_export

        self.encodings = checked_export(PACKAGED)[1].encode_batch(texts)

    def groups(self, rows: list[int], size: int, seed: int | None = None) -> list[list[int]]:
        rows = sorted(rows, key=lambda i: len(self.encodings[i].ids))
        groups = [rows[i : i + size] for i in range(0, len(rows), size)]
        if seed is not None:
            random.Random(seed).shuffle(groups)
        return groups

    def tensors(self, rows: list[int]) -> tuple[Any, Any, Any]:
        import torch

        width = max(len(self.encodings[i].ids) for i in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(rows):
            n = len(self.encodings[i].ids)
            ids[row, :n] = torch.tensor(self.encodings[i].ids)
            mask[row, :n] = 1
        return ids, mask, torch.zeros_like(ids)


def train(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    torch.manual_seed(0)
    saved = torch.load(args.start) if args.start is not None else None
    keep = saved["keep"] if saved is not None else [int(i) for i in args.keep.split(",")]
    model = _student(keep, saved)
    for p in model.embeddings.parameters():
        p.requires_grad = False
    texts = _texts(args.corpus)
    wanted = torch.from_numpy(np.load(args.targets))
    rows = list(range(HELD_OUT, len(texts)))
    for extra in args.extra:
        more = _texts(extra.with_suffix(".jsonl"))
        rows += [len(texts) + i for i in range(len(more))] * args.repeat
        texts += more
        wanted = torch.cat([wanted, torch.from_numpy(np.load(extra.with_suffix(".npy")))])
    batches = _Batches(texts)
    held_out = list(range(HELD_OUT))

    def cosine() -> str:
        model.eval()
        with torch.inference_mode():
            c = torch.cat(
                [
                    (model(*batches.tensors(g)) * wanted[g]).sum(1)
                    for g in batches.groups(held_out, 64)
                ]
            )
        model.train()
        return f"held-out cosine mean {float(c.mean()):.4f}, p1 {float(c.quantile(0.01)):.4f}"

    print("start:", cosine(), flush=True)
    plan: list[list[int]] = []
    epoch = 0
    while epoch < args.epochs:
        groups = batches.groups(rows, 32, seed=epoch)
        plan += groups[: int(len(groups) * min(1.0, args.epochs - epoch))]
        epoch += 1
    trained = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.01)
    warm = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser,
        lambda s: min(1.0, (s + 1) / warm) * max(0.0, (len(plan) - s) / max(1, len(plan) - warm)),
    )
    model.train()
    started = time.monotonic()
    for step, group in enumerate(plan):
        loss = (1 - (model(*batches.tensors(group)) * wanted[group]).sum(1)).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 200 == 0 or step == len(plan) - 1:
            print(
                f"step {step}/{len(plan)} loss {float(loss.detach()):.4f} "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
    print("end:", cosine(), flush=True)
    torch.save({"keep": keep, "state": model.state_dict()}, args.out)


def export(checkpoint: str, out: Path) -> None:
    import onnx
    import torch

    from toolcat.search.encoders.export import INT8_BLOCK
    from toolcat.search.encoders.onnx import int8_model

    saved = None if checkpoint == "teacher" else torch.load(checkpoint)
    model = _student(saved and saved["keep"], saved).eval()
    ids = torch.ones((2, 16), dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    plain = out.with_suffix(".fp32.onnx")
    torch.onnx.export(
        model,
        (ids, ids, torch.zeros_like(ids)),
        str(plain),
        input_names=names,
        output_names=["sentence_embedding"],
        dynamic_axes={n: {0: "batch", 1: "seq"} for n in names}
        | {"sentence_embedding": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    onnx.save(int8_model(plain, INT8_BLOCK), str(out))
    print(f"saved {out}")


def _session(graph: Path, threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def _encode(session: Any, texts: list[str], slots: int = 4096) -> Any:
    """Vectors in the texts' order; batches of like length up to ``slots`` token slots."""
    import numpy as np

    encodings = _Batches(texts).encodings
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    out: Any = None
    inputs = {i.name for i in session.get_inputs()}
    at = 0
    while at < len(order):
        rows = [order[at]]  # a text past ``slots`` alone
        at += 1
        while at < len(order) and (len(rows) + 1) * len(encodings[order[at]].ids) <= slots:
            rows.append(order[at])
            at += 1
        width = max(len(encodings[i].ids) for i in rows)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros_like(ids)
        for row, i in enumerate(rows):
            n = len(encodings[i].ids)
            ids[row, :n] = encodings[i].ids
            mask[row, :n] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        vectors = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0]
        if out is None:  # the graph's width
            out = np.zeros((len(texts), vectors.shape[1]), np.float32)
        out[rows] = vectors
    return out


def speed(corpus_path: Path, count: int, graphs: list[Path]) -> None:
    texts = _texts(corpus_path)[:count]
    for round_ in range(2):
        for graph in graphs:
            session = _session(graph, 1)
            _encode(session, texts[:64])
            started = time.thread_time()
            _encode(session, texts)
            rate = len(texts) / (time.thread_time() - started)
            print(f"round {round_} {graph}: {rate:.1f} texts per CPU-second", flush=True)


def cache(graph: Path, teacher_cache: Path, out: Path) -> None:
    import sqlite3

    import numpy as np

    from toolcat import Catalog
    from toolcat.quality.evaluate import load_source, source_folders
    from toolcat.search.embeddings import DEFAULT_MODEL, stored_embedding_text
    from toolcat.store import reader

    if out.exists() or out.is_symlink():
        raise SystemExit(f"{out} exists: name a new file (a cache is never written over)")
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, Catalog(Path(tmp) / "all.db") as catalog:
        catalog.register(*(load_source(f).toolkit for f in source_folders(BENCH)))
        for h, d in catalog._conn.execute("SELECT content_hash, definition FROM tools"):
            texts[h] = stored_embedding_text(reader.decode_definition(d, h))
    hashes = sorted(texts)
    vectors = _encode(_session(graph, 2), [texts[h] for h in hashes])
    source = sqlite3.connect(teacher_cache)
    taught = {
        h: np.frombuffer(v, "<f4")
        for h, v in source.execute(
            "SELECT content_hash, vector FROM embeddings WHERE model = ?", (DEFAULT_MODEL,)
        )
    }
    pairs = list(zip(hashes, vectors, strict=True))
    cosines = [float(np.dot(taught[h], v)) for h, v in pairs if h in taught]
    print(
        f"{len(hashes)} tools, {len(cosines)} in the retriever's cache: cosine mean "
        f"{np.mean(cosines):.4f}, p1 {np.quantile(cosines, 0.01):.4f}, min {min(cosines):.4f}"
    )
    with sqlite3.connect(out) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (content_hash TEXT NOT NULL, model TEXT NOT "
            "NULL, vector BLOB NOT NULL, PRIMARY KEY (content_hash, model))"
        )
        db.execute("CREATE TABLE IF NOT EXISTS producers (model TEXT PRIMARY KEY, producer TEXT)")
        db.executemany(
            "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
            [(h, DEFAULT_MODEL, v.astype("<f4").tobytes()) for h, v in pairs],
        )
        db.executemany(
            "INSERT OR REPLACE INTO producers VALUES (?, ?)",
            source.execute("SELECT model, producer FROM producers"),
        )


def bench_texts(teacher_cache: Path, sources: list[str], out: Path) -> None:
    """The texts of these ../shared/bench sources' tools and their vectors from a cache an
    eval with the retriever filled (``OUT.jsonl``, ``OUT.npy``): documents of the sources
    a student may learn from, never their queries."""
    import sqlite3

    import numpy as np

    from toolcat import Catalog
    from toolcat.quality.evaluate import load_source, source_folders
    from toolcat.search.embeddings import DEFAULT_MODEL, stored_embedding_text
    from toolcat.store import reader

    with tempfile.TemporaryDirectory() as tmp, Catalog(Path(tmp) / "some.db") as catalog:
        catalog.register(*(load_source(f).toolkit for f in source_folders(BENCH, sources)))
        rows = catalog._conn.execute("SELECT content_hash, definition FROM tools").fetchall()
    with sqlite3.connect(teacher_cache) as db:
        taught = dict(
            db.execute(
                "SELECT content_hash, vector FROM embeddings WHERE model = ?", (DEFAULT_MODEL,)
            )
        )
    kept = [(h, d) for h, d in rows if h in taught]
    texts = [stored_embedding_text(reader.decode_definition(d, h)) for h, d in kept]
    out.with_suffix(".jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts))
    np.save(out.with_suffix(".npy"), np.stack([np.frombuffer(taught[h], "<f4") for h, _ in kept]))
    print(f"{len(texts)} of {len(rows)} tools of {', '.join(sources)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("corpus")
    p.add_argument("out", type=Path)
    p.add_argument("--most", type=int, default=40000)
    p = steps.add_parser("targets")
    p.add_argument("corpus", type=Path)
    p.add_argument("out", type=Path)
    p = steps.add_parser("train")
    p.add_argument("corpus", type=Path)
    p.add_argument("targets", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--keep", default="0,2,4", help="the retriever's layers the student keeps")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--start", type=Path, help="go on from this checkpoint (its layers)")
    p.add_argument(
        "--extra",
        type=Path,
        action="append",
        default=[],
        help="also these texts (X.jsonl beside X.npy, from bench-texts), --repeat times",
    )
    p.add_argument("--repeat", type=int, default=1)
    p = steps.add_parser("bench-texts")
    p.add_argument("teacher_cache", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("sources", nargs="+")
    p = steps.add_parser("export")
    p.add_argument("checkpoint")
    p.add_argument("out", type=Path)
    p = steps.add_parser("speed")
    p.add_argument("corpus", type=Path)
    p.add_argument("count", type=int)
    p.add_argument("graphs", type=Path, nargs="+")
    p = steps.add_parser("cache")
    p.add_argument("graph", type=Path)
    p.add_argument("teacher_cache", type=Path)
    p.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.step == "corpus":
        corpus(args.out, args.most)
    elif args.step == "targets":
        targets(args.corpus, args.out)
    elif args.step == "train":
        train(args)
    elif args.step == "bench-texts":
        bench_texts(args.teacher_cache, args.sources, args.out)
    elif args.step == "export":
        export(args.checkpoint, args.out)
    elif args.step == "speed":
        speed(args.corpus, args.count, args.graphs)
    else:
        cache(args.graph, args.teacher_cache, args.out)


if __name__ == "__main__":
    main()
