"""What an index saved beside the catalog may trust of its folder and files.

The saved BM25 index (``lexical_file``, ``<catalog>.bm25``) and the vectors' shortlist
(``ann``, ``<catalog>.ann``) are derived caches read back from disk, so each is checked before
it is trusted, the same way:

- the folder is trusted like the catalog: a real folder (not a symlink), owned by this user or
  the catalog's owner, that not everyone may write; else nothing in it is read, written or
  deleted (a symlinked folder planted in a shared directory would otherwise have a save write
  there and its clean-up delete someone's files);
- files are opened without following symlinks and must be regular files (not a FIFO or a
  device) of the size recorded, or at most a limit for a stamp;
- one process builds and saves at a time (an ``flock`` on ``lock``); another waits and loads
  what it saved.

Clean-ups elsewhere (the ONNX export cache, the artifacts folder) use the same checks:
``checked_folder`` for the folder they sweep, ``own_entries`` for what they may delete in it
(names of their own pattern, owned by this user, never a symlink) and ``remove_entry``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

LOCK = "lock"
STAMP = "index.json"  # what a saved index is valid for, and the files it names
STAGING = re.compile(re.escape(STAMP) + r"\.[0-9a-f]{32}")  # a stamp being written
MAX_STAMP = 1 << 20  # a stamp is a few hundred bytes: a bigger one is not ours
# How long a process waits for another's build before building in memory itself.
LOCK_WAIT_S = 900.0


def trusted_folder(root: Path, catalog_path: str, create: bool = False) -> Path | None:
    """``root`` when it may be trusted like the catalog at ``catalog_path`` (made if
    asked): a real folder, not a symlink, owned by this user or the catalog's owner and
    not writable by everyone. None otherwise: then nothing in it is read or written."""
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                root.mkdir(mode=0o755)
        owners = {os.geteuid(), os.stat(catalog_path).st_uid}
    except OSError:
        return None
    return checked_folder(root, owners)


def checked_folder(root: Path, owners: Collection[int], forbidden: int = 0o002) -> Path | None:
    """``root`` when it is a real folder (not a symlink, not a file) owned by one of
    ``owners`` whose mode has none of the ``forbidden`` bits (default: everyone may
    write); None otherwise."""
    try:
        info = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners or info.st_mode & forbidden:
        return None
    return root


def own_entries(root: Path, pattern: re.Pattern[str]) -> list[tuple[Path, os.stat_result]]:
    """What this code may delete in the checked folder ``root``: entries whose whole name
    matches ``pattern``, owned by this user, real folders or regular files (a symlink, a
    FIFO or a device is never ours); each with its ``lstat``."""
    found = []
    uid = os.geteuid()
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if not pattern.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                kind = stat.S_IFMT(info.st_mode)
                if info.st_uid == uid and kind in (stat.S_IFDIR, stat.S_IFREG):
                    found.append((Path(entry.path), info))
    return found


def entry_bytes(path: Path, info: os.stat_result) -> int:
    """Bytes held by a file, or by the regular files under a folder; links not followed."""
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size
    total = 0
    for folder, _dirs, files in os.walk(path):  # os.walk does not descend into links
        for name in files:
            with contextlib.suppress(OSError):
                inner = os.lstat(os.path.join(folder, name))
                total += inner.st_size if stat.S_ISREG(inner.st_mode) else 0
    return total


def remove_entry(path: Path, info: os.stat_result) -> None:
    """Delete an entry ``own_entries`` found: a folder with what is in it (a symlink
    inside is removed, never followed), or a file."""
    if stat.S_ISDIR(info.st_mode):
        import shutil  # only when deleting: the search path reads files through here

        shutil.rmtree(path, ignore_errors=True)  # refuses a symlink in its place
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def build_lock(root: Path) -> Iterator[bool]:
    """Held (True) while this process builds and saves an index in ``root``: another
    process that wants one waits here, then loads the saved one instead of building it
    too. False when it cannot be taken (an odd ``lock`` file, or ``LOCK_WAIT_S`` passed):
    build in memory, save nothing."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): saves may race, a torn one is never served
        yield True
        return
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError:
        yield False
        return
    try:
        held = stat.S_ISREG(os.fstat(fd).st_mode)
        deadline = time.monotonic() + LOCK_WAIT_S
        while held:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                held = time.monotonic() < deadline
                time.sleep(0.1)
        yield held
    finally:
        os.close(fd)  # releases the lock (the kernel does too if this process dies)


def open_regular(path: Path, size: int | None = None, limit: int | None = None) -> int:
    """A file descriptor on ``path`` when it is a regular file (not a symlink, FIFO or
    device) of ``size`` bytes or at most ``limit``; ``ValueError`` otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    info = os.fstat(fd)
    if (
        not stat.S_ISREG(info.st_mode)
        or (size is not None and info.st_size != size)
        or (limit is not None and info.st_size > limit)
    ):
        os.close(fd)
        raise ValueError(f"{path.name} is not the file saved")
    return fd


def read_regular(path: Path, size: int | None = None, limit: int | None = None) -> bytes:
    """The bytes of ``path`` as ``open_regular`` allows it."""
    with open(open_regular(path, size, limit), "rb") as f:
        data = f.read()
    if size is not None and len(data) != size:
        raise ValueError(f"{path.name} changed while it was read")
    return data


def digest_regular(path: Path, size: int | None = None) -> str:
    """sha256 of the regular file ``path``, read in chunks (a segment may be large)."""
    digest = hashlib.sha256()
    with open(open_regular(path, size, None), "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def removed_on_failure(*written: Path) -> Iterator[None]:
    """A save's files, removed if it fails (a full disk) before its stamp is in place: the
    previous stamp stands and nothing half-written is left."""
    try:
        yield
    except BaseException:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
        raise


def read_stamp(root: Path) -> dict[str, Any] | None:
    """The stamp in the trusted folder ``root``, as a dict; None when there is none to
    trust (missing, not a small regular file, not JSON, nested past the parser, not an
    object)."""
    try:
        header = json.loads(read_regular(root / STAMP, limit=MAX_STAMP))
    except Exception:
        return None
    return header if type(header) is dict else None


def replace_stamp(root: Path, header: dict[str, Any]) -> None:
    """Write ``header`` under a new name and move it over ``root``'s stamp in one step,
    last, so a reader sees the previous stamp or this one, each naming complete files."""
    staging = root / f"{STAMP}.{uuid.uuid4().hex}"
    with removed_on_failure(staging):
        staging.write_text(json.dumps(header))
        os.replace(staging, root / STAMP)
