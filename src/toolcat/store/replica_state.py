"""What makes a catalog file a read replica, kept small because every connection asks:
the ``MARKER`` row in the copy's own meta (written only by a restore, ``replica.Follower``),
and where the follower keeps its state beside the file (``state_path``). ``connect`` never
reads that state file: a file planted beside an ordinary catalog changes nothing. The
replica's machinery lives in ``replica``.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_SUFFIX = ".replica.json"
MARKER = "replica_of"  # the meta key a restored copy names its primary under


def state_path(path: str | os.PathLike[str]) -> Path:
    """Where the follower of the catalog file ``path`` keeps its state."""
    return Path(f"{os.fspath(path)}{STATE_SUFFIX}")
