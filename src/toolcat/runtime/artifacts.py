"""Where large artifacts go: a folder per call, kept for a day.

An artifact a tool reports (``toolcat.report_artifact``) travels inside its event when it is
small (``INLINE_BYTES``). A larger one is written to ``<root>/<call id>/<name>`` and the event
carries its ``file://`` URI instead, so nothing is dropped and no result grows without bound.

``<root>`` is ``$TOOLCAT_ARTIFACTS`` when set, else ``toolcat/artifacts`` under the user's cache
folder (``$XDG_CACHE_HOME`` or ``~/.cache``). Each call folder is kept ``TTL_SECONDS`` (24 hours;
``$TOOLCAT_ARTIFACTS_TTL`` in seconds overrides): the runtime removes older call folders when it
creates a new one, so the folder never needs a cron job. Folders are private to the user (0700).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import uuid
from pathlib import Path

INLINE_BYTES = 64 * 1024  # above this, an artifact is a file referenced by its URI
MAX_ARTIFACT_BYTES = 32 * 1024 * 1024  # one artifact; report_artifact refuses more
MAX_CALL_BYTES = 128 * 1024 * 1024  # written per call, over all its artifacts
MAX_ARTIFACTS = 32  # per call
TTL_SECONDS = 24 * 3600
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def root() -> Path:
    configured = os.environ.get("TOOLCAT_ARTIFACTS")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "toolcat" / "artifacts"


def ttl_seconds() -> float:
    with contextlib.suppress(ValueError):
        return float(os.environ.get("TOOLCAT_ARTIFACTS_TTL", TTL_SECONDS))
    return TTL_SECONDS


def safe_name(name: str) -> str:
    """A file name from a tool's artifact name: no folders, no hidden files, 100 characters."""
    base = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip("._")
    return base[:100] or "artifact"


class CallFolder:
    """The folder of one call's large artifacts, created on its first one."""

    def __init__(self) -> None:
        self.call_id = uuid.uuid4().hex
        self.path: Path | None = None
        self.written = 0
        self._names: set[str] = set()

    def write(self, name: str, content: bytes) -> Path:
        """Write ``content`` as ``name`` (made safe and unique within the call)."""
        if self.path is None:
            base = root()
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
            sweep(base)
            self.path = base / self.call_id
            self.path.mkdir(mode=0o700)
        file_name = safe_name(name)
        stem, dot, suffix = file_name.rpartition(".")
        number = 1
        while file_name in self._names:
            number += 1
            file_name = f"{stem}-{number}{dot}{suffix}" if dot else f"{suffix}-{number}"
        self._names.add(file_name)
        target = self.path / file_name
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        self.written += len(content)
        return target


def sweep(base: Path, now: float | None = None) -> int:
    """Remove call folders older than the TTL; returns how many went."""
    limit = (time.time() if now is None else now) - ttl_seconds()
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False) and entry.stat().st_mtime < limit:
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed += 1
    return removed
