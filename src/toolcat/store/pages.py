"""One file's bytes made those of another by writing only the blocks that differ.

A replica's change at 1M tools copied follow mode's whole 2.2 GB file and then wrote it all
to disk, where a one-toolkit change differs in a few megabytes (docs/many-hosts.md). Patching
the previous copy instead reads both files (from the page cache) and writes and syncs only
what changed. The result is the source's bytes whatever the target held before: every byte
is compared, none is taken on trust. In C (``_pages.c``) where it was built; the Python
below gives the same answer (tests/store/test_pages.py compares them).
"""

from __future__ import annotations

import os

try:
    from . import _pages
except ImportError:  # no C compiler where toolcat was installed
    _pages = None  # type: ignore[assignment]

NATIVE = True  # tests switch it off to compare the Python
CHUNK = 1 << 20  # bytes compared at once
BLOCK = 4096  # bytes written at least: a page of most file systems


def patch(source: int, target: int, size: int) -> tuple[int, int]:
    """Make the file open as ``target`` hold the first ``size`` bytes of ``source`` (both
    descriptors; ``target`` open for reading and writing), writing only the 4 KiB blocks
    that differ, then cut it there. Returns (bytes copied, bytes written): fewer copied
    when ``source`` ends sooner, and the target is cut at what was copied.

    Raises:
        OSError: Reading either file or writing the target failed (the target is then
            part old, part new: a copy to throw away).
    """
    if size < 0:
        raise ValueError("size must not be negative")
    if NATIVE and _pages is not None:
        copied, written = _pages.patch(source, target, size)
        return int(copied), int(written)
    offset = written = 0
    while offset < size:
        want = min(CHUNK, size - offset)
        data = _read_at(source, want, offset)
        if not data:
            break
        have = _read_at(target, len(data), offset)
        if have != data:
            start: int | None = None  # a run of differing blocks, written at once
            for i in range(0, len(data) + BLOCK, BLOCK):
                differs = i < len(data) and have[i : i + BLOCK] != data[i : i + BLOCK]
                if differs and start is None:
                    start = i
                elif not differs and start is not None:
                    _write_at(target, data[start:i], offset + start)
                    written += min(i, len(data)) - start
                    start = None
        offset += len(data)
        if len(data) < want:
            break
    os.ftruncate(target, offset)
    return offset, written


def _read_at(fd: int, count: int, offset: int) -> bytes:
    """Up to ``count`` bytes at ``offset``: fewer only at the file's end."""
    parts: list[bytes] = []
    done = 0
    while done < count:
        part = os.pread(fd, count - done, offset + done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        put = os.pwrite(fd, view, offset)
        view, offset = view[put:], offset + put
