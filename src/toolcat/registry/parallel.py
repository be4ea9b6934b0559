"""Reading many manifests on every core.

Parsing, validating and tokenizing a manifest costs more than writing its rows does, so a
registration of many files hands whole files to worker processes (forked: they start with
toolcat imported) and the caller writes what comes back, in file order, in its one
transaction, while the workers read the next files. A worker's answer is checked before
it is trusted (its shape, and ``store.rows.check_rows``): a garbled or foreign one, or a
worker that died, is not taken for the manifest's: that file is read again in the calling
process, so the outcome is always the one a single process would reach.

Small registrations (less than ``MIN_PARALLEL_BYTES`` of manifests) stay in the calling
process: starting workers costs more than it saves there. So does a process running other
threads, where forking is unsafe.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ManifestError, ToolcatError
from ..models import Toolkit, ToolkitHead, check_head
from ..store.rows import ToolkitRows, check_rows, rows_of
from .manifest import load_manifest

# Workers cost ~0.1 s of CPU to start and warm, and a tenth more CPU per tool (answers are
# pickled and checked): on 2 cores at load 20, a call of 2,500 tools (~2 MB) took the same
# wall time with them, 100,000 tools in one call 1.7x less.
MIN_PARALLEL_BYTES = 1024 * 1024
MAX_WORKERS = 8
AHEAD = 4  # files a worker may have read that the caller has not taken yet
# A worker's collector passes every this many new objects (Python's default: 700). Parsing
# leaves almost no cycles, but at the default a worker spent ~5% of its CPU collecting, more
# as its kept terms grew (3,000 files of the 1M manifests: 90.8 against 85.8-87.9 us a
# tool); cyclic garbage is still collected, a few MB at most between passes.
WORKER_GC_OBJECTS = 50_000

Loaded = tuple[ToolkitHead, str, ToolkitRows]


def worker_count() -> int:
    """The cores this process may run on; ``TOOLCAT_REGISTER_WORKERS`` overrides (0 or 1:
    none), and a value that is not a whole number is refused like reindex's."""
    # reindex's workers count cores and read their variable the same way
    from ..search.batch_encoding import cores, count_from_env

    override = count_from_env("TOOLCAT_REGISTER_WORKERS", ToolcatError)
    return min(cores(), MAX_WORKERS) if override is None else override


def load_each(
    paths: Sequence[Path], workers: int | None = None, min_bytes: int | None = None
) -> Generator[Loaded | ManifestError, None, None]:
    """Each manifest loaded and its rows made, or its ``ManifestError``, in ``paths`` order,
    each as soon as it is ready (the caller writes one while workers read the next).

    ``workers`` processes share the files (default ``worker_count()``) when there are
    several files of at least ``min_bytes`` (default ``MIN_PARALLEL_BYTES``) in all; else
    this process reads them. At most ``AHEAD`` files per worker are read ahead of the
    caller, so memory stays bounded however many files there are.
    """
    count = min(worker_count() if workers is None else workers, len(paths))
    if min_bytes is None:
        min_bytes = MIN_PARALLEL_BYTES
    if count < 2 or not _can_fork() or _size(paths) < min_bytes:
        for path in paths:
            yield _load_here(path)
        return
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    _warm_up()
    done = 0
    pool = ProcessPoolExecutor(
        count, mp_context=multiprocessing.get_context("fork"), initializer=_in_worker
    )
    try:
        pending: collections.deque[Future[tuple[Any, ...]]] = collections.deque()
        # Frozen, the heap the workers share with us is left alone by their collections
        # (not copied page by page); a heap someone else froze is left as it is.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            pending.append(pool.submit(_work, str(paths[0])))  # forks the workers
        finally:
            if freeze:
                gc.unfreeze()
        while done < len(paths):
            while len(pending) < AHEAD * count and done + len(pending) < len(paths):
                pending.append(pool.submit(_work, str(paths[done + len(pending)])))
            try:
                answer = pending.popleft().result()
            except Exception:  # a worker died, none could start, or one failed:
                break  # this process reads the files left (a failure of its own is raised)
            done += 1
            yield _accept(paths[done - 1], answer)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for path in paths[done:]:
        yield _load_here(path)


WARM_TOOL = {"name": "t", "description": "d", "output_schema": {}, "annotations": {}}


def _warm_up() -> None:
    """Build what every worker would otherwise build for itself before its first file (the
    models' validators, the stemmer), so that the forked workers start with it."""
    from ..text.tokenize import tokenize

    rows_of(Toolkit.model_validate({"name": "warm", "version": "1", "tools": [WARM_TOOL]}))
    tokenize("warming up")


def _in_worker() -> None:
    """A worker leaves Ctrl-C to the caller (which stops the pool: no traceback from each
    worker) and dies with it (else a ``kill`` of the caller leaves the workers blocked on
    their pipes for ever)."""
    import signal

    from ..search.batch_encoding import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    gc.set_threshold(WORKER_GC_OBJECTS)


def _work(path: str) -> tuple[Any, ...]:
    """In a worker: one manifest's toolkit and rows, or its problems."""
    try:
        toolkit = load_manifest(path)
        return ("ok", path, toolkit.head(), rows_of(toolkit))
    except ManifestError as e:
        return ("error", path, _unchained(e))


def _unchained(error: ManifestError) -> ManifestError:
    """``error`` without the causes, contexts and tracebacks of it and its problems (none
    is pickled). Each ``ManifestError`` is in a cycle (its ``problems`` hold it), and
    through them held the parse's frames and the file's text (a YAML error's, ~60 times
    the file): freed only when the collector passes, at ``WORKER_GC_OBJECTS`` after
    ~1,250 failed JSON files (~1 GB of 1 MB files a worker)."""
    left: list[BaseException] = [error]
    seen: set[int] = set()
    while left:
        e = left.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        left += [chained for chained in (e.__cause__, e.__context__) if chained is not None]
        if isinstance(e, ManifestError):
            left += e.problems
        e.__cause__ = e.__context__ = e.__traceback__ = None
    return error


def _accept(path: Path, answer: Any) -> Loaded | ManifestError:
    """A worker's answer for ``path`` once checked; the file read here if it does not pass."""
    if type(answer) is tuple and len(answer) >= 3 and answer[1] == str(path):
        if answer[0] == "ok" and len(answer) == 4 and check_head(answer[2]) is None:
            if check_rows(answer[2], answer[3]) is None:
                return answer[2], str(path), answer[3]
        elif answer[0] == "error" and len(answer) == 3 and _plausible_error(answer[2]):
            return answer[2]  # type: ignore[no-any-return]
    return _load_here(path)


def _plausible_error(error: Any) -> bool:
    """A worker's ``ManifestError``: problems that hold text where text belongs."""
    if type(error) is not ManifestError or type(error.problems) is not list or not error.problems:
        return False
    return all(
        type(p) is ManifestError
        and type(p.reason) is str
        and all(v is None or type(v) is str for v in (p.file, p.toolkit, p.tool, p.field))
        for p in error.problems
    )


def _load_here(path: Path) -> Loaded | ManifestError:
    try:
        toolkit = load_manifest(path)
    except ManifestError as e:
        return e
    return toolkit.head(), str(path), rows_of(toolkit)


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _size(paths: Sequence[Path]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):  # reading it reports the problem
            total += os.stat(path).st_size
    return total
