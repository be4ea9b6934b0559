"""Sample tools under hostile input: regex bombs in the text tools, number bombs in
calculate, and the time tools' UTC offsets. Each is a quick, readable TOOL_ERROR result.

Time is measured as CPU time of this process (what the regex engine's budget counts), so the
assertions hold on a loaded machine too.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from toolcat import Catalog


def ok(catalog: Catalog, name: str, **arguments: Any) -> Any:
    result = catalog.call(name, arguments)
    assert result.success, result.error
    return result.data


def error(catalog: Catalog, name: str, **arguments: Any) -> str:
    started = time.process_time()
    result = catalog.call(name, arguments, timeout=120)
    assert time.process_time() - started < 5, "the bound did not stop the work"
    assert result.error_code == "TOOL_ERROR", result
    message = result.error or ""
    assert message and "\n" not in message.strip()
    return message


@pytest.mark.parametrize("tool", ["regex_search", "regex_replace"])
@pytest.mark.parametrize(
    ("pattern", "text", "words"),
    [
        (r"(a|aa)+$", "a" * 51 + "!", ["ran longer than 2 s", "backtracking"]),
        (r"(?:(?:a{1000}){1000}){1000}", "aaa", ["repeats too much"]),
        (r"(?:a{4294967294})", "aaa", ["repeats too much"]),
        ("a" * 1001, "aaa", ["1000"]),
        ("(", "x", ["invalid regular expression"]),
    ],
)
def test_text_regex_bombs(
    sample_catalog: Catalog, tool: str, pattern: str, text: str, words: list[str]
) -> None:
    arguments = {"text": text, "pattern": pattern}
    if tool == "regex_replace":
        arguments["replacement"] = "x"
    message = error(sample_catalog, tool, **arguments)
    for word in words:
        assert word in message, message


def test_text_regex_tools_still_work(sample_catalog: Catalog) -> None:
    c = sample_catalog
    assert [
        m["match"] for m in ok(c, "regex_search", text="Ab ab", pattern="ab", ignore_case=True)
    ] == [
        "Ab",
        "ab",
    ]
    assert ok(c, "regex_search", text="x\ny", pattern="^y")[0]["line"] == 2  # multiline
    assert (
        ok(c, "regex_replace", text="a-b", pattern=r"(?P<l>\w)-(\w)", replacement=r"\2-\g<l>")[
            "text"
        ]
        == "b-a"
    )
    assert "replacement" in error(c, "regex_replace", text="a", pattern="a", replacement=r"\9")
    assert "10,000,000" in error(
        c, "regex_replace", text="a" * 100_000, pattern="", replacement="x" * 200
    )


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("(9**9999)**9999", ["digits"]),
        ("9**99999", ["exponent"]),
        ("10**4400", ["digits"]),
        ("(10**2000)*(10**2000)*(10**2000)", ["digits"]),
        ("factorial(100000)", ["factorial", "1000"]),
        ("9.0**9999", ["too large"]),
        ("exp(1000)", ["too large"]),
        ("1e308*10", ["finite"]),
        ("(" * 300 + "1" + ")" * 300, []),
    ],
)
def test_calculate_bombs(sample_catalog: Catalog, expression: str, words: list[str]) -> None:
    message = error(sample_catalog, "calculate", expression=expression)
    for word in words:
        assert word in message, message


def test_calculate_errors_name_whole_elements(sample_catalog: Catalog) -> None:
    c = sample_catalog
    message = error(c, "calculate", expression="__import__('os').system('id')")
    assert "unsupported expression element" in message and "AST" not in message
    assert "ast." not in message and "Attribute(" not in message and "Call(" not in message
    assert "attribute access" in message or "'__import__'" in message
    assert "'x'" in error(c, "calculate", expression="x + 1")
    assert "str constant" in error(c, "calculate", expression="'a' * 3")
    assert ok(c, "calculate", expression="factorial(20)") == 2432902008176640000
    assert len(str(ok(c, "calculate", expression="10**4000"))) == 4001
    assert ok(c, "calculate", expression="2**0.5 * 2**0.5") == pytest.approx(2)
    assert ok(c, "calculate", expression="-" * 900 + "1") == 1


@pytest.mark.parametrize(
    ("zone", "moment", "offset"),
    [
        ("America/New_York", "2026-01-15T12:00", "-05:00"),
        ("America/New_York", "2026-07-15T12:00", "-04:00"),
        ("Europe/Paris", "2026-01-15T12:00", "+01:00"),
        ("Asia/Kathmandu", "2026-01-15T12:00", "+05:45"),
        ("America/St_Johns", "2026-01-15T12:00", "-03:30"),
        ("UTC", "2026-01-15T12:00", "+00:00"),
    ],
)
def test_utc_offsets_are_plus_minus_hh_mm(
    sample_catalog: Catalog, zone: str, moment: str, offset: str
) -> None:
    converted = ok(
        sample_catalog, "convert_timezone", datetime=moment, from_timezone="UTC", to_timezone=zone
    )
    assert converted["utc_offset"] == offset
    assert converted["datetime"].endswith(offset)


def test_current_offsets_have_the_same_shape(sample_catalog: Catalog) -> None:
    import re

    zones = ok(sample_catalog, "list_timezones", contains="America/")
    assert zones and all(re.fullmatch(r"[+-]\d\d:\d\d", z["utc_offset"]) for z in zones)
    now = ok(sample_catalog, "current_time", timezone="America/New_York")
    assert now["utc_offset"] in ("-05:00", "-04:00")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": r"^(a|aa)+$"},
        {"type": "object", "patternProperties": {r"^(a|aa)+$": {}}},
        {"type": "object", "patternProperties": {r"^(a|aa)+$": {}}, "additionalProperties": False},
        {"type": "string", "pattern": "(?:(?:a{1000}){1000}){1000}"},
    ],
)
def test_validate_json_patterns_are_bounded(
    sample_catalog: Catalog, schema: dict[str, Any]
) -> None:
    hostile = "a" * 51 + "!"
    document: Any = f'"{hostile}"' if schema["type"] == "string" else {hostile: 1}
    message = error(sample_catalog, "validate_json", document=document, schema=schema)
    assert "ran longer than" in message or "repeats too much" in message
    fine = ok(sample_catalog, "validate_json", document='"aaa"', schema={"pattern": "^(a|aa)+$"})
    assert fine == {"valid": True, "errors": []}
    closed = {"patternProperties": {"^x": {}}, "additionalProperties": False}
    assert ok(sample_catalog, "validate_json", document={"xy": 1, "z": 2}, schema=closed)["errors"]


def test_validate_json_never_fetches_a_remote_ref(sample_catalog: Catalog) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/schema.json"
        message = error(sample_catalog, "validate_json", document='"x"', schema={"$ref": url})
        assert "unresolvable" in message.lower()
        assert requests == []
        local = {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"}
        assert ok(sample_catalog, "validate_json", document=3, schema=local)["valid"] is False
    finally:
        server.shutdown()
        server.server_close()
