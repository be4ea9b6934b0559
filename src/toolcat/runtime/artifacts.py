"""Where large artifacts go: a folder per call, kept for a day, within a total size.

An artifact a tool reports (``toolcat.report_artifact``) travels inside its event when it is
small (``INLINE_BYTES``). A larger one is written to ``<root>/call-<id>/<name>`` and the event
carries its ``file://`` URI instead, so nothing is dropped and no result grows without bound.

``<root>`` is ``$TOOLCAT_ARTIFACTS`` when set, else ``toolcat/artifacts`` under the user's cache
folder (``$XDG_CACHE_HOME`` or ``~/.cache``); it is made (0700) when missing. Both come from
the environment, so they are checked before anything is written or deleted there:

- the root must be a real folder (not a symlink) of this user that nobody else may write
  (no group or world write bit); else no artifact is written there and the call says why;
- a call folder is kept ``TTL_SECONDS`` (24 hours; ``$TOOLCAT_ARTIFACTS_TTL`` in seconds
  overrides: a finite number above 0, else large artifacts are refused with a line naming
  it); older ones are removed when a new call folder is made, so no cron job is needed;
- the folders under the root hold at most ``MAX_TOTAL_BYTES`` (1 GiB;
  ``$TOOLCAT_ARTIFACTS_MAX_BYTES`` overrides: a whole number above 0): to make room the
  oldest call folders go first; one call writes at most ``MAX_CALL_BYTES``;
- only what this code made is ever deleted: folders named ``call-<32 hex digits>``, owned by
  this user, never a symlink (``files/checks.py`` holds the checks); the admin's own
  files and folders beside them are never touched.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
import uuid
from pathlib import Path

INLINE_BYTES = 64 * 1024  # above this, an artifact is a file referenced by its URI
MAX_ARTIFACT_BYTES = 32 * 1024 * 1024  # one artifact; report_artifact refuses more
MAX_CALL_BYTES = 128 * 1024 * 1024  # written per call, over all its artifacts
MAX_TOTAL_BYTES = 1024 * 1024 * 1024  # every call folder under the root together
MAX_ARTIFACTS = 32  # per call
TTL_SECONDS = 24 * 3600
CALL_FOLDER = re.compile(r"call-[0-9a-f]{32}")  # the only folders the sweep may delete
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# RFC 6838 section 4.2: a type and a subtype name, each a restricted-name.
_RESTRICTED_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_MEDIA_TYPE = re.compile(f"{_RESTRICTED_NAME}/{_RESTRICTED_NAME}")
OCTET_STREAM = "application/octet-stream"


def root() -> Path:
    configured = os.environ.get("TOOLCAT_ARTIFACTS")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "toolcat" / "artifacts"


def ttl_seconds() -> float:
    """``$TOOLCAT_ARTIFACTS_TTL`` or 24 hours.

    Raises:
        ValueError: It is set to something other than a finite number of seconds above 0
            (a sweep with 0 would remove the folders of calls still running).
    """
    configured = os.environ.get("TOOLCAT_ARTIFACTS_TTL")
    if configured is None:
        return TTL_SECONDS
    try:
        ttl = float(configured)
    except ValueError:
        ttl = math.nan
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError("$TOOLCAT_ARTIFACTS_TTL must be a finite number of seconds above 0")
    return ttl


def max_total_bytes() -> int:
    """``$TOOLCAT_ARTIFACTS_MAX_BYTES`` or ``MAX_TOTAL_BYTES``.

    Raises:
        ValueError: It is set to something other than a whole number above 0.
    """
    configured = os.environ.get("TOOLCAT_ARTIFACTS_MAX_BYTES")
    if configured is None:
        return MAX_TOTAL_BYTES
    if not configured.strip().isdigit() or int(configured) <= 0:
        raise ValueError("$TOOLCAT_ARTIFACTS_MAX_BYTES must be a whole number of bytes above 0")
    return int(configured)


def safe_name(name: str) -> str:
    """A file name from a tool's artifact name: no folders, no hidden files, 100 characters."""
    base = _UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip("._")
    return base[:100] or "artifact"


def media_type(value: object) -> str:
    """``value`` as a ``type/subtype`` media type (lower case, parameters dropped) when it
    has RFC 6838's grammar; ``application/octet-stream`` otherwise."""
    essence = str(value).split(";", 1)[0].strip() if value else ""
    return essence.lower() if _MEDIA_TYPE.fullmatch(essence) else OCTET_STREAM


def private_root() -> Path:
    """The artifacts root, made 0700 when missing.

    Raises:
        ValueError: It is not a real folder of this user that nobody else may write.
    """
    from ..files.checks import checked_folder

    base = root()
    with contextlib.suppress(OSError):  # a symlink, a file, a parent not ours: checked below
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
    if checked_folder(base, {os.geteuid()}, forbidden=0o022) is None:
        raise ValueError(
            "the artifacts folder ($TOOLCAT_ARTIFACTS or ~/.cache/toolcat/artifacts) is not a "
            "real folder of yours that only you may write (a symlink, someone else's, or "
            "group- or world-writable)"
        )
    return base


def ready_folder(folder: Path) -> Path:
    """``folder`` (made when missing) when artifacts can be saved into it: checked before a
    tool runs, so a call is never made for nothing.

    Raises:
        ValueError: It cannot be made, or it is not a folder this user may write.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot make the folder: {e.strerror or type(e).__name__}") from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError("not a folder you may write")
    return folder


class CallFolder:
    """The folder of one call's large artifacts, created (and named) on its first one: most
    calls have none, and a name costs a read of the system's random source."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.written = 0
        self._names: set[str] = set()

    def write(self, name: str, content: bytes) -> Path:
        """Write ``content`` as ``name`` (made safe and unique within the call).

        Raises:
            ValueError: The root, ``$TOOLCAT_ARTIFACTS_TTL`` or the total cap refuse it.
            OSError: It cannot be written.
        """
        if self.path is None:
            base = private_root()
            sweep(base)
            self.path = base / f"call-{uuid.uuid4().hex}"
            self.path.mkdir(mode=0o700)
        make_room(self.path.parent, len(content), keep=self.path)
        file_name = safe_name(name)
        stem, dot, suffix = file_name.rpartition(".")
        number = 1
        while file_name in self._names:
            number += 1
            file_name = f"{stem}-{number}{dot}{suffix}" if dot else f"{suffix}-{number}"
        self._names.add(file_name)
        target = self.path / file_name
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        self.written += len(content)
        return target


def sweep(base: Path, now: float | None = None) -> int:
    """Remove this code's call folders older than the TTL; returns how many went.

    Raises:
        ValueError: ``$TOOLCAT_ARTIFACTS_TTL`` is not a number of seconds above 0.
    """
    from ..files.checks import own_entries, remove_entry

    limit = (time.time() if now is None else now) - ttl_seconds()
    removed = 0
    for path, info in own_entries(base, CALL_FOLDER):
        if info.st_mtime < limit:
            remove_entry(path, info)
            removed += 1
    return removed


def make_room(base: Path, size: int, keep: Path) -> None:
    """Remove the oldest call folders (never ``keep``, the call writing) until ``size`` more
    bytes fit under the total cap.

    Raises:
        ValueError: They cannot fit even then.
    """
    from ..files.checks import entry_bytes, own_entries, remove_entry

    cap = max_total_bytes()
    folders = sorted(own_entries(base, CALL_FOLDER), key=lambda found: found[1].st_mtime)
    held = [(path, info, entry_bytes(path, info)) for path, info in folders]
    total = sum(used for *_, used in held)
    for path, info, used in held:
        if total + size <= cap:
            return
        if path != keep:
            remove_entry(path, info)
            total -= used
    if total + size > cap:
        raise ValueError(f"the artifacts folder would pass its cap of {cap:,} bytes")
