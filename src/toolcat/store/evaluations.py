"""The last saved ``toolcat eval`` result: one JSON value in ``meta``, so it travels to
replicas with the rest of the file and needs no table of its own.

Saving it is no change to the tools: the revision stays, so no reader rebuilds an index and
no MCP client hears ``tools/list_changed`` because an operator measured search quality.

What is read back is input like any value in the file: bounded in size before it is loaded,
then checked field by field (``EvalResult``); anything else is "damaged", naming the field,
never what it holds.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..errors import CatalogDamagedError, CatalogError

if TYPE_CHECKING:
    from ..models import EvalResult

KEY = "eval_result"


def save(conn: sqlite3.Connection, result: EvalResult) -> None:
    """Keep ``result`` as the catalog's last eval, replacing the one before.

    Raises:
        CatalogError: It is larger than ``MAX_EVAL_BYTES`` as JSON.
        ReadOnlyReplicaError: The file is a replica.
    """
    from ..models import MAX_EVAL_BYTES
    from .writer import write_transaction

    text = result.model_dump_json(by_alias=True)
    size = len(text.encode("utf-8"))
    if size > MAX_EVAL_BYTES:
        raise CatalogError(
            f"the eval result is {size} bytes as JSON; a saved one holds at most "
            f"{MAX_EVAL_BYTES} (evaluate fewer sources or modes)"
        )
    with write_transaction(conn):
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (KEY, text),
        )


def load(conn: sqlite3.Connection) -> EvalResult | None:
    """The last saved eval result; None when none was saved.

    Raises:
        CatalogDamagedError: The stored value is not one ``save`` writes (too large, not
            text, not JSON, a field missing or out of range), naming the field.
    """
    from pydantic import ValidationError

    from ..models import MAX_EVAL_BYTES, EvalResult

    # The size is asked of SQLite first: a huge value planted in the file is never loaded.
    row = conn.execute(
        "SELECT typeof(value), length(CAST(value AS BLOB)), "
        "CASE WHEN typeof(value) = 'text' AND length(CAST(value AS BLOB)) <= ? "
        "THEN value END FROM meta WHERE key = ?",
        (MAX_EVAL_BYTES, KEY),
    ).fetchone()
    if row is None:
        return None
    kind, size, text = row
    path = getattr(conn, "path", None) or None
    if kind != "text":
        raise CatalogDamagedError(f"meta {KEY!r} is {kind}, not JSON text", path)
    if text is None:
        raise CatalogDamagedError(f"meta {KEY!r} is {size} bytes, over {MAX_EVAL_BYTES}", path)
    try:
        return EvalResult.model_validate_json(text)
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the value"
        raise CatalogDamagedError(
            f"meta {KEY!r}: {where} is not what a saved eval holds ({first['type']})", path
        ) from None  # pydantic's own message quotes the stored value
