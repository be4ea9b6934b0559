"""What every encoder of an exported model shares: the export itself (``Export``: the graph,
its tokenizer and their recorded sha256, checked before use), where exports and the graphs saved
from them live in the user cache, and which graph queries run (``int8_queries``).

``onnx`` runs an export on onnxruntime, ``torch`` on torch (a GPU); both read it through
``checked_export``. See ``onnx`` for the cache and the graphs it holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bumped when the exported graph or the files beside it change shape (2: digests recorded,
# folders keyed by the model's content).
FORMAT = 2
OUTPUT = "sentence_embedding"
# The optimised graph and its weights inside a ``fast_dir``.
FAST_GRAPH = "model.onnx"
FAST_WEIGHTS = "model.onnx.data"
# The int8 query graph: 8-bit weight blocks of this many input rows (16: no better on eval,
# 128: cosine 0.998 minimum; README "Embedding and hybrid speed").
INT8_BLOCK = 32
INT8_FAILED = "failed.txt"
# Beside a saved graph: the sha256 of its files, checked before a session is made from them.
SAVED_DIGESTS = "sha256.json"
# In ``cache_root()``: the digests of files already read, by path and stat (see ``digest``).
DIGEST_STAMPS = "digests.json"
MAX_DIGEST_STAMPS = 64 * 1024 * 1024  # a path and a digest per file read: far below this


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/toolcat/onnx`` (default ``~/.cache/toolcat/onnx``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toolcat" / "onnx"


def fingerprint(location: str) -> str:
    """A digest of a model folder's content (each file's name and sha256), or of the name
    alone when the model is not a folder. Content, not where it lies: every venv that holds
    the same model shares one export. Each file is read once per path (``digest``)."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    root = Path(location)
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                digest.update(f"{path.relative_to(root).as_posix()} {file_digest(path)}\n".encode())
    else:
        digest.update(location.encode())
    return digest.hexdigest()[:16]


_digests: dict[str, tuple[tuple[int, ...], str]] = {}
_digests_lock = threading.Lock()


def _stat_key(path: Path) -> tuple[int, ...]:
    """What changes when a file is rewritten, replaced or renamed over: size, inode and
    both times (``st_ctime`` cannot be set back by a user)."""
    stat = path.stat()
    return (stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)


def file_digest(path: Path) -> str:
    """The sha256 of a file, read once per (path, size, inode, mtime, ctime): hashing 90 MB
    costs ~50 ms, which a one-shot search must not pay at every start. Known digests are
    kept in the process and in ``cache_root()/digests.json`` (a lost update costs a read)."""
    key = _stat_key(path)
    name = str(path.resolve())
    with _digests_lock:
        if not _digests:
            with contextlib.suppress(OSError, ValueError, TypeError, IndexError, KeyError):
                stored = stored_digests(cache_root())
                _digests.update({k: (tuple(v[0]), str(v[1])) for k, v in stored.items()})
        known = _digests.get(name)
        if known is not None and known[0] == key:
            return known[1]
    found = _hash(path)
    with _digests_lock:
        _digests[name] = (key, found)
        with contextlib.suppress(OSError):  # files gone since are forgotten
            kept = {k: list(v) for k, v in _digests.items() if os.path.exists(k)}
            write_json(cache_root() / DIGEST_STAMPS, kept)
    return found


def _hash(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def record_digests(folder: Path, names: list[str]) -> dict[str, str]:
    """The sha256 of the files ``names`` of a folder being written (those that exist)."""
    return {n: _hash(folder / n) for n in names if (folder / n).is_file()}


def write_json(path: Path, data: object) -> None:
    """Write ``path`` aside, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    aside.write_text(json.dumps(data))
    aside.replace(path)


class ExportMismatch(Exception):
    """A file of an export does not hash to the digest recorded for it."""


def check_digests(folder: Path, expected: dict[str, str]) -> None:
    """Raise ``ExportMismatch`` naming the first file of ``folder`` that is missing, is not
    a regular file, or does not hash to its ``expected`` sha256. An export's files are
    written by toolcat as regular files: a link (to ``/dev/zero``, say), a FIFO or a device
    in their place is damage, reported as such and never read (a FIFO would block)."""
    if not expected:
        raise ExportMismatch("no digests recorded")
    for name, sha in sorted(expected.items()):
        path = folder / name
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            raise ExportMismatch(f"{name} is missing") from None
        except OSError as e:
            raise ExportMismatch(f"{name} cannot be read ({e.strerror})") from None
        if not stat.S_ISREG(mode):
            raise ExportMismatch(f"{name} is not a regular file (a link, FIFO or device)")
        if file_digest(path) != sha:
            raise ExportMismatch(f"{name} does not match its recorded sha256")


@dataclass(frozen=True)
class Export:
    """An exported model: the folder holding its graph (``model.onnx``) and tokenizer
    (``tokenizer.json``), their recorded sha256, and the folder where the graphs saved for
    this onnxruntime live (``saved``: the export's own folder in the cache, or the cache
    folder of a packaged model)."""

    model_id: str
    folder: Path
    sha256: dict[str, str]
    max_tokens: int
    saved: Path
    inputs: tuple[str, ...] = ()
    int8: bool = False  # the graph itself is int8 (a packaged model quantised when trained)

    @property
    def digest(self) -> str:
        """What produced a vector: the graph's and tokenizer's digests in one."""
        text = "\n".join(f"{k} {v}" for k, v in sorted(self.sha256.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def check(self) -> None:
        """Raise ``ExportMismatch`` when the graph or the tokenizer is not what was recorded."""
        check_digests(self.folder, self.sha256)


MAX_META = 1024 * 1024  # an export's description is a few KB


def _read_meta(path: Path) -> Any:
    """An export's JSON description, read as a small regular file: a link, a FIFO or a
    device there is ``ExportMismatch`` (damage), never followed or waited on."""
    from ...files.checks import read_regular

    try:
        data = read_regular(path, limit=MAX_META)
    except FileNotFoundError:
        raise
    except (ValueError, OSError):  # OSError: a symlink (O_NOFOLLOW)
        raise ExportMismatch(f"{path.name} is not a regular file of at most 1 MB") from None
    return json.loads(data)


def read_export(folder: Path) -> Export:
    """The export in ``folder`` (a cache folder with ``meta.json``, or a packaged model
    with ``retriever.json``)."""
    packaged = folder / "retriever.json"
    if os.path.lexists(packaged):
        meta = _read_meta(packaged)
        sha = {str(k): str(v) for k, v in dict(meta["sha256"]).items()}
        model_id = str(meta["model_id"])
        key = hashlib.sha256(json.dumps(sha, sort_keys=True).encode()).hexdigest()[:16]
        return Export(
            model_id,
            folder,
            sha,
            int(meta["max_seq_length"]),
            _slot(model_id, key),
            int8=meta.get("quantization") == "int8",
        )
    meta = _read_meta(folder / "meta.json")
    return Export(
        str(meta["model"]),
        folder,
        {str(k): str(v) for k, v in dict(meta.get("sha256") or {}).items()},
        int(meta["max_tokens"]),
        folder,
        tuple(meta["inputs"]),
    )


def as_export(source: Export | Path) -> Export:
    return source if isinstance(source, Export) else read_export(source)


def checked_export(source: Export | Path) -> tuple[Export, Any]:
    """The export (its files checked against their digests) and its tokenizer, set up as
    every encoder of it runs it: no padding, truncated at the export's length."""
    from tokenizers import Tokenizer

    export = as_export(source)
    export.check()
    tokenizer = Tokenizer.from_file(str(export.folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=export.max_tokens)
    return export, tokenizer


def _slot(model_id: str, key: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_id)[-60:].strip("._") or "model"
    return cache_root() / f"{slug}-{key}"


def export_dir(model_id: str, location: str) -> Path:
    """Where the export of ``model_id`` (loaded from ``location``) lives: for a packaged
    model (a folder with ``retriever.json``), where its saved graphs live."""
    if (Path(location) / "retriever.json").exists():
        return read_export(Path(location)).saved
    key = hashlib.sha256(f"{model_id}\n{fingerprint(location)}".encode()).hexdigest()[:16]
    return _slot(model_id, key)


def ort_version() -> str:
    """The installed onnxruntime's version, read from its package metadata (not imported)."""
    from importlib import metadata

    for name in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def fast_dir(folder: Path, version: str) -> Path:
    """Where the optimised graph for onnxruntime ``version`` lives inside an export."""
    return folder / f"fast-ort{re.sub(r'[^A-Za-z0-9_.+-]+', '_', version)}"


def int8_dir(folder: Path, version: str) -> Path:
    """Where the int8 query graph for onnxruntime ``version`` lives inside an export."""
    return folder / f"int8-b{INT8_BLOCK}-ort{re.sub(r'[^A-Za-z0-9_.+-]+', '_', version)}"


def fast_current(folder: Path, int8: bool = False) -> bool:
    """Whether ``folder`` holds the optimised graph for the installed onnxruntime and, with
    ``int8``, the int8 one (or the note that this onnxruntime cannot make it)."""
    version = ort_version()
    int8_folder = int8_dir(folder, version)
    return (fast_dir(folder, version) / FAST_GRAPH).exists() and (
        not int8 or (int8_folder / FAST_GRAPH).exists() or (int8_folder / INT8_FAILED).exists()
    )


def int8_failed(folder: Path, why: str) -> None:
    """Note that this onnxruntime cannot make the int8 graph, so that a reindex does not
    try again at every run (another onnxruntime version tries in its own folder)."""
    target = int8_dir(folder, ort_version())
    target.mkdir(parents=True, exist_ok=True)
    (target / INT8_FAILED).write_text(why + "\n")


# Texts run in batches of like token counts (see ``OnnxEncoder.encode``): a text this many
# times longer than its batch's shortest starts the next batch, and a batch holds at most
# ``BATCH_TOKENS`` token slots (rows x longest). Padding a short text to a long one costs as
# much as a long text (a request and its parts padded to the request cost 1.5x the grouped
# runs, in CPU time); one run per text re-reads the weights each time (MiniLM's 22M fp32
# parameters do not stay in cache), so texts of like length share a run. On reindex batches
# the ratio mattered a little (1.25: 104, 1.5: 96, 2: 84 tools per CPU-second), the budget
# not at all (512 to 8192 within 3%).
PAD_RATIO = 1.25
BATCH_TOKENS = 4096
# On a GPU: token slots per pass, enough to keep it busy (activations of MiniLM at 65536
# tokens: ~0.5 GB at fp16).
GPU_BATCH_TOKENS = 65536


# Queries through the int8 graph unless TOOLCAT_ONNX_INT8 says otherwise ("1" on, "0" off).
# Off for now: it passes the eval gate (R@1 and R@5 within 0.5 points on every source, README
# "Embedding and hybrid speed"), but it turns one near-tie of tests/search/test_fusion.py
# ("book me somewhere to eat tonight", medium catalog: 0.9943 against 0.9885 at fp32) the
# other way, through the min-max normalised cosines; to be decided with the fusion.
INT8_QUERIES = False


def int8_queries() -> bool:
    """Whether queries run the int8 graph (``INT8_QUERIES``, or ``TOOLCAT_ONNX_INT8``)."""
    flag = os.environ.get("TOOLCAT_ONNX_INT8")
    return INT8_QUERIES if flag is None or not flag.strip() else flag.strip() != "0"


def forget_digests(root: Path) -> None:
    """Forget the digests of files that are gone (after the cache was pruned)."""
    with _digests_lock:
        _digests.clear()
        stored = stored_digests(root)
        with contextlib.suppress(OSError):
            alive = {k: v for k, v in stored.items() if Path(k).exists()}
            write_json(root / DIGEST_STAMPS, alive)


def stored_digests(root: Path) -> dict[str, Any]:
    """``digests.json`` in ``root``: a small regular file holding an object, else empty."""
    from ...files.checks import read_regular

    try:
        stored = json.loads(read_regular(root / DIGEST_STAMPS, limit=MAX_DIGEST_STAMPS))
    except (OSError, ValueError, RecursionError):
        return {}
    return stored if type(stored) is dict else {}
