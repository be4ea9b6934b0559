"""The runtime's settings and their checks: timeouts and isolation modes.

Light on purpose (no asyncio, no worker machinery): ``Catalog`` checks its settings when it is
opened, and commands that never call a tool must not pay for the runtime's imports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import InvalidArgumentsError

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 24 * 3600.0
ISOLATIONS = ("thread", "process")
Mode = Literal["thread", "process"]
Isolation = Mode | Mapping[str, Mode]  # one mode, or per toolkit name ("*": the rest)


def check_timeout(timeout: Any, what: str = "timeout") -> float:
    """``timeout`` as seconds, or ``InvalidArgumentsError`` naming the rule."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise InvalidArgumentsError(
            f"{what} must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}; "
            f"got {timeout!r}"
        )
    return float(timeout)


def check_isolation(isolation: Any) -> Isolation:
    """``isolation`` if it is a mode or a mapping of toolkit names to modes, else ValueError."""
    modes = isolation.values() if isinstance(isolation, Mapping) else [isolation]
    for mode in modes:
        if mode not in ISOLATIONS:
            raise ValueError(f"isolation must be 'thread' or 'process', not {mode!r}")
    return dict(isolation) if isinstance(isolation, Mapping) else isolation
