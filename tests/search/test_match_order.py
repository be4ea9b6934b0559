"""In one hit list the match labels never rise down the ranks (``strong``, ``none``, ``weak``
was possible): a hit ranked above a fitting one is lifted to its label."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.search.calibration import FIT_ORDER, down_the_ranks

# Queries whose BM25 hits were labelled out of order in the sample catalog.
QUERIES = [
    "where is the config file",
    "what files are in the reports folder",
    "Read a text file from the workspace and return its contents",
]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    with Catalog(tmp_path_factory.mktemp("order") / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        yield catalog


@pytest.mark.parametrize("query", QUERIES)
def test_labels_never_rise_down_the_ranks(catalog: Catalog, query: str) -> None:
    hits = catalog.search(query, k=10, mode="bm25").hits
    labels = [FIT_ORDER[h.match] for h in hits]
    assert labels == sorted(labels, reverse=True), [h.match for h in hits]
    assert labels[0] > 0  # some hit fits: the list's best label is kept


def test_lifting_keeps_the_best_label_and_the_order() -> None:
    hits = [(1, 3.0, "strong"), (2, 2.0, "none"), (3, 1.0, "weak"), (4, 0.5, "none")]
    assert down_the_ranks(hits) == [
        (1, 3.0, "strong"),
        (2, 2.0, "weak"),
        (3, 1.0, "weak"),
        (4, 0.5, "none"),
    ]
    assert down_the_ranks([(1, 1.0, "none"), (2, 0.5, "none")])[0][2] == "none"
    assert down_the_ranks([]) == []
