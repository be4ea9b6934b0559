"""Reindex on a GPU against the same machine's CPU, in one run (docs/benchmarks.md "Reindex
on a GPU").

Builds a catalog of ``--n`` tools with ``bench_scale.generate`` (real benchmark texts, seeded)
and runs the real ``toolcat reindex --json`` on it as a user would (no override: the GPU when
the machine has one), then the same command with ``TOOLCAT_REINDEX_DEVICE=cpu`` (onnxruntime
on every core) on the catalog's first ``--n-cpu`` tools as the in-run baseline, and the GPU
reindex on that same small catalog. Then checks ``--check`` stored GPU vectors against
onnxruntime's int8 ones (cosine) and, time allowing, sweeps the torch encoder's precision and
pass size. Every stage's figures are written to ``OUT/gpu_reindex.json`` as it ends, so a run
cut short keeps what it measured.

    python scripts/bench_gpu_reindex.py --n 100000 --n-cpu 4000 --out /tmp/out
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def bench_scale(bench: Path) -> Any:
    """``scripts/bench_scale.py`` (the seeded generator), reading tools from ``bench``."""
    spec = importlib.util.spec_from_file_location("bench_scale", HERE / "bench_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.BENCH = bench
    return module


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def environment() -> dict[str, Any]:
    import onnxruntime

    import toolcat
    from toolcat.search.encoders import device

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "toolcat": str(Path(toolcat.__file__).parent),
        "onnxruntime": onnxruntime.__version__,
        "ort_providers": onnxruntime.get_available_providers(),
        "reindex_device_env": os.environ.get(device.ENV, ""),
    }
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        out["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        out["torch"] = None
    out["torch_gpu_seen_by_toolcat"] = device.torch_gpu()
    return out


def build_catalog(gen: Any, size: int, db: Path, work: Path) -> dict[str, Any]:
    """Register ``size`` generated tools into ``db`` (in-process, batches of manifests)."""
    from toolcat import Catalog

    folder = work / f"manifests-{size}"
    started = time.perf_counter()
    batches = gen.write_batches(size, folder)
    written = time.perf_counter() - started
    started = time.perf_counter()
    with Catalog(db) as catalog:
        for batch in batches:
            catalog.register(batch)
        tools = catalog.status()["active_tools"]
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "tools": tools,
        "write_manifests_s": round(written, 1),
        "register_s": round(time.perf_counter() - started, 1),
    }


def reindex(db: Path, choice: str | None, timeout: float) -> dict[str, Any]:
    """``toolcat --db DB reindex --json`` in a fresh process; its report, wall time and load."""
    env = dict(os.environ)
    env.pop("TOOLCAT_REINDEX_DEVICE", None)
    if choice is not None:
        env["TOOLCAT_REINDEX_DEVICE"] = choice
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "toolcat", "--db", str(db), "reindex", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "load": load()}
    wall = time.perf_counter() - started
    if done.returncode:
        return {"error": done.stderr.strip()[-2000:], "wall_s": round(wall, 1)}
    report: dict[str, Any] = json.loads(done.stdout)
    report["wall_s"] = round(wall, 1)  # process start, imports, model load included
    report["load"] = load()
    return report


def stored_texts(db: Path, count: int, seed: int = 7) -> tuple[list[str], Any]:
    """``count`` random tools' embedding texts and their stored vectors."""
    import numpy as np

    from toolcat.search.embeddings import RETRIEVER, stored_embedding_text
    from toolcat.store import reader

    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT t.content_hash, t.definition, e.vector FROM tools t JOIN embeddings e "
            "ON e.content_hash = t.content_hash AND e.model = ?",
            (RETRIEVER,),
        ).fetchall()
    rows = random.Random(seed).sample(rows, min(count, len(rows)))
    texts = [stored_embedding_text(reader.decode_definition(d, f"hash {h}")) for h, d, _ in rows]
    vectors = np.vstack([np.frombuffer(v, dtype="<f4") for _, _, v in rows])
    return texts, vectors


def cosines(a: Any, b: Any) -> dict[str, float]:
    import numpy as np

    from toolcat.search.encoders.torch import unit_cosines

    c = unit_cosines(a, b)
    return {
        "min": round(float(c.min()), 6),
        "p01": round(float(np.percentile(c, 1)), 6),
        "mean": round(float(c.mean()), 6),
    }


def sweep(texts: list[str], check: list[str], reference: Any, device: str) -> list[Any]:
    """The torch encoder alone: texts/s and cosine to onnxruntime per precision and pass
    size (GPU timing synchronised)."""
    import torch

    from toolcat.search.embeddings import RETRIEVER_FOLDER
    from toolcat.search.encoders.torch import TorchEncoder

    rows = []
    for dtype, tokens in (
        ("float16", 65536),
        ("bfloat16", 65536),
        ("float32", 65536),
        ("float16", 16384),
        ("float16", 262144),
    ):
        encoder = TorchEncoder(RETRIEVER_FOLDER, device=device, dtype=dtype, batch_tokens=tokens)
        encoder.encode(texts[:2000])  # warm-up: kernels chosen, memory pooled
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        encoder.encode(texts)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        rows.append(
            {
                "dtype": dtype,
                "batch_tokens": tokens,
                "texts": len(texts),
                "texts_per_s": round(len(texts) / seconds, 1),
                "cosine_to_onnx_int8": cosines(reference, encoder.encode(check)),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del encoder
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="tools in the GPU catalog")
    parser.add_argument("--n-cpu", type=int, default=4000, help="tools in the CPU baseline")
    parser.add_argument("--check", type=int, default=500, help="texts in the cosine check")
    parser.add_argument("--sweep-texts", type=int, default=20_000)
    parser.add_argument("--bench", type=Path, default=HERE.parent.parent / "shared" / "bench")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--budget", type=float, default=240, help="seconds; sweeps skipped after")
    parser.add_argument("--gpu-choice", help="TOOLCAT_REINDEX_DEVICE for the GPU runs")
    args = parser.parse_args()
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}

    def left() -> float:
        """Seconds a stage may take: what the budget leaves, 30 at least."""
        return max(30.0, args.budget - (time.perf_counter() - started))

    def save(stage: str, figures: Any) -> None:
        result[stage] = figures
        result["elapsed_s"] = round(time.perf_counter() - started, 1)
        (args.out / "gpu_reindex.json").write_text(json.dumps(result, indent=1))
        print(f"[{result['elapsed_s']:.0f} s] {stage}: {json.dumps(figures)[:1500]}", flush=True)

    save("environment", environment())
    gen = bench_scale(args.bench)
    work = Path(tempfile.mkdtemp(prefix="toolcat-gpu-"))
    try:
        big, small = work / "big.db", work / "small.db"
        save("catalog", build_catalog(gen, args.n, big, work))
        save("catalog_small", build_catalog(gen, args.n_cpu, small, work))
        small_gpu = work / "small-gpu.db"
        shutil.copy(small, small_gpu)
        save("reindex_gpu", reindex(big, args.gpu_choice, timeout=left()))
        save("reindex_cpu_small", reindex(small, "cpu", timeout=left()))
        save("reindex_gpu_small", reindex(small_gpu, args.gpu_choice, timeout=left()))
        from toolcat.search.embeddings import RETRIEVER_FOLDER
        from toolcat.search.encoders import onnx as onnx_encoder

        onnx = onnx_encoder.OnnxEncoder(RETRIEVER_FOLDER, threads=0)
        check, stored = stored_texts(big, args.check)
        reference = onnx.encode(check)
        save("cosine_stored_gpu_vs_onnx_int8", {"texts": len(check), **cosines(reference, stored)})
        left = args.budget - (time.perf_counter() - started)
        if left < 40:
            save("sweep", {"skipped": f"{left:.0f} s of the budget left"})
            return
        from toolcat.search.encoders import device as devices

        where = "cuda" if devices.torch_gpu() else "cpu"
        if where == "cuda":
            many, _ = stored_texts(big, args.sweep_texts, seed=11)
        else:  # a dry run of the code path: a few texts (torch's CPU half precision is slow)
            many, check, reference = check[:20], check[:20], reference[:20]
        save("sweep", {"device": where, "rows": sweep(many, check, reference, where)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        save("done", {"load": load()})


if __name__ == "__main__":
    main()
