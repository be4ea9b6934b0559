"""Reading many manifests on every core.

Parsing, validating and tokenizing a manifest costs more than writing its rows does, so a
registration of many files hands whole files to worker processes (forked: they start with
toolcat imported) and the caller writes what comes back, in file order, in its one
transaction, while the workers read the next files. A worker's answer is checked before
it is trusted (its shape, and ``store.rows.check_rows``): a garbled or foreign one, or a
worker that died, is not taken for the manifest's: that file is read again in the calling
process, so the outcome is always the one a single process would reach.

Small registrations (a few files, less than ``MIN_PARALLEL_BYTES``) stay in the calling
process: starting workers costs more than it saves there. So does a process running other
threads, where forking is unsafe.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ManifestError
from ..models import Toolkit
from ..store.rows import ToolkitRows, check_rows, rows_of
from .manifest import load_manifest

MIN_PARALLEL_BYTES = 256 * 1024  # ~150 tools of JSON; a fork and its answers cost ~20 ms
MAX_WORKERS = 8
AHEAD = 4  # files a worker may have read that the caller has not taken yet

Loaded = tuple[Toolkit, str, ToolkitRows]


def worker_count() -> int:
    """The cores this process may run on, or 1 (no workers) when other work already keeps
    them busy; ``TOOLCAT_REGISTER_WORKERS`` overrides.

    Workers cost a quarter more CPU in all (each warms its own caches; answers are pickled
    and checked): measured on 2 cores at load 15-20, they took 26% more CPU for the same
    wall time, so they are used only where a core is idle for them."""
    override = os.environ.get("TOOLCAT_REGISTER_WORKERS", "").strip()
    if override.isdigit():
        return int(override)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    with contextlib.suppress(OSError, AttributeError):
        if os.getloadavg()[0] >= cores:
            return 1
    return min(cores, MAX_WORKERS)


def load_each(
    paths: Sequence[Path], workers: int | None = None, min_bytes: int = MIN_PARALLEL_BYTES
) -> Generator[Loaded | ManifestError, None, None]:
    """Each manifest loaded and its rows made, or its ``ManifestError``, in ``paths`` order,
    each as soon as it is ready (the caller writes one while workers read the next).

    ``workers`` processes share the files (default ``worker_count()``) when there are
    several files of at least ``min_bytes`` in all; else this process reads them. At most
    ``AHEAD`` files per worker are read ahead of the caller, so memory stays bounded
    however many files there are.
    """
    count = min(worker_count() if workers is None else workers, len(paths))
    if count < 2 or not _can_fork() or _size(paths) < min_bytes:
        for path in paths:
            yield _load_here(path)
        return
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    done = 0
    pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork"))
    try:
        pending: collections.deque[Future[tuple[Any, ...]]] = collections.deque()
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


def _work(path: str) -> tuple[Any, ...]:
    """In a worker: one manifest's toolkit and rows, or its problems."""
    try:
        toolkit = load_manifest(path)
        return ("ok", path, toolkit, rows_of(toolkit))
    except ManifestError as e:
        return ("error", path, e)


def _accept(path: Path, answer: Any) -> Loaded | ManifestError:
    """A worker's answer for ``path`` once checked; the file read here if it does not pass."""
    if type(answer) is tuple and len(answer) >= 3 and answer[1] == str(path):
        if answer[0] == "ok" and len(answer) == 4 and type(answer[2]) is Toolkit:
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
    return toolkit, str(path), rows_of(toolkit)


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _size(paths: Sequence[Path]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):  # reading it reports the problem
            total += os.stat(path).st_size
    return total
