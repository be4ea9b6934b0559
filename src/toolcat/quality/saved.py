"""``toolcat eval --save``: an evaluation's rows kept in the catalog as its last eval result,
which the web console's quality page draws."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ..catalog import Catalog
from ..errors import CatalogError, ReadOnlyReplicaError
from ..models import MAX_EVAL_ROWS, EvalResult, EvalRow
from .evaluate import BASELINE_MODES


def target_model(catalog: Catalog) -> str:
    """The embedding model an evaluation to be saved into ``catalog`` searches with (the
    catalog's own, so the result speaks for it), after checking the result can be saved
    there: before the work, not after an hour of it.

    Raises:
        ReadOnlyReplicaError: ``catalog`` is a replica.
    """
    if catalog.replica_of is not None:
        raise ReadOnlyReplicaError(
            f"catalog {str(catalog.path)!r} is a read-only replica of {catalog.replica_of}: "
            "save eval results on the primary"
        )
    model: str = catalog.status()["embedding_model"]
    return model


def result_of(rows: Sequence[dict[str, Any]], *, revision: int, model: str) -> EvalResult:
    """The saved form of ``evaluate``'s rows.

    Raises:
        CatalogError: No rows, or more than ``MAX_EVAL_ROWS``.
    """
    if not rows:
        raise CatalogError("the evaluation scored nothing: no eval result to save")
    if len(rows) > MAX_EVAL_ROWS:
        raise CatalogError(
            f"the evaluation has {len(rows)} rows; a saved one holds at most {MAX_EVAL_ROWS} "
            "(evaluate fewer sources or modes)"
        )
    try:
        return _result(rows, revision, model)
    except ValidationError as e:  # a source name longer than a folder name can be
        where = ".".join(str(part) for part in e.errors(include_input=False)[0]["loc"])
        raise CatalogError(f"cannot save the eval result: {where} is out of bounds") from None


def _result(rows: Sequence[dict[str, Any]], revision: int, model: str) -> EvalResult:
    return EvalResult(
        saved_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        revision=revision,
        model=model,
        pooled=bool(rows[0]["pooled"]),
        rows=[
            EvalRow.model_validate(
                {
                    "source": row["source"],
                    "mode": row["mode"],
                    "baseline": row["mode"] in BASELINE_MODES,
                    "queries": row["queries"],
                    "learned_from": row.get("learned_from", 0),
                    **{k: float(row[k]) for k in ("R@1", "R@5", "R@10", "nDCG@10", "MRR@10")},
                }
            )
            for row in rows
        ],
    )


def save(catalog: Catalog, rows: Sequence[dict[str, Any]], *, model: str) -> EvalResult:
    """Keep ``rows`` as ``catalog``'s last eval result; returns what was saved."""
    result = result_of(rows, revision=catalog.revision, model=model)
    catalog.save_eval_result(result)
    return result
