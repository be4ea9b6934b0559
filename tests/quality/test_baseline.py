"""The plain baseline (toolcat.quality.baseline) and `toolcat eval --baseline`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rank_bm25 import BM25Okapi

from tests.helpers import ROOT
from toolcat.cli import cli
from toolcat.models import Tool
from toolcat.quality.baseline import PlainBM25, plain_text, plain_tokens, rrf
from toolcat.quality.evaluate import BASELINE_MODES, evaluate, summary

BENCH = ROOT.parent / "shared" / "bench"


def test_plain_tokens_split_case_and_punctuation() -> None:
    assert plain_tokens("getVehicleBatteryLevel HTTPServer snake_case, v2-API!") == [
        "get",
        "vehicle",
        "battery",
        "level",
        "http",
        "server",
        "snake",
        "case",
        "v2",
        "api",
    ]


def test_plain_text_holds_name_description_and_parameters() -> None:
    tool = Tool.model_validate(
        {
            "name": "get_weather",
            "description": "Current weather.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "Town name"}},
            },
        }
    )
    assert plain_text(tool) == "get_weather Current weather. city Town name"


CORPUS = {
    "get_weather": "get_weather Current weather for a city city Town name",
    "weather_forecast": "weather_forecast Forecast weather for the next days city days",
    "send_email": "send_email Send an email to someone to subject body",
    "search_flights": "search_flights Search flights between airports origin destination date",
    "convert_currency": "convert_currency Convert an amount between currencies amount from to",
    "empty": "",
}


@pytest.mark.parametrize(
    "query",
    ["weather in Paris", "weather weather city", "send an email", "nothing matches", ""],
)
def test_plain_bm25_scores_are_rank_bm25s(query: str) -> None:
    """The numpy postings give BM25Okapi's scores (negative idf floor included)."""
    ours = PlainBM25(CORPUS).scores(query)
    oracle = BM25Okapi([plain_tokens(t) for t in CORPUS.values()]).get_scores(plain_tokens(query))
    assert list(ours) == pytest.approx(list(oracle), abs=1e-9)


@pytest.mark.skipif(not (BENCH / "toolalpaca").is_dir(), reason="../shared/bench not present")
def test_plain_bm25_agrees_with_rank_bm25_on_a_benchmark() -> None:
    tools = [
        json.loads(line) for line in (BENCH / "toolalpaca" / "tools.jsonl").read_text().splitlines()
    ]
    documents = {t["name"]: f"{t['name']} {t['description']}" for t in tools}
    ours = PlainBM25(documents)
    oracle = BM25Okapi([plain_tokens(t) for t in documents.values()])
    for line in (BENCH / "toolalpaca" / "queries.jsonl").read_text().splitlines()[:30]:
        query = json.loads(line)["query"]
        assert list(ours.scores(query)) == pytest.approx(
            list(oracle.get_scores(plain_tokens(query))), abs=1e-9
        )


def test_rrf_sums_reciprocal_ranks() -> None:
    # a: 1/61 + 1/62; b: 1/62 + 1/61; c: 1/63: a and b tie (first seen first), c last
    assert rrf([["a", "b", "c"], ["b", "a"]], 3) == ["a", "b", "c"]
    assert rrf([["a", "b"], ["b", "c"]], 2) == ["b", "a"]


def _tiny_bench(root: Path) -> Path:
    folder = root / "bench" / "tiny"
    folder.mkdir(parents=True)
    tools = [
        {"name": "get_weather", "description": "Current weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "send_email", "description": "Send an email message to someone.",
         "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}},
        {"name": "search_flights", "description": "Search flights between two airports.",
         "parameters": {"type": "object", "properties": {"origin": {"type": "string"}}}},
    ]  # fmt: skip
    queries = [
        {"id": "1", "query": "is it raining in Oslo", "relevant": ["get_weather"]},
        {"id": "2", "query": "mail my boss", "relevant": ["send_email"]},
        {"id": "3", "query": "flights from Paris to Rome", "relevant": ["search_flights"]},
    ]
    (folder / "tools.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tools))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return folder.parent


def test_eval_baseline_rows_on_the_same_queries(tmp_path: Path) -> None:
    """With the real base model: the two baseline rows follow toolcat's, on the same
    queries, per source and pooled; the summary gives each mode's margin over plain RRF."""
    pytest.importorskip("sentence_transformers")
    bench = _tiny_bench(tmp_path)
    for pooled in (False, True):
        rows = evaluate(bench, modes=["bm25"], baseline=True, pooled=pooled)
        assert [r["mode"] for r in rows] == ["bm25", *BASELINE_MODES]
        assert {r["queries"] for r in rows} == {3}
        assert all(r["pooled"] is pooled for r in rows)
        # the plain MiniLM finds each of these by meaning
        assert rows[2]["R@1"] == 1.0
        lines = {line["mode"]: line for line in summary(rows)}
        assert lines["rrf-baseline"]["vs_rrf_baseline"] == {"R@5": 0.0, "nDCG@10": 0.0}
        margin = lines["bm25"]["vs_rrf_baseline"]["R@5"]
        assert margin == pytest.approx(rows[0]["R@5"] - rows[1]["R@5"], abs=1e-4)


def test_eval_cli_baseline_table_and_json(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    bench = _tiny_bench(tmp_path)
    runner = CliRunner()
    table = runner.invoke(cli, ["eval", str(bench), "--mode", "bm25", "--baseline", "--quiet"])
    assert table.exit_code == 0, table.output
    assert "rrf-baseline" in table.output and "minilm-baseline" in table.output
    assert "vs rrf-baseline" in table.output
    found = runner.invoke(
        cli, ["eval", str(bench), "--mode", "bm25", "--baseline", "--quiet", "--json"]
    )
    assert found.exit_code == 0, found.output
    data = json.loads(found.stdout)
    assert [r["mode"] for r in data["results"]] == ["bm25", *BASELINE_MODES]
    assert {m["mode"] for m in data["mean"]} == {"bm25", *BASELINE_MODES}
    assert all("vs_rrf_baseline" in m for m in data["mean"])


def test_eval_cli_pooled_baseline_prints_the_margin_table(tmp_path: Path) -> None:
    """`toolcat eval --pooled --baseline`: per source, the default, both single modes and
    the plain baseline with the margins, then the mean line; the JSON holds the same."""
    pytest.importorskip("sentence_transformers")
    bench = _tiny_bench(tmp_path)
    runner = CliRunner()
    args = ["eval", str(bench), "--pooled", "--baseline", "--quiet"]
    table = runner.invoke(cli, args)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    start = lines.index("per source, pooled catalog (R@5/nDCG@10)")
    header, *rows = [line for line in lines[start + 1 :] if line.strip()]
    assert header.split() == [
        "source", "default", "bm25", "embedding", "rrf-baseline", "minilm-base",
        "default-rrf", "default-best", "emb-minilm",
    ]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["tiny", "mean"]
    assert all(len(r.split()) == 9 and "-" not in r.split()[1:6] for r in rows)
    data = json.loads(runner.invoke(cli, [*args, "--json"]).stdout)
    tiny, mean = data["margins"]
    assert tiny["source"] == "tiny" and mean["source"] == "mean" and tiny["pooled"] is True
    assert set(tiny) >= {"vs_rrf", "vs_best_single", "embedding_vs_minilm"}
    best = max(tiny["bm25"]["R@5"], tiny["embedding"]["R@5"])
    assert tiny["vs_best_single"]["R@5"] == pytest.approx(tiny["hybrid"]["R@5"] - best, abs=1e-4)
