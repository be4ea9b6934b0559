"""Encoding reindex batches: the seam between reindex and whatever runs the model.

``reindex`` hands over batches of (key, text) in the order it will store them and gets
back, in that order, one unit float32 vector per text (``BatchEncoder.encode_batches``).
Two encoders exist:

- ``InProcess``: the process's own encoder (the ONNX export, sentence-transformers for a
  model without one, a GPU, or the torch module at bfloat16 on a CPU with AMX), one batch
  at a time.
- ``WorkerPool``: one ONNX session per worker process, one thread each, on every core the
  process may use; a few batches in flight, so that the parent stores one batch while the
  workers encode the next. On 2 cores this gave more tools per CPU-second than one session
  on two intra-op threads (docs/benchmarks.md, "Reindex at the hardware's speed").

A worker's output comes from another process, so it is checked before it is stored: the
keys it answers for, the count, shape and dtype of its vectors, that they are finite and of
unit length, and the digest of the graph that made them. A worker that dies or answers
wrong stops the reindex with one ``EmbeddingError`` line; what was stored before stays (it
is correct, and the next reindex resumes after it), nothing after it is written. Workers
ignore Ctrl-C: the parent stops them.

A GPU encoder slots in as another ``BatchEncoder``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import EmbeddingError, ToolcatError

if TYPE_CHECKING:
    import numpy as np

    from .encoders.export import Export

Batch = tuple[Sequence[str], Sequence[str]]  # (keys, texts)

# Fewer texts than this are encoded in process: starting workers (a second or two each:
# onnxruntime's import and session) costs more than they save.
POOL_MIN_TEXTS = 256
# How far a stored vector's length may be from 1.
UNIT_TOLERANCE = 1e-3


class BatchEncoder(Protocol):
    """Encodes batches of texts in order; ``close`` releases what it started; ``device``
    says what encodes them, in a few words (the reindex report's)."""

    device: str

    def encode_batches(self, batches: Iterable[Batch]) -> Iterator[tuple[list[str], np.ndarray]]:
        """Yield (keys, vectors) for each batch, in the order given."""
        ...

    def close(self) -> None: ...


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# More worker processes than this per core only share the cores and multiply the memory
# (each holds its own model or manifests): a larger setting is taken as this.
MAX_WORKERS_PER_CORE = 4


def count_from_env(name: str, error: type[ToolcatError]) -> int | None:
    """The whole number an environment variable sets (negative counts as 0, more than
    ``MAX_WORKERS_PER_CORE`` per core as that), or None when it is unset or blank; any
    other value is refused with ``error``, never ignored."""
    flag = os.environ.get(name, "").strip()
    if not flag:
        return None
    try:
        wanted = int(flag)
    except ValueError:
        raise error(f"{name} must be a whole number, not {flag!r}") from None
    return min(max(0, wanted), MAX_WORKERS_PER_CORE * cores())


def die_with_parent() -> None:
    """In a worker process: be killed when the process that started it dies, however it
    dies (``kill -9``, SIGTERM's default), instead of waiting on its pipes for ever.
    Linux only (``prctl``); elsewhere a worker ends when it next reads or writes a pipe
    the parent held."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def workers_wanted(texts: int) -> int:
    """Worker processes for a reindex of ``texts`` texts: ``TOOLCAT_REINDEX_WORKERS`` when
    set (0: encode in this process, on onnxruntime's threads), else one per core for a job
    worth starting them for, else 0."""
    wanted = count_from_env("TOOLCAT_REINDEX_WORKERS", EmbeddingError)
    if wanted is not None:
        return wanted
    return cores() if texts >= POOL_MIN_TEXTS and cores() > 1 else 0


class InProcess:
    """Batches encoded one after the other by this process: ``encode`` turns a list of
    texts into their vectors; ``device`` says what runs it."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], device: str) -> None:
        self.encode: Callable[[list[str]], np.ndarray] | None = encode
        self.device = device

    def encode_batches(self, batches: Iterable[Batch]) -> Iterator[tuple[list[str], np.ndarray]]:
        for keys, texts in batches:
            assert self.encode is not None, "encode_batches after close"
            yield list(keys), self.encode(list(texts))

    def close(self) -> None:
        self.encode = None  # a model loaded for this job alone is freed with it


# A worker's answer header is one JSON line of at most this many bytes.
MAX_HEADER = 1 << 22


def _send(request: bytes, process: Any) -> None:
    process.stdin.write(request)
    process.stdin.flush()


class WorkerPool:
    """Batches encoded by ``workers`` processes (``python -m toolcat.search.encode_worker``),
    each running the export on one thread, handed batches in turn, one at a time.

    Plain child processes talking over pipes, not ``multiprocessing``: its spawned children
    import the parent's main module again (``python -m toolcat`` would run the CLI in each),
    and a fork would inherit onnxruntime's threads. A request is one JSON line (keys and
    texts); an answer is one JSON line (keys, the graph's digest, rows, width) followed by
    the vectors as little-endian float32 bytes, read only once the line checks out.

    Args:
        export: The export every worker loads (checked against its digests there too).
        workers: How many processes.
        dimension: The length every vector must have.
    """

    def __init__(self, export: Export, workers: int, dimension: int) -> None:
        import subprocess
        import tempfile

        self.export = export
        self.dimension = dimension
        self.device = "cpu (onnxruntime)"
        src = str(Path(__file__).resolve().parents[2])  # the folder toolcat is imported from
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p),
        }
        self._errors: list[Any] = []
        self._workers: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(max(1, workers)):
                errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
                self._errors.append(errors)
                self._workers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "toolcat.search.encode_worker",
                            str(export.folder),
                            export.digest,
                        ],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=errors,
                        env=env,
                    )
                )
        except BaseException:
            self.close()
            raise

    def encode_batches(self, batches: Iterable[Batch]) -> Iterator[tuple[list[str], np.ndarray]]:
        import json

        busy: deque[tuple[int, list[str]]] = deque()  # (worker, keys), in the order sent
        queued = iter(batches)
        idle = deque(range(len(self._workers)))

        def hand_out() -> None:
            """The next batches to the idle workers: one request each at most, so a
            worker's pipes never hold more than one request and one answer."""
            while idle and (batch := next(queued, None)) is not None:
                worker, keys = idle.popleft(), list(batch[0])
                request = (json.dumps({"keys": keys, "texts": list(batch[1])}) + "\n").encode()
                self._talk(worker, partial(_send, request))
                busy.append((worker, keys))

        hand_out()
        while busy:
            worker, keys = busy.popleft()
            vectors = self._answer(worker, keys)
            idle.append(worker)
            hand_out()  # before the caller stores this batch: the worker encodes meanwhile
            yield keys, vectors

    def _talk(self, worker: int, act: Any) -> Any:
        try:
            return act(self._workers[worker])
        except (OSError, ValueError) as e:
            raise self._failed(worker, f"{type(e).__name__}: {e}") from None

    def _failed(self, worker: int, why: str) -> EmbeddingError:
        """The error for a worker that stopped answering, with the last line it wrote."""
        process = self._workers[worker]
        with contextlib.suppress(Exception):
            process.wait(timeout=1)
        errors = self._errors[worker]
        errors.seek(0)
        lines = [x for x in errors.read()[-4000:].decode(errors="replace").splitlines() if x]
        said = lines[-1].strip()[:200] if lines else why
        code = process.returncode
        return EmbeddingError(
            f"a reindex worker failed ({said}"
            + (f"; exit status {code}" if code else "")
            + "); what was stored before it is kept: run `toolcat reindex` again"
        )

    def _answer(self, worker: int, keys: list[str]) -> np.ndarray:
        """Read and check a worker's answer for ``keys``."""
        import json

        import numpy as np

        stdout = self._workers[worker].stdout
        assert stdout is not None
        line = self._talk(worker, lambda w: stdout.readline(MAX_HEADER))
        if not line:
            raise self._failed(worker, "it stopped")
        try:
            header = json.loads(line)
            rows, width = int(header["rows"]), int(header["width"])
            answered, digest = header["keys"], header["digest"]
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            raise self.wrong("an unreadable header") from None
        if answered != keys:
            raise self.wrong("for other tools than it was asked")
        if digest != self.export.digest:
            raise self.wrong(f"vectors of another graph ({str(digest)[:40]!r})")
        if (rows, width) != (len(keys), self.dimension):
            raise self.wrong(f"{rows}x{width} vectors for {len(keys)} texts of {self.dimension}")
        size = rows * width * 4
        data = self._talk(worker, lambda w: stdout.read(size))
        if len(data) != size:
            raise self._failed(worker, "it stopped mid-answer")
        return self.checked(np.frombuffer(data, dtype="<f4").reshape(rows, width))

    @staticmethod
    def wrong(what: str) -> EmbeddingError:
        return EmbeddingError(
            f"a reindex worker answered {what}; nothing of that batch was stored: "
            "run `toolcat reindex` again"
        )

    def checked(self, vectors: np.ndarray) -> np.ndarray:
        """``vectors`` when finite and of unit length, else ``EmbeddingError``."""
        import numpy as np

        if not np.isfinite(vectors).all():
            raise self.wrong("vectors that are not finite")
        if len(vectors) and np.abs(np.linalg.norm(vectors, axis=1) - 1).max() > UNIT_TOLERANCE:
            raise self.wrong("vectors that are not of unit length")
        return vectors

    def close(self) -> None:
        """Stop the workers now, whatever they are doing (after Ctrl-C or a failure,
        nothing is waited for)."""
        for process in self._workers:
            if process.poll() is None:
                process.kill()
        for process in self._workers:
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        for errors in self._errors:
            errors.close()
        self._workers, self._errors = [], []


def encoder_for(
    embedder: Any, texts: int, batch_size: int, workers: int | None = None
) -> BatchEncoder:
    """The encoder for a reindex of ``texts`` texts with ``embedder``. When the model runs
    as an ONNX export with onnxruntime on the CPU and workers are wanted
    (``workers_wanted``): the torch module at bfloat16 in this process for a large job on a
    CPU with AMX (``device.bulk_cpu_encoder``), else a ``WorkerPool``. Otherwise
    ``InProcess`` with the embedder (a GPU, or torch on the CPU on its own threads: workers
    run onnxruntime, which would make other vectors than the encoder reported)."""
    from .encoders import device
    from .encoders.onnx import OnnxEncoder  # what workers run (the module needs no numpy)

    count = workers_wanted(texts) if workers is None else workers
    fast = embedder.document_encoder() if count > 0 else None
    if not isinstance(fast, OnnxEncoder) or fast.device != "cpu":
        return InProcess(
            partial(embedder.encode, batch_size=batch_size), embedder.document_device()
        )
    bulk = device.bulk_cpu_encoder(fast, texts)
    if bulk is not None:
        return InProcess(bulk.encode, device.describe(bulk))
    return WorkerPool(fast.export, count, fast.dimension)
