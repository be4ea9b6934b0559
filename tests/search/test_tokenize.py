from __future__ import annotations

import pytest

from toolcat.search.tokenize import split_words, tokenize


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("getVehicleBatteryLevel", ["get", "vehicle", "battery", "level"]),
        ("get_forecast", ["get", "forecast"]),
        ("http-get", ["http", "get"]),
        ("HTTPServerError", ["http", "server", "error"]),
        ("convert2PDF", ["convert", "2", "pdf"]),
        ("math.factorial", ["math", "factorial"]),
        ("GET /movie/{movie_id}/keywords", ["get", "movie", "movie", "id", "keywords"]),
        ("Café München", ["café", "münchen"]),
        ("账户管理", ["账户管理"]),
        ("", []),
        ("🙂 *** ()", []),
    ],
)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_tokenize_drops_stop_words_and_stems() -> None:
    assert tokenize("What is the weather forecasts for the weekend?") == [
        "weather",
        "forecast",
        "weekend",
    ]
    assert tokenize("listFiles") == tokenize("list the files")
