"""Benchmark a full reindex (embedding every tool) beside plain onnxruntime, in one run.

The workload is ``bench_scale.py``'s seeded generator (real tool texts from ../shared/bench,
varied so that every tool is distinct): ``--tools`` tools registered once per measured source
tree (not timed), then, alternated round by round:

- ``toolcat``: ``Catalog.reindex()`` of every tool in a fresh child process (a copy of the
  registered catalog each round), with the sources of each ``--src`` (this checkout's by
  default; give an older checkout's ``src`` to compare before and after in the same run);
- ``peer``: plain onnxruntime in a child process: the same texts, the same graph (the
  packaged retriever's ``model.onnx``), one session with onnxruntime's default options, the
  tokenizer padding each batch of ``--batch-size`` texts to its longest, in catalog order.

Each figure is the timed part alone (imports and registering excluded): wall seconds,
tools/s, and CPU seconds of the process and of the worker processes it waited for; the
1-minute load beside it. The vectors toolcat stored are checked against the peer's (minimum
cosine). Needs toolcat, numpy, onnxruntime and tokenizers only.

    python scripts/bench_reindex.py --tools 5000 --rounds 2
    python scripts/bench_reindex.py --tools 5000 --src /tmp/before/src --src src --json
    python scripts/bench_reindex.py --tools 1500 --src src --src src::bf16
    python scripts/bench_reindex.py --stale-at 1000000 --changed 1000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def load() -> float:
    return round(os.getloadavg()[0], 2)


def _cpu() -> float:
    """CPU seconds of this process and of its children waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def child_build(db: str, manifests: str) -> dict[str, Any]:
    from toolcat import Catalog, Toolkit

    with Catalog(db) as catalog:
        for data in json.loads(Path(manifests).read_text()):
            catalog.register(Toolkit.model_validate(data))
    return {}


def child_reindex(db: str, batch_size: int) -> dict[str, Any]:
    from toolcat import Catalog

    with Catalog(db) as catalog:
        started, cpu = time.perf_counter(), _cpu()
        report = catalog.reindex(batch_size=batch_size)
        wall, cpu = time.perf_counter() - started, _cpu() - cpu
    return {
        "tools": report.embedded,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "tools_per_s": round(report.embedded / wall, 1),
        "reported_tools_per_s": report.tools_per_second,
        "export_s": report.export_seconds,
    }


def child_peer(texts_file: str, batch_size: int, vectors_file: str) -> dict[str, Any]:
    """Plain onnxruntime: one default session, batches in the order given, padded."""
    import numpy as np
    import onnxruntime
    from tokenizers import Tokenizer

    folder = ROOT / "src" / "toolcat" / "retriever"
    meta = json.loads((folder / "retriever.json").read_text())
    texts = json.loads(Path(texts_file).read_text())
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=int(meta["max_seq_length"]))
    tokenizer.enable_padding()
    session = onnxruntime.InferenceSession(
        str(folder / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    out = []
    tokens = padded = 0
    started, cpu = time.perf_counter(), _cpu()
    for start in range(0, len(texts), batch_size):
        encodings = tokenizer.encode_batch(texts[start : start + batch_size])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (vectors,) = session.run(None, {n: feed[n] for n in names})
        out.append(vectors)
        tokens += int(mask.sum())
        padded += ids.size
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    matrix = np.concatenate(out).astype(np.float32)
    np.save(vectors_file, matrix / np.linalg.norm(matrix, axis=1, keepdims=True))
    return {
        "tools": len(texts),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "tools_per_s": round(len(texts) / wall, 1),
        "tokens": tokens,
        "padded_tokens": padded,
        "tokens_per_s": round(tokens / wall, 1),
    }


def child_build_large(db: str, size: int, changed: int, seed: int) -> dict[str, Any]:
    """A catalog of ``size`` tools made with plain SQL inserts (not ``register``: minutes
    instead of an hour at 1M), every tool with a vector except ``changed`` spread evenly
    through it, as after their text changed. The definitions are the generator's real
    tools, each made distinct by its name; the vectors of the unchanged ones are random
    bytes (only their presence matters here). Schema and counts as ``register`` leaves
    them (the toolkits are activated by an UPDATE, so the kept counts' triggers run)."""
    import hashlib

    from toolcat import Catalog, Tool
    from toolcat.models import canonical_json
    from toolcat.search.embeddings import RETRIEVER, embedder

    manifests, _ = workload(min(size, 8000), seed)
    pool = [
        Tool.model_validate(t).model_dump(mode="json", exclude_none=True)
        for m in manifests
        for t in m["tools"]
    ]
    per_kit = 400
    step = max(1, size // max(changed, 1))
    started = time.perf_counter()
    with Catalog(db) as catalog:
        conn = catalog._conn
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO toolkits (id, name, version, content_hash, active, registered_at, "
            "defer_loading) VALUES (?, ?, '1.0.0', ?, 0, '2026-11-26T00:00:00+00:00', 1)",
            [(k + 1, f"kit{k}", f"{k:064x}") for k in range(-(-size // per_kit))],
        )

        def rows() -> Any:
            for i in range(size):
                definition = {**pool[i % len(pool)]}
                definition["name"] = f"{definition['name'][:40]}_{i}"
                text = canonical_json(definition)
                yield (
                    i + 1,
                    i // per_kit + 1,
                    f"kit{i // per_kit}",
                    definition["name"],
                    1,
                    "[]",
                    text,
                    hashlib.sha256(text.encode()).hexdigest(),
                )

        conn.executemany(
            "INSERT INTO tools (id, toolkit_id, toolkit, name, defer_loading, tags, definition, "
            "content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows(),
        )
        conn.execute("UPDATE toolkits SET active = 1")
        producer = embedder(RETRIEVER).producer()
        conn.execute(
            "INSERT INTO embeddings (content_hash, model, vector) SELECT content_hash, ?, "
            "randomblob(1536) FROM tools WHERE id % ? != 0",
            (RETRIEVER, step),
        )
        conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [
                ("embedding_model", RETRIEVER),
                ("embedding_dim", 384),
                ("embedding_producer", f"{RETRIEVER} {producer}"),
            ],
        )
        conn.execute("COMMIT")
    missing = size - sum(1 for i in range(1, size + 1) if i % step != 0)
    return {"tools": size, "changed": missing, "build_s": round(time.perf_counter() - started, 1)}


def child_incremental(db: str) -> dict[str, Any]:
    """Finding what needs vectors (the reader's query alone), then a whole reindex."""
    import sqlite3 as sqlite

    from toolcat import Catalog
    from toolcat.search.embeddings import RETRIEVER
    from toolcat.store import reader

    with sqlite.connect(db) as conn:
        started, cpu = time.perf_counter(), time.process_time()
        stale = reader.stale_vectors(conn, RETRIEVER)
        find = (time.perf_counter() - started, time.process_time() - cpu)
    with Catalog(db) as catalog:
        started, cpu = time.perf_counter(), _cpu()
        report = catalog.reindex()
        whole = (time.perf_counter() - started, _cpu() - cpu)
    return {
        "stale": len(stale),
        "find_s": round(find[0], 3),
        "find_cpu_s": round(find[1], 3),
        "embedded": report.embedded,
        "reindex_s": round(whole[0], 2),
        "reindex_cpu_s": round(whole[1], 2),
    }


CHILDREN = {
    "build": child_build,
    "reindex": child_reindex,
    "peer": child_peer,
    "build_large": child_build_large,
    "incremental": child_incremental,
}


def in_child(
    kind: str, src: Path, *args: Any, workers: str = "", device: str = ""
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    if workers:
        env["TOOLCAT_REINDEX_WORKERS"] = workers
    if device:
        env["TOOLCAT_REINDEX_DEVICE"] = device
    command = [sys.executable, __file__, "--child", kind, *map(str, args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{kind} child failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    result["load"] = load()
    return result


def workload(size: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Seeded manifests of ``size`` tools and each tool's embedding text, in order."""
    import bench_scale

    sys.path.insert(0, str(ROOT / "src"))
    from toolcat import Tool
    from toolcat.search.embeddings import embedding_text

    manifests = list(bench_scale.generate(size, seed))
    texts = [
        embedding_text(Tool.model_validate(tool)) for data in manifests for tool in data["tools"]
    ]
    return manifests, texts


def stored_texts(db: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(toolkit, name) and embedding text of each tool of a catalog, in id order."""
    from toolcat.search.embeddings import stored_embedding_text

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT toolkit, name, definition FROM tools ORDER BY id").fetchall()
    keys = [(kit, name) for kit, name, _ in rows]
    texts = [stored_embedding_text(json.loads(d)) for _, _, d in rows]
    return keys, texts


def stored_vectors(db: Path, keys: list[tuple[str, str]]) -> Any:
    """The vectors the catalog holds for the tools ``keys`` (toolkit, name), in that order."""
    import numpy as np

    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT t.toolkit, t.name, e.vector FROM tools t "
            "JOIN embeddings e ON e.content_hash = t.content_hash"
        ).fetchall()
    found = {(kit, name): blob for kit, name, blob in rows}
    return np.stack([np.frombuffer(found[key], dtype="<f4") for key in keys])


def bench_reindex(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-reindex-"))
    try:
        manifests, _ = workload(args.tools, args.seed)
        (work / "manifests.json").write_text(json.dumps(manifests))
        # --src PATH[:WORKERS[:DEVICE]] (TOOLCAT_REINDEX_WORKERS, TOOLCAT_REINDEX_DEVICE)
        variants = [
            (Path(path).resolve(), *[*rest, "", ""][:2])
            for path, *rest in (s.split(":") for s in args.src or [str(ROOT / "src")])
        ]
        sources = list(dict.fromkeys(src for src, _, _ in variants))
        templates = {}
        for i, src in enumerate(sources):
            templates[src] = work / f"template-{i}.db"
            in_child("build", src, templates[src], work / "manifests.json")
        # The texts reindex reads: made from the stored definitions (canonical JSON, so a
        # schema's properties in sorted order), not from the manifests.
        keys, texts = stored_texts(templates[sources[0]])
        (work / "texts.json").write_text(json.dumps(texts))
        runs: dict[str, list[dict[str, Any]]] = {"peer": []}
        agreement: dict[str, float] = {}
        for round_ in range(args.rounds):
            for src, workers, device in variants:
                name = f"{src}" + (f" workers={workers}" if workers else "")
                name += f" device={device}" if device else ""
                db = work / "round.db"
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{db}{suffix}").unlink(missing_ok=True)
                shutil.copy(templates[src], db)
                result = in_child(
                    "reindex", src, db, args.batch_size, workers=workers, device=device
                )
                runs.setdefault(name, []).append(result)
                if round_ == 0:
                    peer_file = work / "peer.npy"
                    if not peer_file.exists():
                        runs["peer"].append(
                            in_child(
                                "peer",
                                ROOT / "src",
                                work / "texts.json",
                                args.batch_size,
                                peer_file,
                            )
                        )
                    mine = stored_vectors(db, keys)
                    agreement[name] = round(float((mine * np.load(peer_file)).sum(axis=1).min()), 6)
        summary: dict[str, Any] = {}
        peer_rate = statistics.median(r["tools_per_s"] for r in runs["peer"])
        peer_cpu = statistics.median(r["cpu_s"] for r in runs["peer"])
        for name, results in runs.items():
            rate = statistics.median(r["tools_per_s"] for r in results)
            cpu = statistics.median(r["cpu_s"] for r in results)
            summary[name] = {
                "tools_per_s": rate,
                "cpu_s": cpu,
                "tools_per_cpu_s": round(args.tools / cpu, 1),
                "vs_peer": round(rate / peer_rate, 2),
                "cpu_vs_peer": round(cpu / peer_cpu, 2),
                "min_cosine_to_peer": agreement.get(name),
                "runs": results,
            }
        return {"tools": args.tools, "seed": args.seed, "batch_size": args.batch_size, **summary}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_incremental(args: argparse.Namespace) -> dict[str, Any]:
    """A catalog of ``--stale-at`` tools, ``--changed`` of them without a vector: the
    reader's query and a whole reindex, once per ``--src`` (a copy each)."""
    work = Path(tempfile.mkdtemp(prefix="bench-incremental-", dir=args.workdir))
    try:
        sources = [Path(s.split(":")[0]).resolve() for s in args.src] or [ROOT / "src"]
        template = work / "large.db"
        built = in_child(
            "build_large", sources[0], template, args.stale_at, args.changed, args.seed
        )
        result: dict[str, Any] = {"build": built}
        for src in sources:
            db = work / "run.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            shutil.copy(template, db)
            result[str(src)] = in_child("incremental", src, db)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        help="toolcat sources to measure, PATH[:WORKERS[:DEVICE]] (TOOLCAT_REINDEX_WORKERS, "
        "0: one session on onnxruntime's threads; TOOLCAT_REINDEX_DEVICE, e.g. bf16); repeat "
        "to alternate them",
    )
    parser.add_argument(
        "--stale-at", type=int, help="measure an incremental reindex in a catalog this big"
    )
    parser.add_argument("--changed", type=int, default=1000, help="tools without a vector")
    parser.add_argument("--workdir", help="where the large catalog is built (needs ~4 GB at 1M)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        converted = [int(x) if x.isdigit() else x for x in rest]
        print(json.dumps(CHILDREN[kind](*converted)))
        return
    if args.stale_at:
        print(json.dumps(bench_incremental(args), indent=2))
        return
    result = bench_reindex(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['tools']} tools, seed {result['seed']}, batch {result['batch_size']}")
    for name, figures in result.items():
        if isinstance(figures, dict):
            loads = [r["load"] for r in figures["runs"]]
            print(
                f"{name:>40}: {figures['tools_per_s']:7.1f} tools/s ({figures['vs_peer']}x peer), "
                f"CPU {figures['cpu_s']:.1f} s ({figures['cpu_vs_peer']}x peer), "
                f"min cosine to peer {figures['min_cosine_to_peer']}, load {loads}"
            )


if __name__ == "__main__":
    main()
