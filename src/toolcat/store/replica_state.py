"""The marker that makes a catalog file a read replica: a state file beside it
(``PATH.replica.json``, written by ``replica.Follower``) naming the primary it follows.

Every catalog connection reads it (``primary_of``), so this module stays small: the replica's
machinery lives in ``replica``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import CatalogError

STATE_SUFFIX = ".replica.json"


def state_path(path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(path)}{STATE_SUFFIX}")


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The replica state beside a catalog file, or None when the file is no replica."""
    marker = state_path(path)
    try:
        text = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CatalogError(f"cannot read replica state {str(marker)!r}: {e.strerror}") from e
    try:
        state = json.loads(text)
    except ValueError as e:
        raise CatalogError(f"replica state {str(marker)!r} is not JSON: {e}") from e
    if not isinstance(state, dict) or not isinstance(state.get("primary"), str):
        raise CatalogError(f"replica state {str(marker)!r} names no primary")
    return state


def primary_of(path: str | os.PathLike[str]) -> str | None:
    """The primary a replica file follows; None for an ordinary catalog."""
    state = read_state(path)
    return None if state is None else str(state["primary"])
