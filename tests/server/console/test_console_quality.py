"""The console's quality page over real HTTP (``toolcat serve --http --tokens``): a result saved
by ``toolcat eval --save`` from a bench whose source names are hostile, drawn as SVG whose
bars match the numbers and whose every label is escaped; no result; a damaged one."""

from __future__ import annotations

import re
import sqlite3
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

pytest.importorskip("mcp")
pytest.importorskip("jinja2")

from tests.server.console.site import (
    ADMIN_TOKEN,
    HOSTILE_SOURCES,
    MATH_TOKEN,
    RAW,
    console_server,
    hostile_bench,
    letters,
    login,
)
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.quality import saved
from toolcat.quality.evaluate import evaluate
from toolcat.server.console.charts import MAX_GROUPS, PLOT_HEIGHT

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with console_server(tmp_path_factory.mktemp("quality")) as found:
        yield found


def saved_eval(tmp: Path, db: Path, *extra: str) -> None:
    argv = ["--db", str(db), "eval", str(hostile_bench(tmp)), "--mode", "bm25", "--mode", "regex"]
    done = CliRunner().invoke(cli, [*argv, "--save", "--quiet", *extra])
    assert done.exit_code == 0, done.output


def fetch(base: str, token: str, path: str = "/ui/quality") -> httpx.Response:
    client = login(base, token)
    try:
        return client.get(path)
    finally:
        client.close()


def svgs(html: str) -> list[ET.Element]:
    """Each chart, parsed as the XML it must be (an unescaped label would not parse)."""
    found = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    return [ET.fromstring(svg) for svg in found]


def test_no_saved_eval_says_how_to_save_one(site: tuple[str, Path]) -> None:
    base, db = site
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'eval_result'")
    page = fetch(base, MATH_TOKEN)
    assert page.status_code == 200
    assert "No eval saved yet: run <code>toolcat eval BENCH --save</code>" in page.text
    assert '<a href="/ui/quality">Quality</a>' in page.text  # in the nav
    assert "<svg" not in page.text


def test_the_saved_eval_is_drawn_bar_for_number_and_escaped(
    site: tuple[str, Path], tmp_path: Path
) -> None:
    base, db = site
    saved_eval(tmp_path, db)  # into the served catalog: the page reads it on the next request
    with Catalog(db) as catalog:
        result = catalog.eval_result()
    assert result is not None and {r.source for r in result.rows} == set(HOSTILE_SOURCES)
    for token in (ADMIN_TOKEN, MATH_TOKEN):
        page = fetch(base, token)
        assert page.status_code == 200, page.text
        for raw in [*RAW, "<script>x<", 'onerror="', "\x1b", "\x07"]:
            assert raw not in page.text
        charts = svgs(page.text)
        assert len(charts) == 3
        for chart, metric in zip(charts, ("r1", "r5", "r10"), strict=True):
            bars = [r for r in chart.iter(f"{SVG}rect") if "bar" in r.get("class", "").split()]
            plotted = [b for b in bars if b.find(f"{SVG}title") is not None]
            assert len(plotted) == len(result.rows) == 6  # 3 sources x 2 modes
            heights = sorted(float(b.get("height", "")) for b in plotted)
            expected = sorted(getattr(r, metric) * PLOT_HEIGHT for r in result.rows)
            assert heights == pytest.approx(expected, abs=0.1)
            assert max(heights) > 0  # bm25 finds the weather tool first
            for bar in plotted:  # bars stand on the axis
                assert float(bar.get("y", "")) + float(bar.get("height", "")) == pytest.approx(
                    16 + PLOT_HEIGHT
                )
            texts = ["".join(t.itertext()) for t in chart.iter(f"{SVG}text")]
            assert "<script>x<" in texts  # the name, as text: escaped, not dropped
            assert any("\\x1b" in t for t in texts)  # controls as escapes: XML cannot hold them
            assert {"bm25", "regex"} <= set(texts)  # the legend
            assert {"0.00", "0.50", "1.00"} <= set(texts)  # the axis
        table = page.text.split("<table>", 1)[1]
        assert table.count("<tr>") == 1 + len(result.rows)
        assert "&lt;script&gt;x&lt;" in table
        assert f"{result.rows[0].r5:.3f}" in table


def test_the_plain_baseline_stands_beside(site: tuple[str, Path], tmp_path: Path) -> None:
    base, db = site
    rows = evaluate(
        hostile_bench(tmp_path), modes=["bm25", "regex"], baseline=True, baseline_encoder=letters
    )
    with Catalog(db) as catalog:
        saved.save(catalog, rows, model="toolcat-tool-retriever-v1")
    page = fetch(base, ADMIN_TOKEN)
    chart = svgs(page.text)[1]
    bars = [r for r in chart.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 3 * 4  # bm25, regex, rrf-baseline, minilm-baseline per source
    plain = [b for b in bars if "baseline-" in b.get("class", "")]
    assert len(plain) == 3 * 2
    # each source's group: toolcat's modes first, the plain baseline beside them
    xs = sorted(bars, key=lambda b: float(b.get("x", "")))
    assert ["baseline-" in b.get("class", "") for b in xs[:4]] == [False, False, True, True]
    assert "rrf-baseline · plain baseline" in page.text
    assert "the plain baseline beside" in page.text


def test_many_sources_draw_a_bounded_chart(site: tuple[str, Path]) -> None:
    base, db = site
    row = {"mode": "bm25", "pooled": True, "queries": 1}
    scores = dict.fromkeys(("R@1", "R@5", "R@10", "nDCG@10", "MRR@10"), 1.0)
    rows = [{**row, **scores, "source": f"s{i:03d}"} for i in range(500)]
    with Catalog(db) as catalog:
        catalog.save_eval_result(saved.result_of(rows, revision=0, model="m"))
    page = fetch(base, ADMIN_TOKEN)
    assert page.status_code == 200
    chart = svgs(page.text)[0]
    assert float(chart.get("width", "")) < 3000  # 500 groups would be 50,000 px
    assert (
        len([r for r in chart.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None])
        == MAX_GROUPS
    )
    assert f"the first {MAX_GROUPS} of 500 sources" in page.text
    assert page.text.count("<tr>") == 501  # the table has every row


def test_a_damaged_result_is_said_so_and_the_rest_works(site: tuple[str, Path]) -> None:
    base, db = site
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('eval_result', ?)",
            ('{"rows": "<script>secret-value</script>"}',),
        )
    seen = fetch(base, ADMIN_TOKEN)
    assert seen.status_code == 200
    assert "The saved eval result cannot be read" in seen.text
    assert "secret-value" not in seen.text and str(db) not in seen.text
    assert "saved_at" in seen.text  # the admin sees which field
    told = fetch(base, MATH_TOKEN)
    assert "cannot be read: run" in told.text and "saved_at" not in told.text
    assert fetch(base, MATH_TOKEN, "/ui/status").status_code == 200
