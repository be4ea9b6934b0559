from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers import BENCH
from toolcat.cli import cli
from toolcat.errors import ToolcatError
from toolcat.quality.evaluate import catalog_name, evaluate, margins, score_query


def test_score_query_strict() -> None:
    scores = score_query(["a", "x", "b", "y"], [["a"], ["b"]])
    assert scores["R@1"] == 0.5 and scores["R@5"] == 1.0 and scores["R@10"] == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert scores["nDCG@10"] == pytest.approx((1 + 1 / math.log2(4)) / ideal)
    assert scores["MRR@10"] == 1.0
    assert score_query(["x", "y", "a"], [["a"]])["MRR@10"] == pytest.approx(1 / 3)
    assert score_query(["x"] * 10, [["a"]])["R@10"] == 0.0


def test_score_query_lenient_counts_a_group_once() -> None:
    scores = score_query(["a2", "a1", "b"], [["a1", "a2"], ["b"]])
    assert scores["R@1"] == 0.5 and scores["R@5"] == 1.0
    assert scores["nDCG@10"] == pytest.approx((1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))


def test_names_are_mapped_uniquely() -> None:
    taken: set[str] = set()
    assert catalog_name("math.factorial", taken) == "math_factorial"
    assert catalog_name("hf:org/model", taken) == "hf_org_model"
    clash = catalog_name("math factorial", taken)
    assert clash != "math_factorial" and clash.startswith("math_factorial_")
    assert len(catalog_name("x" * 100, taken)) <= 64


def _write_bench(folder: Path) -> None:
    for name, tools, queries in [
        (
            "alpha",
            [
                {
                    "name": "get.weather",
                    "description": "Current weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
                {
                    "name": "send:email",
                    "description": "Send an email message to someone",
                    "parameters": {"type": "object", "properties": {}},
                },
            ],
            [
                {"id": "1", "query": "what's the weather in Paris", "relevant": ["get.weather"]},
                {"id": "2", "query": "email my boss", "relevant": ["send:email"]},
            ],
        ),
        (
            "beta",
            [
                {
                    "name": "translate",
                    "description": "Translate text between languages",
                    "parameters": {"type": "object", "properties": {"x": {"type": "bogus"}}},
                },
                {
                    "name": "summarise",
                    "description": "Summarise a long document",
                    "parameters": {"type": "object", "properties": {}},
                },
            ],
            [
                {
                    "id": "1",
                    "query": "translate this into French",
                    "relevant": ["translate"],
                    "relevant_any_of": [["translate", "summarise"]],
                }
            ],
        ),
    ]:
        source = folder / name
        source.mkdir(parents=True)
        (source / "tools.jsonl").write_text("\n".join(json.dumps(t) for t in tools))
        (source / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))


def test_evaluate_per_source_and_pooled(tmp_path: Path) -> None:
    _write_bench(tmp_path)
    rows = evaluate(tmp_path, modes=["bm25", "regex"])
    by_source = {(r["source"], r["mode"]): r for r in rows}
    alpha = by_source[("alpha", "bm25")]
    assert (alpha["queries"], alpha["R@1"], alpha["names_mapped"]) == (2, 1.0, 2)
    beta = by_source[("beta", "bm25")]
    assert beta["schemas_repaired"] == 1 and beta["lenient"]["R@1"] == 1.0
    pooled = evaluate(tmp_path, modes=["bm25"], pooled=True)
    assert {r["source"] for r in pooled} == {"alpha", "beta"} and all(r["pooled"] for r in pooled)
    assert pooled[0]["R@1"] == 1.0


def test_eval_cli_json_shape(tmp_path: Path) -> None:
    _write_bench(tmp_path)
    result = CliRunner().invoke(cli, ["eval", str(tmp_path), "--source", "alpha", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["results"]
    assert list(rows[0])[:8] == [
        "source",
        "mode",
        "queries",
        "R@1",
        "R@5",
        "R@10",
        "nDCG@10",
        "MRR@10",
    ]
    missing = CliRunner().invoke(cli, ["eval", str(tmp_path), "--source", "nope"])
    assert missing.exit_code == 1 and "no source nope" in missing.stderr


def test_learning_scores_the_same_queries_before_and_after(tmp_path: Path) -> None:
    _write_bench(tmp_path)
    alpha = tmp_path / "alpha" / "queries.jsonl"
    queries = [json.loads(line) for line in alpha.read_text().splitlines()]
    # Learning queries share no word with the tools; the scored one matches only them.
    queries = [
        {"id": "1", "query": "zorbify the forecast", "relevant": ["get.weather"], "split": "a"},
        {"id": "2", "query": "zorbify my correspondence", "relevant": ["send:email"], "split": "a"},
        {"id": "3", "query": "zorbify correspondence", "relevant": ["send:email"], "split": "b"},
        *queries,
    ]
    alpha.write_text("\n".join(json.dumps(q) for q in queries))
    rows = evaluate(tmp_path, sources=["alpha"], modes=["bm25"], learn_split="a")
    before, after = rows
    assert (before["learned_from"], after["learned_from"]) == (0, 2)
    assert before["queries"] == after["queries"] == 3  # the learned queries are never scored
    assert after["R@1"] > before["R@1"]
    fraction = evaluate(
        tmp_path, sources=["alpha"], modes=["bm25"], learn_fraction=0.5, max_queries=1
    )
    assert [r["queries"] for r in fraction] == [1, 1]
    assert [r["learned_from"] for r in fraction] == [0, 2]


def test_a_vector_cache_embeds_each_tool_once(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    bench = tmp_path / "bench"
    _write_bench(bench)
    cache = tmp_path / "vectors.db"
    said: list[str] = []
    first = evaluate(bench, modes=["embedding"], vector_cache=cache, progress=said.append)
    assert any("embedded 2 tools" in line for line in said)
    said.clear()
    again = evaluate(bench, modes=["embedding"], vector_cache=cache, progress=said.append)
    assert not any("embedded" in line for line in said), said
    assert [r["R@5"] for r in again] == [r["R@5"] for r in first]
    (tmp_path / "not-a-db").write_text("hello, I am not SQLite " * 100)
    with pytest.raises(ToolcatError, match="vector cache"):
        evaluate(bench, modes=["embedding"], vector_cache=tmp_path / "not-a-db")


def test_a_killed_eval_still_prints_what_it_computed(tmp_path: Path) -> None:
    _write_bench(tmp_path)
    slow = tmp_path / "zeta"  # scored after alpha and beta, long enough to be killed in
    slow.mkdir()
    (slow / "tools.jsonl").write_text(
        "\n".join(
            json.dumps({"name": f"tool_{i}", "description": f"does thing {i}"}) for i in range(50)
        )
    )
    (slow / "queries.jsonl").write_text(
        "\n".join(
            json.dumps(
                {"id": str(i), "query": f"do thing {i % 50}", "relevant": [f"tool_{i % 50}"]}
            )
            for i in range(200_000)
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "toolcat.cli", "eval", str(tmp_path), "--mode", "bm25", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:  # each row is announced on stderr as it is computed
        if line.split("] ", 1)[-1].startswith("beta bm25: R@5"):
            break
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    printed = json.loads(out)
    assert printed["complete"] is False
    assert [r["source"] for r in printed["results"]] == ["alpha", "beta"]
    assert process.returncode != 0


@pytest.mark.skipif(not (BENCH / "toolalpaca").is_dir(), reason="../shared/bench not present")
def test_bm25_beats_the_published_baseline_on_toolalpaca() -> None:
    [row] = evaluate(BENCH, sources=["toolalpaca"], modes=["bm25"])
    assert row["queries"] == 209
    assert row["R@5"] >= 0.859 and row["nDCG@10"] >= 0.778  # ../shared/bench/README.md


def _row(source: str, mode: str, r5: float, ndcg: float, pooled: bool = True) -> dict[str, Any]:
    return {"source": source, "mode": mode, "pooled": pooled, "R@5": r5, "nDCG@10": ndcg}


def test_margins_per_source_and_mean() -> None:
    """The default against plain RRF, against the better single mode per metric (a fusion
    that costs shows negative), and the embedding against the base MiniLM."""
    rows = [
        _row("a", "bm25", 0.50, 0.40),
        _row("a", "embedding", 0.78, 0.60),
        _row("a", "hybrid", 0.74, 0.65),
        _row("a", "rrf-baseline", 0.60, 0.50),
        _row("a", "minilm-baseline", 0.70, 0.55),
        _row("b", "bm25", 0.30, 0.20),
        _row("b", "embedding", 0.20, 0.10),
        _row("b", "hybrid", 0.40, 0.30),
        _row("b", "rrf-baseline", 0.30, 0.25),
        _row("b", "minilm-baseline", 0.25, 0.12),
    ]
    lines = {line["source"]: line for line in margins(rows)}
    assert lines["a"]["vs_best_single"] == {"R@5": -0.04, "nDCG@10": 0.05}
    assert lines["a"]["vs_rrf"] == {"R@5": 0.14, "nDCG@10": 0.15}
    assert lines["b"]["embedding_vs_minilm"] == {"R@5": -0.05, "nDCG@10": -0.02}
    mean = lines["mean"]
    assert mean["vs_best_single"]["R@5"] == pytest.approx(0.03)  # (-.04 + .10) / 2
    assert mean["hybrid"]["R@5"] == pytest.approx(0.57) and mean["hybrid"]["sources"] == 2
    assert mean["pooled"] is True


def test_margins_leave_out_what_was_not_scored() -> None:
    lines = margins([_row("a", "bm25", 0.5, 0.4, pooled=False)])
    assert lines[0] == {"source": "a", "pooled": False, "bm25": {"R@5": 0.5, "nDCG@10": 0.4}}
    assert "vs_rrf" not in lines[1] and lines[1]["source"] == "mean"


def test_margin_table_prints_every_column() -> None:
    from toolcat.cli.operator import margin_table

    rows = [
        _row("a", mode, r5, 0.5)
        for mode, r5 in [
            ("bm25", 0.5),
            ("embedding", 0.78),
            ("hybrid", 0.74),
            ("rrf-baseline", 0.6),
            ("minilm-baseline", 0.7),
        ]
    ]
    text = margin_table(margins(rows))
    assert text[0] == "per source, pooled catalog (R@5/nDCG@10)"
    assert "default-best" in text[1] and "emb-minilm" in text[1]
    assert "-0.040/+0.000" in text[2] and "+0.140/+0.000" in text[2]
    assert text[-1].startswith("mean")


def test_score_only_keeps_the_other_sources_as_distractors(tmp_path: Path) -> None:
    _write_bench(tmp_path)
    pooled = evaluate(tmp_path, modes=["bm25"], pooled=True, score_only=["beta"])
    assert [r["source"] for r in pooled] == ["beta"] and pooled[0]["pooled"]
    own = evaluate(tmp_path, modes=["bm25"], score_only=["alpha"])
    assert [r["source"] for r in own] == ["alpha"]
    with pytest.raises(ToolcatError, match="cannot score gamma"):
        evaluate(tmp_path, modes=["bm25"], pooled=True, score_only=["gamma"])


@pytest.mark.parametrize(
    ("tools", "queries"),
    [
        (b"\xff\xfe{}", b""),  # not UTF-8
        (b'{"name": "t", "description": "d"}', b"{}"),  # a query without its fields
        (b'{"name": "t", "description": "d"}', b"nope"),  # not JSON
        (b"[1]", b""),  # a tool that is not an object
    ],
)
def test_a_malformed_source_is_a_one_line_error_naming_it(
    tmp_path: Path, tools: bytes, queries: bytes
) -> None:
    """Benchmark files are downloaded input: each of these was "unexpected ...Error (a bug
    in toolcat)"."""
    source = tmp_path / "bad"
    source.mkdir()
    (source / "tools.jsonl").write_bytes(tools)
    (source / "queries.jsonl").write_bytes(queries)
    with pytest.raises(ToolcatError, match="benchmark source 'bad' cannot be read"):
        evaluate(tmp_path, modes=["bm25"])
    result = CliRunner().invoke(cli, ["eval", str(tmp_path), "--mode", "bm25"])
    assert result.exit_code not in (0, 70) and "bug in toolcat" not in result.output


def test_a_source_without_queries_counts_in_no_mean(tmp_path: Path) -> None:
    """A source with no query scored 0.0 everywhere (``_average`` of nothing) and halved
    every mean of the summary and the margin table."""
    from toolcat.quality.evaluate import summary

    for name, queries in (
        ("empty", ""),
        ("full", '{"id": 1, "query": "weather 1", "relevant": ["t1"]}'),
    ):
        source = tmp_path / name
        source.mkdir()
        (source / "tools.jsonl").write_text(
            "\n".join(
                json.dumps({"name": f"t{i}", "description": f"weather {i}"}) for i in range(5)
            )
        )
        (source / "queries.jsonl").write_text(queries)
    rows = evaluate(tmp_path, modes=["bm25"])
    assert {(r["source"], r["queries"]) for r in rows} == {("empty", 0), ("full", 1)}
    (mean,) = summary(rows)
    assert mean["R@5"] == 1.0 and mean["sources"] == 1
    lines = {line["source"]: line for line in margins(rows)}
    assert "empty" not in lines and lines["mean"]["bm25"] == {
        "R@5": 1.0,
        "nDCG@10": 1.0,
        "sources": 1,
    }


def test_vectors_taken_from_a_cache_move_the_revision_with_its_history_mark(
    tmp_path: Path,
) -> None:
    """The evaluation's own vector shortcut moves the revision as every write does (a mark
    in the change log: the saved BM25 index is stamped against it)."""
    import sqlite3

    from toolcat import Catalog, Tool, Toolkit
    from toolcat.quality.evaluate import _exchange_vectors
    from toolcat.search.embeddings import DEFAULT_MODEL
    from toolcat.store import reader

    cache = tmp_path / "vectors.db"
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(Toolkit(name="kit", version="1", tools=[Tool(name="t", description="d")]))
        (content_hash,) = catalog._conn.execute("SELECT content_hash FROM tools").fetchone()
        _exchange_vectors(catalog, cache, take=True)  # makes the cache, takes nothing
        with sqlite3.connect(cache) as db:
            db.execute(
                "INSERT INTO embeddings VALUES (?, ?, ?)", (content_hash, DEFAULT_MODEL, b"\0" * 16)
            )
        before = catalog.revision
        _exchange_vectors(catalog, cache, take=True)
        after = catalog.revision
        assert after == before + 1
        assert reader.fts_history(catalog._conn, after) is not None
