"""The sandbox folder the files and sqlite tools work in."""

from __future__ import annotations

import os
from pathlib import Path


def root() -> Path:
    """``$TOOLCAT_WORKSPACE``, else ``~/.local/share/toolcat/workspace`` (created if missing)."""
    env = os.environ.get("TOOLCAT_WORKSPACE")
    base = Path(env) if env else Path("~/.local/share/toolcat/workspace")
    folder = base.expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def resolve(path: str) -> Path:
    """``path`` inside the workspace, refusing anything that escapes it (``..``, links)."""
    base = root()
    target = (base / path).resolve()
    if target != base and base not in target.parents:
        raise PermissionError(f"{path!r} is outside the workspace; use a relative path inside it")
    return target


def relative(path: Path) -> str:
    return path.relative_to(root()).as_posix() or "."
