"""A saved eval result is a value in the file, and the file is input: whatever someone wrote
there reads as "damaged", naming the field, never quoting the value, never loaded unbounded."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.errors import CatalogDamagedError
from toolcat.models import MAX_EVAL_BYTES

SECRET = "hunter2-value-never-shown"
ROW = {
    "source": "alpha",
    "mode": "bm25",
    "baseline": False,
    "queries": 3,
    "learned_from": 0,
    "R@1": 0.5,
    "R@5": 0.75,
    "R@10": 1.0,
    "nDCG@10": 0.6,
    "MRR@10": 0.55,
}
GOOD = {"saved_at": "2025-01-02T03:04:05Z", "revision": 1, "model": "m", "pooled": False}


def planted(tmp_path: Path, value: Any) -> Path:
    db = tmp_path / "c.db"
    Catalog(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES ('eval_result', ?)", (value,))
    return db


@pytest.mark.parametrize(
    ("value", "field"),
    [
        pytest.param(json.dumps({**GOOD, "rows": [ROW]}).encode(), "blob", id="a-blob"),
        pytest.param(7, "integer", id="a-number"),
        pytest.param("{" + SECRET, "json_invalid", id="not-json"),
        pytest.param(json.dumps({**GOOD, "rows": []}), "rows", id="no-rows"),
        pytest.param(
            json.dumps({**GOOD, "rows": [{**ROW, "R@5": 7.5}]}), "rows.0.R@5", id="recall-over-1"
        ),
        pytest.param(
            json.dumps({**GOOD, "rows": [{**ROW, "R@5": -1}]}), "rows.0.R@5", id="negative"
        ),
        pytest.param(
            json.dumps({**GOOD, "rows": [{**ROW, "R@1": "NaN"}]}), "rows.0.R@1", id="nan-as-text"
        ),
        pytest.param(
            json.dumps({**GOOD, "rows": [{**ROW, "source": SECRET * 20}]}),
            "rows.0.source",
            id="long-source",
        ),
        pytest.param(
            json.dumps({**GOOD, "saved_at": f"2025-01-02T03:04:05Z\n{SECRET}", "rows": [ROW]}),
            "saved_at",
            id="forged-date",
        ),
        pytest.param(
            json.dumps({**GOOD, "rows": [{**ROW, "queries": True}]}), "rows.0.queries", id="bool"
        ),
        pytest.param(json.dumps({**GOOD, "rows": [ROW] * 1001}), "rows", id="too-many-rows"),
        pytest.param(
            json.dumps({**GOOD, "extra": SECRET, "rows": [ROW]}), "extra", id="unknown-field"
        ),
        pytest.param(" " * (MAX_EVAL_BYTES + 1), "bytes, over", id="oversized"),
    ],
)
def test_a_planted_value_is_damaged_naming_the_field(
    tmp_path: Path, value: Any, field: str
) -> None:
    db = planted(tmp_path, value)
    with Catalog(db) as catalog:
        with pytest.raises(CatalogDamagedError, match="eval_result") as e:
            catalog.eval_result()
        assert catalog.status()["revision"] == 0  # nothing else trips on it
    assert field in str(e.value)
    assert SECRET not in str(e.value) and e.value.__cause__ is None


def test_a_well_formed_value_reads(tmp_path: Path) -> None:
    db = planted(tmp_path, json.dumps({**GOOD, "rows": [ROW]}))
    with Catalog(db) as catalog:
        result = catalog.eval_result()
    assert result is not None and result.rows[0].r5 == 0.75
