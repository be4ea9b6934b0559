"""The sample toolkits work: each is called through the catalog, as an agent would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "workspace"
    monkeypatch.setenv("TOOLCAT_WORKSPACE", str(folder))
    return folder


def ok(catalog: Catalog, name: str, **arguments: Any) -> Any:
    result = catalog.call(name, arguments)
    assert result.success, result.error
    return result.data


def test_files(sample_catalog: Catalog, workspace: Path) -> None:
    c = sample_catalog
    assert ok(c, "write_file", path="notes/a.txt", content="one\ntwo\n") == {
        "path": "notes/a.txt",
        "size": 8,
    }
    assert ok(c, "read_file", path="notes/a.txt") == "one\ntwo\n"
    assert ok(c, "file_info", path="notes/a.txt")["lines"] == 2
    assert [e["name"] for e in ok(c, "list_dir", path="notes")] == ["a.txt"]
    assert ok(c, "find_files", pattern="*.txt") == ["notes/a.txt"]
    assert ok(c, "move_file", source="notes/a.txt", destination="b.txt") == "b.txt"
    assert ok(c, "make_dir", path="empty/inner") == "empty/inner"
    assert ok(c, "delete_file", path="b.txt") == "deleted b.txt"
    for bad in ["../outside.txt", "/etc/passwd", "notes/../../x"]:
        result = c.call("read_file", {"path": bad})
        assert result.error_code == "TOOL_ERROR" and "outside the workspace" in (result.error or "")
    (workspace.parent / "secret.txt").write_text("secret")
    (workspace / "link").symlink_to(workspace.parent / "secret.txt")
    assert "outside the workspace" in (c.call("read_file", {"path": "link"}).error or "")
    assert "cannot be deleted" in (c.call("delete_file", {"path": "."}).error or "")


def test_text(sample_catalog: Catalog) -> None:
    c = sample_catalog
    matches = ok(c, "regex_search", text="a1\nb22", pattern=r"(\w)(\d+)")
    assert [(m["match"], m["line"], m["groups"]) for m in matches] == [
        ("a1", 1, ["a", "1"]),
        ("b22", 2, ["b", "22"]),
    ]
    assert ok(
        c, "regex_replace", text="2026-01-02", pattern=r"(\d+)-(\d+)-(\d+)", replacement=r"\3/\2/\1"
    ) == {"text": "02/01/2026", "replacements": 1}
    diff = ok(c, "text_diff", before="a\nb\n", after="a\nc\n")
    assert (diff["added"], diff["removed"]) == (1, 1)
    stats = ok(c, "word_stats", text="The cat. The dog!", top=1)
    assert (stats["words"], stats["sentences"], stats["top_words"]) == (4, 2, [["the", 2]])
    assert ok(c, "change_case", text="getUserName", style="snake") == "get_user_name"
    assert ok(c, "change_case", text="get_user_name", style="camel") == "getUserName"
    assert ok(c, "slugify", text="Héllo, Wörld: 2026!") == "hello-world-2026"
    assert ok(c, "extract_urls", text="see https://x.org/a. or mail me@x.org") == {
        "urls": ["https://x.org/a"],
        "emails": ["me@x.org"],
    }
    assert "invalid regular expression" in (
        c.call("regex_search", {"text": "x", "pattern": "("}).error or ""
    )


def test_math(sample_catalog: Catalog) -> None:
    c = sample_catalog
    assert ok(c, "calculate", expression="(3 + 4) * sqrt(16)") == 28
    assert ok(c, "calculate", expression="2^10") == 1024
    assert "unsupported" in (c.call("calculate", {"expression": "__import__('os')"}).error or "")
    assert ok(c, "convert_units", value=10, from_unit="km", to_unit="mi")["value"] == pytest.approx(
        6.2137119
    )
    assert ok(c, "convert_units", value=212, from_unit="degF", to_unit="degC")["value"] == 100
    assert "cannot convert" in (
        c.call("convert_units", {"value": 1, "from_unit": "kg", "to_unit": "m"}).error or ""
    )
    stats = ok(c, "describe_numbers", numbers=[1, 2, 3, 4])
    assert (stats["mean"], stats["median"], stats["min"], stats["max"]) == (2.5, 2.5, 1, 4)
    assert ok(c, "percent_change", old=50, new=75)["percent_change"] == 50
    assert ok(c, "solve_quadratic", a=1, b=-5, c=6)["roots"] == [2, 3]
    assert ok(c, "prime_factors", n=360)["factors"] == [2, 2, 2, 3, 3, 5]
    assert ok(c, "prime_factors", n=97)["is_prime"] is True


def test_time(sample_catalog: Catalog) -> None:
    c = sample_catalog
    converted = ok(
        c,
        "convert_timezone",
        datetime="2026-07-01T09:00",
        from_timezone="America/New_York",
        to_timezone="Europe/London",
    )
    assert converted["datetime"] == "2026-07-01T14:00:00+01:00"
    assert ok(c, "date_diff", start="2026-01-01", end="2026-01-31")["days"] == 30
    assert ok(c, "add_duration", start="2026-01-31", months=1) == "2026-02-28"
    assert ok(c, "day_of_week", date="2000-01-01")["weekday"] == "Saturday"
    assert ok(c, "current_time", timezone="Asia/Tokyo")["utc_offset"] == "+09:00"
    assert any(z["zone"] == "Europe/Berlin" for z in ok(c, "list_timezones", contains="berlin"))
    assert "unknown time zone" in (c.call("current_time", {"timezone": "Mars/Base"}).error or "")


def test_data(sample_catalog: Catalog) -> None:
    c = sample_catalog
    doc = '{"users": [{"email": "a@x"}, {"email": "b@x"}]}'
    assert ok(c, "json_query", document=doc, path="users[*].email") == ["a@x", "b@x"]
    assert ok(c, "json_query", document=doc, path="users[1].email") == "b@x"
    records = ok(c, "csv_to_json", csv_text="name,age\nada,36\nbob,\n")
    assert records == [{"name": "ada", "age": 36}, {"name": "bob", "age": ""}]
    assert ok(c, "json_to_csv", records=[{"a": 1, "b": 2}]) == "a,b\n1,2\n"
    summary = ok(c, "csv_summary", csv_text="name,age\nada,36\nbob,\n")
    assert summary["columns"]["age"]["missing"] == 1
    check = ok(
        c,
        "validate_json",
        document={"a": "x"},
        schema={"type": "object", "properties": {"a": {"type": "integer"}}},
    )
    assert check["valid"] is False and check["errors"][0]["path"] == "/a"
    assert ok(c, "json_diff", before={"a": 1, "b": 2}, after={"a": 1, "b": 3, "c": 4}) == [
        {"op": "changed", "path": "/b", "before": 2, "after": 3},
        {"op": "added", "path": "/c", "after": 4},
    ]


def test_sqlite(sample_catalog: Catalog, workspace: Path) -> None:
    c = sample_catalog
    ok(c, "sqlite_execute", database="shop.db", sql="CREATE TABLE orders (id INTEGER, total REAL)")
    assert (
        ok(
            c,
            "sqlite_execute",
            database="shop.db",
            sql="INSERT INTO orders VALUES (?, ?)",
            params=[1, 9.5],
        )["rows_affected"]
        == 1
    )
    assert ok(c, "sqlite_tables", database="shop.db") == [
        {"name": "orders", "type": "table", "rows": 1}
    ]
    assert [
        col["name"] for col in ok(c, "sqlite_schema", database="shop.db", table="orders")["columns"]
    ] == ["id", "total"]
    rows = ok(c, "sqlite_query", database="shop.db", sql="SELECT * FROM orders")
    assert rows["rows"] == [{"id": 1, "total": 9.5}]
    result = c.call("sqlite_query", {"database": "shop.db", "sql": "DELETE FROM orders"})
    assert result.error_code == "TOOL_ERROR" and "read-only" in (result.error or "")
    assert "outside the workspace" in (c.call("sqlite_tables", {"database": "../x.db"}).error or "")


def test_group_report_totals_per_group_and_hands_back_its_csv(sample_catalog: Catalog) -> None:
    rows = "\n".join(f"{'ab'[i % 2]},{i}" for i in range(100))
    result = sample_catalog.call(
        "group_report", {"csv_text": f"k,v\n{rows}\nc,n/a\n", "group_by": "k", "value": "v"}
    )
    assert result.success, result.error
    assert result.data["rows"] == 101 and result.data["skipped"] == 1
    assert result.data["top"][0] == {
        "k": "b",
        "count": 50,
        "sum": 2500.0,
        "mean": 50.0,
        "min": 1.0,
        "max": 99.0,
    }
    progress = [e.progress for e in result.events if e.kind == "progress"]
    assert len(progress) in (20, 21) and progress[-1] == 101  # about 20, however long
    (report,) = result.artifacts
    assert report.content().decode().splitlines() == [
        "k,count,sum,mean,min,max",
        "b,50,2500.0,50.0,1.0,99.0",
        "a,50,2450.0,49.0,0.0,98.0",
    ]
    missing = sample_catalog.call(
        "group_report", {"csv_text": "k,v\na,1\n", "group_by": "x", "value": "v"}
    )
    assert missing.error_code == "TOOL_ERROR" and "no column 'x'; the columns are: k, v" in (
        missing.error or ""
    )
    empty = sample_catalog.call("group_report", {"csv_text": "", "group_by": "k", "value": "v"})
    assert "the columns are: -" in (empty.error or "")
