"""`toolcat eval --save`: the result kept in the catalog as its last eval, for the console's
quality page; refused up front where it cannot be kept; bounded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.quality.test_evaluate import _write_bench
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import CatalogError
from toolcat.models import MAX_EVAL_ROWS
from toolcat.quality.saved import result_of
from toolcat.store.replica import check_copy

HOSTILE = '<img src=x onerror="alert(1)">\x1b[31m'  # a bench folder's name is outside text


def bench_with_hostile_source(tmp_path: Path) -> Path:
    bench = tmp_path / "bench"
    _write_bench(bench)
    (bench / "alpha").rename(bench / HOSTILE)
    return bench


def test_eval_save_keeps_the_rows_date_revision_and_model(tmp_path: Path) -> None:
    bench = bench_with_hostile_source(tmp_path)
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(Path("data/toolkits/math.yaml"))
        before = catalog.revision
        assert catalog.eval_result() is None
    runner = CliRunner()
    argv = ["--db", str(db), "eval", str(bench), "--mode", "bm25", "--mode", "regex"]
    printed = runner.invoke(cli, [*argv, "--save", "--json"])
    assert printed.exit_code == 0, printed.output
    rows = json.loads(printed.stdout)["results"]  # the output is what it was without --save
    with Catalog(db) as catalog:
        saved = catalog.eval_result()
        assert catalog.revision == before  # no change to the tools: no list_changed
    assert saved is not None
    assert saved.revision == before and saved.pooled is False
    assert saved.model == "toolcat-tool-retriever-v1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved.saved_at)
    assert [
        (r.source, r.mode, r.queries, r.r1, r.r5, r.r10, r.ndcg10, r.mrr10) for r in saved.rows
    ] == [
        (
            r["source"],
            r["mode"],
            r["queries"],
            r["R@1"],
            r["R@5"],
            r["R@10"],
            r["nDCG@10"],
            r["MRR@10"],
        )
        for r in rows
    ]
    assert saved.rows[0].source == HOSTILE  # kept as it is: every page escapes it

    pooled = runner.invoke(cli, [*argv, "--pooled", "--save", "--quiet"])
    assert pooled.exit_code == 0, pooled.output
    with Catalog(db) as catalog:
        again = catalog.eval_result()
    assert again is not None and again.pooled  # the last one replaces the one before


def test_eval_save_on_a_missing_catalog_or_a_replica_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    bench = bench_with_hostile_source(tmp_path)
    runner = CliRunner()
    missing = runner.invoke(cli, ["--db", str(tmp_path / "nope.db"), "eval", str(bench), "--save"])
    assert missing.exit_code != 0 and "nope.db" in missing.stderr
    assert not (tmp_path / "nope.db").exists()

    replica = tmp_path / "replica.db"
    Catalog(replica).close()
    check_copy(replica, "file:///srv/primary")
    refused = runner.invoke(cli, ["--db", str(replica), "eval", str(bench), "--save"])
    assert refused.exit_code != 0
    assert "replica of file:///srv/primary" in refused.stderr
    assert refused.stdout == "" and "queries" not in refused.stderr  # nothing was evaluated


def test_a_result_is_bounded() -> None:
    row = {
        "source": "s",
        "mode": "bm25",
        "pooled": False,
        "queries": 1,
        "learned_from": 0,
        **dict.fromkeys(("R@1", "R@5", "R@10", "nDCG@10", "MRR@10"), 0.5),
    }
    assert len(result_of([row] * MAX_EVAL_ROWS, revision=1, model="m").rows) == MAX_EVAL_ROWS
    with pytest.raises(CatalogError, match=f"at most {MAX_EVAL_ROWS}"):
        result_of([row] * (MAX_EVAL_ROWS + 1), revision=1, model="m")
    with pytest.raises(CatalogError, match="scored nothing"):
        result_of([], revision=1, model="m")
    with pytest.raises(CatalogError, match="source is out of bounds") as e:
        result_of([{**row, "source": "x" * 300}], revision=1, model="m")
    assert "x" * 300 not in str(e.value)


def test_an_oversized_result_is_refused_and_the_last_one_kept(tmp_path: Path) -> None:
    row = {
        "source": "€" * 255,  # 765 bytes of UTF-8
        "mode": "m" * 64,
        "pooled": False,
        "queries": 1,
        **dict.fromkeys(("R@1", "R@5", "R@10", "nDCG@10", "MRR@10"), 0.123456789),
    }
    with Catalog(tmp_path / "c.db") as catalog:
        small = result_of([row], revision=0, model="m")
        catalog.save_eval_result(small)
        big = result_of([row] * MAX_EVAL_ROWS, revision=0, model="m")
        with pytest.raises(CatalogError, match="bytes as JSON"):
            catalog.save_eval_result(big)
        assert catalog.eval_result() == small


def test_a_hostile_source_name_reaches_the_terminal_printable(tmp_path: Path) -> None:
    bench = bench_with_hostile_source(tmp_path)
    shown = CliRunner().invoke(cli, ["eval", str(bench), "--mode", "bm25"])
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.stdout and "\x1b" not in shown.stderr
    assert "\\x1b[31m" in shown.stdout  # shown, as an escape
