""" "Nothing fits" says the same in every mode (issue 21): hybrid no longer calls a hit
"weak" where both single modes say nothing fits, and BM25 no longer says nothing fits for a
right first hit because of words no tool has (a film's title); through the API and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.cli import cli

pytest.importorskip("onnxruntime")

MODES = ("bm25", "embedding", "hybrid")
TMDB = ROOT.parent / "shared" / "openapi" / "tmdb_oas.json"


def verdicts(db: Path, query: str) -> dict[str, tuple[bool, str]]:
    """Per mode: (no_match, first hit) from the API, checked against `toolcat search
    --json` and the CLI's text."""
    found = {}
    with Catalog(db) as catalog:
        for mode in MODES:
            result = catalog.search(query, mode=mode, k=5)
            summaries = catalog.search_summaries(query, mode=mode, k=5)
            assert result.no_match == summaries["no_match"]
            found[mode] = (result.no_match, result.hits[0].tool.id if result.hits else "")
    for mode in MODES:
        args = ["--db", str(db), "search", query, "--mode", mode, "-k", "5"]
        printed = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
        assert printed["no_match"] == found[mode][0], mode
        text = CliRunner().invoke(cli, args)
        assert ("nothing fits" in text.output) == found[mode][0], (mode, text.output)
    return found


def test_hybrid_agrees_when_both_single_modes_find_nothing(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
    found = verdicts(db, "what's the weather tomorrow")
    assert {no_match for no_match, _ in found.values()} == {True}, found


@pytest.mark.skipif(not TMDB.exists(), reason="../shared/openapi is not here")
def test_a_right_first_hit_fits_in_every_mode(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register_openapi(TMDB, toolkit="tmdb")
        catalog.reindex()
    found = verdicts(db, "find movies similar to Inception")
    assert found == {mode: (False, "tmdb.GET_movie-movie_id-similar") for mode in MODES}
