"""Where reindex encodes documents: a GPU when the machine has one, else onnxruntime on the
CPU, chosen with no change by the user (``TOOLCAT_REINDEX_DEVICE`` overrides it).

A GPU is used through onnxruntime's CUDA provider when the installed onnxruntime has one
(``onnxruntime-gpu``), else through torch (``torch_encoder``: the same graph's weights in a
torch module) when torch sees a GPU and ``onnx`` is installed to read the graph. Both give
the vectors of the CPU path (cosine ≥ 0.999), so the catalog records the same model and
producer whichever made them. Queries are always encoded on the CPU (one at a time, a GPU
would only add a copy).

torch is imported only where its build was made for a GPU (CUDA or ROCm, read from its
``version.py``), or for a large job on a CPU with AMX (``bulk_cpu_encoder``): on any other
machine with a CPU build of torch, reindex never imports it.

On a CPU with AMX bfloat16 tiles (Intel Xeon from Sapphire Rapids on), a reindex of
``AUTO_BF16_TEXTS`` texts or more runs the same torch module there at bfloat16, when torch
and ``onnx`` are installed and the module's load-time checks keep its vectors and agree
with onnxruntime's: 1.9-2.3x onnxruntime's int8 graph per CPU-second, 3.3x by wall at 25,000
tools on two cores (docs/benchmarks.md). Anything short of that leaves the job on
onnxruntime, saying nothing: ``auto`` never fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from ...errors import EmbeddingError

ENV = "TOOLCAT_REINDEX_DEVICE"
# auto: a GPU when there is one; cpu: onnxruntime on the CPU; gpu: a GPU or a clear error;
# torch: the GPU path's torch module on the CPU, float32 (to check it against onnxruntime);
# bf16: the same module on the CPU with bfloat16 products, kept only while they keep its
# float32 vectors (``TorchEncoder``'s check): on a CPU with AMX (Intel Xeon from Sapphire
# Rapids on) 2.4-4.6x onnxruntime's int8 texts per CPU-second (docs/benchmarks.md).
CHOICES = ("auto", "cpu", "gpu", "torch", "bf16")
# Texts per encode call that reindex hands a GPU encoder: its default batches of 64 would
# leave the GPU idle between commits.
GPU_TEXTS_PER_CALL = 16384


def choice() -> str:
    """``TOOLCAT_REINDEX_DEVICE`` (default ``auto``); anything else is a one-line error."""
    wanted = os.environ.get(ENV, "").strip().lower() or "auto"
    if wanted not in CHOICES:
        # the value cut short: an error names what was set, it never repeats all of it
        raise EmbeddingError(f"{ENV}={wanted!r:.40}: expected one of {', '.join(CHOICES)}")
    return wanted


def ort_cuda() -> bool:
    """Whether the installed onnxruntime has its CUDA provider (onnxruntime-gpu)."""
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def torch_gpu() -> bool:
    """Whether torch is a GPU build that sees a GPU (imported only when it is a GPU build)."""
    spec = _spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        source = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return False
    if not re.search(r"^(?:cuda|hip)\b[^=\n]*=\s*['\"]", source, re.MULTILINE):
        return False  # a CPU build: cuda = None
    import torch

    return bool(torch.cuda.is_available())


def gpu_encoder(documents: Any) -> tuple[Any, str]:
    """(an encoder, for ``TOOLCAT_REINDEX_DEVICE``, of the export that ``documents`` (an
    ``OnnxEncoder`` on the CPU) runs, "") when it asks for a GPU and one can be used, else
    (None, why not: "" when the CPU was asked for or there is no GPU). ``gpu`` without a
    usable GPU, and ``torch`` or ``bf16`` that cannot load or would not give onnxruntime's
    vectors, raise ``EmbeddingError``."""
    wanted = choice()
    if wanted == "cpu":
        return None, ""
    if wanted in ("torch", "bf16"):
        return _torch(documents, "cpu", "bfloat16" if wanted == "bf16" else "float32"), ""
    tried: list[str] = []
    if ort_cuda():
        from .onnx import OnnxEncoder

        try:
            return OnnxEncoder(documents.export.folder, cuda=True), ""
        except Exception as e:  # a graph whose operators the provider lacks
            tried.append(f"onnxruntime's CUDA provider failed ({type(e).__name__})")
    if torch_gpu():
        if _spec("onnx") is None:
            tried.append("torch sees a GPU, but reading the graph needs onnx (pip install onnx)")
        else:
            try:
                return _torch(documents, "cuda", TORCH_GPU_DTYPE), ""
            except EmbeddingError as e:
                tried.append(str(e))
    if wanted == "gpu":
        raise EmbeddingError(
            f"{ENV}=gpu: no GPU to encode with "
            f"({'; '.join(tried) or 'neither onnxruntime nor torch sees one'})"
        )
    return None, "; ".join(tried)


# A reindex of this many texts or more goes to bfloat16 on a CPU with AMX (``auto``): torch's
# import, the module's build and its check take ~2 s and ~400 MB, against ~8 minutes of
# onnxruntime on two cores at this size.
AUTO_BF16_TEXTS = 20_000


def cpu_bf16_tiles(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has AMX bfloat16 tiles (Linux: ``amx_bf16`` among the flags)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return "amx_bf16" in line.split()
    except OSError:
        pass
    return False


def bulk_cpu_encoder(documents: Any, texts: int) -> Any:
    """For ``auto``: the torch module of the export that ``documents`` (an ``OnnxEncoder``
    on the CPU) runs, at bfloat16 on the CPU, for a job of ``texts`` texts, when the job is
    large, the CPU has AMX, torch and onnx are installed, the module keeps its vectors at
    bfloat16 and they are onnxruntime's (``agrees``); else None (onnxruntime)."""
    if (
        texts < AUTO_BF16_TEXTS
        or choice() != "auto"
        or not cpu_bf16_tiles()
        or _spec("torch") is None
        or _spec("onnx") is None
    ):
        return None
    try:
        encoder = _torch(documents, "cpu", "bfloat16")
    except EmbeddingError:
        return None  # onnxruntime, as without torch
    return encoder if encoder.engine == "torch bfloat16" else None


# The torch module stands in for onnxruntime only when their vectors of a few real texts
# agree at this cosine or more (the packaged retriever's: 0.9998 at bfloat16). A graph it
# rebuilds but that computes something else (CLS pooling, as the bge models export, or
# RoBERTa's positions) would otherwise be stored under the export's digest.
AGREEMENT_COSINE = 0.999


def agrees(encoder: Any, documents: Any) -> bool:
    """Whether ``encoder`` gives the vectors of ``documents`` (onnxruntime) for the torch
    module's check texts at ``AGREEMENT_COSINE`` or more."""
    from .torch import SELF_CHECK_TEXTS, unit_cosines

    texts = [*SELF_CHECK_TEXTS, " ".join(SELF_CHECK_TEXTS * 20)]
    try:
        cosines = unit_cosines(encoder.encode(texts), documents.encode(texts))
    except Exception:
        return False
    return bool(cosines.min() >= AGREEMENT_COSINE)


def _spec(name: str) -> Any:
    """``importlib.util.find_spec(name)``, or None where it cannot say (a module put in
    ``sys.modules`` without a spec, such as a stub, raises ValueError there)."""
    try:
        return importlib.util.find_spec(name)
    except (ValueError, ImportError):
        return None


# The matrix products' precision on a GPU: float16 autocast kept cosine ≥ 0.999 against the
# int8 onnxruntime vectors (docs/benchmarks.md "Reindex on a GPU").
TORCH_GPU_DTYPE = "float16"


def _torch(documents: Any, device: str, dtype: str) -> Any:
    """The torch encoder of the export ``documents`` (an ``OnnxEncoder`` on the CPU) runs,
    when it gives onnxruntime's vectors (``agrees``); else ``EmbeddingError``. Built from
    the export as loaded, not its folder read again: files changed since are refused,
    never another graph's vectors stored under its digest."""
    from .torch import TorchEncoder

    name = documents.export.folder.name
    try:
        encoder = TorchEncoder(documents.export, device=device, dtype=dtype)
    except Exception as e:
        raise EmbeddingError(
            f"the torch encoder of {name} cannot load ({type(e).__name__}: {str(e)[:200]})"
        ) from e
    if not agrees(encoder, documents):
        raise EmbeddingError(
            f"the torch encoder of {name} does not give onnxruntime's vectors (a graph other "
            "than a mean-pooled BERT encoder); reindex with TOOLCAT_REINDEX_DEVICE=cpu"
        )
    return encoder


def describe(encoder: Any) -> str:
    """What encodes documents, in a few words (the reindex report's ``device``)."""
    if encoder is None:
        return "cpu (sentence-transformers)"
    return f"{encoder.device} ({encoder.engine})"
