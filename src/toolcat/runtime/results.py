"""Making a tool's return value JSON, and cutting it down to size."""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from pathlib import PurePath
from typing import Any

DEFAULT_MAX_RESULT_BYTES = 1_000_000

# The bound the running call's result is cut to, set by the runtime around the call (tool
# threads run in a copy of the caller's context): a tool that reads an answer from elsewhere
# (an HTTP API) reads no more than this.
_RESULT_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar(
    "toolcat_result_bytes", default=DEFAULT_MAX_RESULT_BYTES
)


def result_bytes() -> int:
    """How many bytes (as JSON) the running call's result is cut to."""
    return _RESULT_BYTES.get()


def bound_results(max_bytes: int) -> contextvars.Token[int]:
    """Set ``result_bytes`` for the calls run from this context until ``reset_results``."""
    return _RESULT_BYTES.set(max_bytes)


def reset_results(token: contextvars.Token[int]) -> None:
    _RESULT_BYTES.reset(token)


class CutText(str):
    """Text a tool already cut short at ``result_bytes`` (it read no further): ``truncate``
    marks the result truncated whatever its length."""


class NotSerialisableError(TypeError):
    """A tool returned something that has no JSON form."""


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """Convert ``value`` to plain JSON types.

    Handles pydantic models, dataclasses, dates and times (ISO 8601), paths, UUIDs,
    decimals, enums, sets (sorted when possible), tuples, and bytes (UTF-8 text, else
    base64). Anything else raises ``NotSerialisableError``.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if _depth > 100:
        raise NotSerialisableError("the result is nested more than 100 levels deep")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v, _depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return to_jsonable(value.model_dump(mode="json"), _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), _depth + 1)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, _depth + 1)
    if isinstance(value, (PurePath, uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode("ascii")
    raise NotSerialisableError(
        f"the tool returned a {type(value).__module__}.{type(value).__qualname__}, "
        "which has no JSON form; return dicts, lists, strings, numbers, dataclasses or "
        "pydantic models"
    )


def truncate(data: Any, max_bytes: int) -> tuple[Any, bool]:
    """``data`` if its JSON fits in ``max_bytes``, else a cut-down version and ``True``.

    A string is cut to fit; anything else is replaced by the start of its JSON text (a
    string), so the model still sees the beginning of the answer. ``CutText`` is cut to fit
    and marked truncated even when it fits.
    """
    if isinstance(data, CutText):
        return str(data).encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"), True
    if isinstance(data, str):
        encoded = data.encode("utf-8")
        if len(encoded) <= max_bytes:
            return data, False
        return encoded[:max_bytes].decode("utf-8", errors="ignore"), True
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if len(text) <= max_bytes // 4 or len(text.encode("utf-8")) <= max_bytes:
        return data, False
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"), True
