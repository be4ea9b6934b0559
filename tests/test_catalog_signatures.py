"""The parallel public methods (``search``/``search_summaries``, ``list``/``list_summaries``)
take one signature, written once: ``inspect.signature`` and ``help()`` show it, each with its
own return type, and a plain-data method takes every argument its model method takes."""

from __future__ import annotations

import inspect
import pydoc
from pathlib import Path

import pytest

from toolcat import Catalog, InvalidQueryError

PAIRS = [("search", "search_summaries"), ("list", "list_summaries")]
SEARCH_KEYWORDS = [
    "mode",
    "k",
    "tags",
    "any_tags",
    "exclude_tags",
    "toolkit",
    "include_deferred",
    "include_denied",
    "policies",
    "principal",
]
LIST_KEYWORDS = [
    "tags",
    "any_tags",
    "exclude_tags",
    "toolkit",
    "include_deferred",
    "limit",
    "cursor",
    "include_denied",
]


@pytest.mark.parametrize(("model", "plain"), PAIRS)
def test_a_pair_shows_one_signature(model: str, plain: str) -> None:
    models = inspect.signature(getattr(Catalog, model))
    plains = inspect.signature(getattr(Catalog, plain))
    assert list(models.parameters.values()) == list(plains.parameters.values())
    assert (models.return_annotation, plains.return_annotation) == (
        "SearchResult" if model == "search" else "ToolPage",
        "dict[str, Any]",
    )


def test_the_signatures_are_the_documented_ones() -> None:
    search = inspect.signature(Catalog.search).parameters
    assert list(search) == ["self", "query", *SEARCH_KEYWORDS]
    assert search["query"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert {name: search[name].default for name in ("mode", "k", "include_deferred")} == {
        "mode": None,
        "k": 10,
        "include_deferred": True,
    }
    listing = inspect.signature(Catalog.list).parameters
    assert list(listing) == ["self", *LIST_KEYWORDS]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(listing.values())[1:])
    assert (listing["limit"].default, listing["include_deferred"].default) == (50, False)


def test_help_shows_the_arguments_and_the_docstring(tmp_path: Path) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        text = pydoc.render_doc(catalog.search_summaries, renderer=pydoc.plaintext)
        assert "search_summaries(query: 'str', *, mode:" in text
        assert "-> 'dict[str, Any]'" in text
        assert "``search`` as plain data" in text
        assert "policies:" in pydoc.render_doc(Catalog.search, renderer=pydoc.plaintext)


def test_a_plain_method_takes_every_argument_and_checks_it_alike(tmp_path: Path) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        kept = catalog.search_summaries("read", mode="bm25", k=3, tags=["x"], principal="p")
        assert kept["hits"] == []
        assert catalog.list_summaries(limit=3, cursor=None)["tools"] == []
        for method in (catalog.search, catalog.search_summaries):
            with pytest.raises(InvalidQueryError, match="k must be between 1 and 1000"):
                method("read", k=0)
            with pytest.raises(TypeError, match="unexpected keyword argument 'kk'"):
                method("read", kk=3)  # type: ignore[call-arg]
        for listing in (catalog.list, catalog.list_summaries):
            with pytest.raises(InvalidQueryError, match="limit must be between"):
                listing(limit=0)
            with pytest.raises(TypeError, match="positional argument"):
                listing(50)  # type: ignore[misc]
