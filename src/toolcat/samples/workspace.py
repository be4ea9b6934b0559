"""The sandbox folder the files and sqlite tools work in, and the one path rule they share.

Every path a sample tool touches goes through :func:`resolve`: it must be text without NUL
or percent-encoded separators, it is resolved (symbolic links followed) and must land inside
the workspace, and it must not be a toolcat catalog or one of SQLite's side files next to it.
Glob results go through :func:`inside` one by one, so a pattern cannot list what lies outside.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path, PurePosixPath

# %2e = ".", %2f = "/", %5c = "\", %00 = NUL: encoded forms of what changes a path's meaning.
_ENCODED = re.compile(r"%(?:2e|2f|5c|00)", re.IGNORECASE)
_SIDE_FILES = ("-wal", "-shm", "-journal")
_CATALOG_TABLES = {"meta", "toolkits", "tools"}
_SQLITE_HEADER = b"SQLite format 3\x00"


def root() -> Path:
    """``$TOOLCAT_WORKSPACE``, else ``~/.local/share/toolcat/workspace`` (created if missing)."""
    env = os.environ.get("TOOLCAT_WORKSPACE")
    base = Path(env) if env else Path("~/.local/share/toolcat/workspace")
    folder = base.expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def resolve(path: str) -> Path:
    """``path`` inside the workspace, refusing anything that escapes it or reaches a catalog.

    Refused: non-text, NUL, percent-encoded dots and slashes (``%2e%2e``), paths that resolve
    outside the workspace (``..``, absolute paths, symbolic links pointing out), a toolcat
    catalog file and its ``-wal``/``-shm``/``-journal`` files.

    Raises:
        PermissionError: with a one-line reason naming ``path``.
    """
    if not isinstance(path, str):
        raise PermissionError(f"paths are text, not {type(path).__name__}")
    if "\x00" in path:
        raise PermissionError(f"{path!r} contains a NUL character")
    if _ENCODED.search(path):
        raise PermissionError(
            f"{path!r} contains a percent-encoded dot or slash; write the path plainly"
        )
    base = root()
    target = _resolved(base / path, path)
    if not _within(target, base):
        raise PermissionError(f"{path!r} is outside the workspace; use a relative path inside it")
    if is_catalog_file(target):
        raise PermissionError(f"{path!r} is a toolcat catalog file; sample tools cannot open it")
    return target


def inside(path: Path) -> bool:
    """Whether ``path`` (a glob result, say) resolves inside the workspace, not to a catalog."""
    base = root()
    try:
        target = path.resolve()
    except (OSError, RuntimeError):
        return False
    return _within(target, base) and not is_catalog_file(target)


def check_pattern(pattern: str) -> str:
    """A glob pattern that stays where it starts: relative, no ``..`` segment, no NUL.

    Raises:
        PermissionError: naming the pattern and the rule.
    """
    if not isinstance(pattern, str) or not pattern:
        raise PermissionError("a glob pattern is non-empty text such as '*.csv'")
    if "\x00" in pattern:
        raise PermissionError(f"pattern {pattern!r} contains a NUL character")
    if pattern.startswith(("/", "\\", "~")):
        raise PermissionError(f"pattern {pattern!r} must be relative to the folder searched")
    if ".." in PurePosixPath(pattern.replace("\\", "/")).parts or _ENCODED.search(pattern):
        raise PermissionError(f"pattern {pattern!r} may not contain '..' segments")
    return pattern


def check_folder(folder: Path, given: str, limit: int = 10_000) -> None:
    """Refuse to move ``folder`` if a catalog lies anywhere inside it (looked at up to
    ``limit`` entries; a bigger folder is refused rather than half-checked)."""
    if not folder.is_dir() or folder.is_symlink():
        return
    configured = _configured_catalogs()
    seen = 0
    for parent, _dirs, files in os.walk(folder):
        seen += 1 + len(files)
        if seen > limit:
            raise PermissionError(f"{given!r} holds more than {limit} entries; move less at once")
        for name in files:
            path = Path(parent) / name
            if path in configured or is_catalog_file(path):
                raise PermissionError(f"{given!r} holds a toolcat catalog file; it cannot move")
    if any(folder in c.parents for c in configured):
        raise PermissionError(f"{given!r} is where the toolcat catalog lives; it cannot move")


def relative(path: Path) -> str:
    return path.relative_to(root()).as_posix() or "."


def is_catalog_file(path: Path) -> bool:
    """Whether ``path`` (resolved) is toolcat's catalog, a file next to one, or any SQLite
    file whose schema is a toolcat catalog's (``meta``, ``toolkits`` and ``tools`` tables)."""
    for suffix in _SIDE_FILES:
        if path.name.endswith(suffix):
            path = path.with_name(path.name[: -len(suffix)])
            break
    if path in _configured_catalogs():
        return True
    return _has_catalog_schema(path)


def _configured_catalogs() -> set[Path]:
    """The catalog files named by configuration, whether or not they exist yet."""
    from ..store.connection import default_path

    paths = {default_path()}
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join("~", ".local", "share")
    paths.add(Path(data_home).expanduser() / "toolcat" / "catalog.db")
    resolved = set()
    for p in paths:
        try:
            resolved.add(p.resolve())
        except (OSError, RuntimeError):
            continue
    return resolved


def _has_catalog_schema(path: Path) -> bool:
    try:
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            if handle.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return False
    except OSError:
        return False
    try:
        conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return True  # an SQLite file we cannot inspect: treat it as one we must not touch
    try:
        conn.set_authorizer(_read_schema_only)
        names = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    except sqlite3.Error:
        return True
    finally:
        conn.close()
    return names >= _CATALOG_TABLES


def _read_schema_only(action: int, *_: object) -> int:
    allowed = action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ)
    return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY


def _resolved(path: Path, given: str) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as e:  # a symbolic-link loop, say
        raise PermissionError(f"{given!r} cannot be resolved: {e}") from None


def _within(target: Path, base: Path) -> bool:
    return target == base or base in target.parents
