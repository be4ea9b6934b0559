"""Read, write and organise files inside a sandboxed workspace folder."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolcat import tool

from .workspace import check_folder, check_pattern, inside, relative, resolve

__toolcat__ = {"toolkit": "files", "version": "1.0.0", "tags": ["filesystem"]}


MAX_SCANNED = 100_000


def _matches(paths: Iterator[Path]) -> list[Path]:
    """Glob results that resolve inside the workspace (a symbolic link pointing out is left
    out, as is a catalog file), sorted; at most ``MAX_SCANNED`` are looked at."""
    kept = []
    for i, match in enumerate(paths):
        if i >= MAX_SCANNED:
            raise OSError(f"the pattern matches more than {MAX_SCANNED} paths; narrow it")
        if inside(match):
            kept.append(match)
    return sorted(kept)


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["what files are in the reports folder", "show me the directory contents"],
)
def list_dir(path: str = ".", pattern: str = "*") -> list[dict[str, Any]]:
    """List the files and folders in a workspace directory, with sizes and modification times.

    Args:
        path: Directory relative to the workspace root.
        pattern: Glob filter such as '*.csv'.
    """
    folder = resolve(path)
    if not folder.is_dir():
        raise NotADirectoryError(f"{path!r} is not a directory in the workspace")
    entries = []
    for entry in _matches(folder.glob(check_pattern(pattern))):
        stat = entry.stat()
        entries.append(
            {
                "name": entry.name,
                "type": "dir" if entry.is_dir() else "file",
                "size": stat.st_size,
                "modified": _stamp(stat.st_mtime),
            }
        )
    return entries


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["open notes.txt and show it", "print the contents of a file"],
)
def read_file(path: str, max_chars: int = 100_000) -> str:
    """Read a text file from the workspace and return its contents.

    Args:
        path: File path relative to the workspace root.
        max_chars: Stop after this many characters.
    """
    with resolve(path).open(encoding="utf-8", errors="replace") as handle:
        return handle.read(max_chars)


@tool(
    tags=["destructive"],
    destructive=True,
    examples=["save this text to report.md", "create a new file"],
)
def write_file(path: str, content: str, append: bool = False) -> dict[str, Any]:
    """Write text to a file in the workspace, creating it or overwriting what was there.

    Args:
        path: File path relative to the workspace root.
        content: Text to write.
        append: Append instead of overwriting.
    """
    target = resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w", encoding="utf-8") as handle:
        handle.write(content)
    return {"path": relative(target), "size": target.stat().st_size}


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["locate all csv files", "where is the config file"],
)
def find_files(pattern: str, path: str = ".", limit: int = 200) -> list[str]:
    """Find files in the workspace whose names match a glob pattern, searching subfolders recursively.

    Args:
        pattern: Glob pattern such as '**/*.py' or 'data_*.csv'.
        path: Folder to search from.
        limit: Most paths to return.
    """
    base = resolve(path)
    found = []
    for match in _matches(base.rglob(check_pattern(pattern))):
        if match.is_file():
            found.append(relative(match))
            if len(found) >= limit:
                break
    return found


@tool(
    tags=["read-only"],
    idempotent=True,
    read_only=True,
    examples=["how big is this file", "when was data.csv last modified"],
)
def file_info(path: str) -> dict[str, Any]:
    """Size, type, modification time and line count of one file or folder in the workspace.

    Args:
        path: Path relative to the workspace root.
    """
    target = resolve(path)
    stat = target.stat()
    info: dict[str, Any] = {
        "path": relative(target),
        "type": "dir" if target.is_dir() else "file",
        "size": stat.st_size,
        "modified": _stamp(stat.st_mtime),
    }
    if target.is_file():
        with target.open("rb") as handle:
            info["lines"] = sum(1 for _ in handle)
    return info


@tool(idempotent=True, examples=["create a directory called output"])
def make_dir(path: str) -> str:
    """Create a folder (and any missing parent folders) in the workspace.

    Args:
        path: Folder path relative to the workspace root.
    """
    target = resolve(path)
    target.mkdir(parents=True, exist_ok=True)
    return relative(target)


@tool(
    tags=["destructive"],
    defer_loading=True,
    destructive=True,
    examples=["rename draft.txt to final.txt"],
)
def move_file(source: str, destination: str, overwrite: bool = False) -> str:
    """Move or rename a file or folder inside the workspace.

    Args:
        source: Current path.
        destination: New path.
        overwrite: Replace an existing destination.
    """
    src, dst = resolve(source), resolve(destination)
    check_folder(src, source)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{destination!r} exists; pass overwrite=true to replace it")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dst))
    return relative(dst)


@tool(
    tags=["destructive"],
    defer_loading=True,
    destructive=True,
    examples=["remove the temporary file", "erase old logs"],
)
def delete_file(path: str) -> str:
    """Delete a file, or an empty folder, from the workspace. This cannot be undone.

    Args:
        path: Path relative to the workspace root.
    """
    target = resolve(path)
    if target == resolve("."):
        raise PermissionError("the workspace root itself cannot be deleted")
    if target.is_dir():
        target.rmdir()
    else:
        target.unlink()
    return f"deleted {relative(target)}"
