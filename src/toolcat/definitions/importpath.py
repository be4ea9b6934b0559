"""Where tool implementations are imported from: one rule for every place that imports them.

The rule: the calling process's ``sys.path``. Registration (``register --module``), calls in
either isolation and ``check`` all use it: a worker or check process gets exactly its parent's
path (``child_environment`` / ``adopt_parent_path``), not the one its own start-up would make.
The ``toolcat`` command puts the current directory first on it, as ``python -m`` does, so a
module beside you is found by every command (``prefer_current_directory``). An import that
finds no module says where it looked (``searched``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

_PARENT_PATH = "TOOLCAT_IMPORT_PATH"
_SHOWN = 4  # folders named in an error; the rest are counted


def _folders() -> list[str]:
    return [p or os.getcwd() for p in sys.path]


def prefer_current_directory() -> None:
    """Import from the current directory first (the ``toolcat`` command's rule)."""
    here = os.getcwd()
    if here not in _folders():
        sys.path.insert(0, here)


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child process that imports tools: it adopts this process's path."""
    folders = _folders()
    return {**env, "PYTHONPATH": os.pathsep.join(folders), _PARENT_PATH: json.dumps(folders)}


def adopt_parent_path() -> None:
    """In a child started with ``child_environment``: import from exactly the parent's path
    (``python -m`` would otherwise put the child's current directory first)."""
    folders = os.environ.get(_PARENT_PATH)
    if folders:
        sys.path[:] = json.loads(folders)


def searched(error: BaseException) -> str:
    """For a ``ModuleNotFoundError``: where the import looked, as a clause to append."""
    if not isinstance(error, ModuleNotFoundError):
        return ""
    folders = _folders()
    here = os.getcwd()
    shown = ", ".join(
        repr(f) + (" (the current directory)" if f == here else "") for f in folders[:_SHOWN]
    )
    more = f" and {len(folders) - _SHOWN} more" if len(folders) > _SHOWN else ""
    cwd = "" if here in folders else f"; the current directory {here!r} is not on it"
    return f" (searched the import path: {shown}{more}{cwd})"
