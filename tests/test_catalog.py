from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import table_snapshot, toolkit_data, write_manifest
from toolcat import (
    AmbiguousNameError,
    Catalog,
    InvalidQueryError,
    Policy,
    Toolkit,
    UnknownToolError,
    UnknownToolkitError,
    VersionConflictError,
)
from toolcat.errors import DeprecatedToolkitError


def test_register_adds_toolkit_and_bumps_revision(catalog: Catalog, tmp_path: Path) -> None:
    assert catalog.revision == 0
    [result] = catalog.register(write_manifest(tmp_path, toolkit_data()))
    assert (result.toolkit, result.version, result.status, result.tools) == (
        "weather",
        "1.0.0",
        "added",
        2,
    )
    assert result.revision == catalog.revision == 1
    tool = catalog.get("weather.get_forecast")
    assert tool.implementation == "weather_tools.forecast:get_forecast"
    assert tool.tags == ["read-only", "network", "weather"]
    assert tool.defer_loading is True


def test_same_version_same_content_is_a_no_op(catalog: Catalog, tmp_path: Path) -> None:
    path = write_manifest(tmp_path, toolkit_data())
    catalog.register(path)
    before = table_snapshot(catalog.path)
    [result] = catalog.register(path)
    assert result.status == "unchanged"
    assert result.revision == 1
    assert table_snapshot(catalog.path) == before


def test_same_version_changed_content_conflicts_unless_replaced(
    catalog: Catalog, tmp_path: Path
) -> None:
    catalog.register(write_manifest(tmp_path, toolkit_data()))
    changed = toolkit_data(description="Now with radar.")
    before = table_snapshot(catalog.path)
    with pytest.raises(VersionConflictError, match="--replace"):
        catalog.register(Toolkit.model_validate(changed))
    assert table_snapshot(catalog.path) == before
    [result] = catalog.register(Toolkit.model_validate(changed), replace=True)
    assert result.status == "replaced"
    assert catalog.revision == 2
    assert [v.version for v in catalog.versions("weather")] == ["1.0.0"]
    assert catalog.versions("weather")[0].description == "Now with radar."


def test_new_version_becomes_active_and_old_one_can_be_pinned(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data(version="1.0.0")))
    v2 = toolkit_data(version="1.10.0")
    v2["tools"][0]["description"] = "Hourly and daily forecast for a city."
    catalog.register(Toolkit.model_validate(v2))
    assert catalog.get("get_forecast").version == "1.10.0"
    assert catalog.get("weather.get_forecast@1.0.0").version == "1.0.0"
    assert catalog.get("weather.get_forecast@1.0").version == "1.0.0"  # PEP 440 equality
    versions = catalog.versions("weather")
    assert [(v.version, v.active) for v in versions] == [("1.0.0", False), ("1.10.0", True)]
    pinned = catalog.list(toolkit="weather@1.0.0", include_deferred=True)
    assert {t.version for t in pinned.tools} == {"1.0.0"}


def test_prerelease_does_not_displace_a_final_release(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data(version="1.0.0")))
    catalog.register(Toolkit.model_validate(toolkit_data(version="2.0.0rc1")))
    assert catalog.get("get_forecast").version == "1.0.0"
    catalog.deprecate("weather@1.0.0")
    assert catalog.get("get_forecast").version == "2.0.0rc1"


def test_deprecate_moves_active_version_back(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data(version="1.0.0")))
    catalog.register(Toolkit.model_validate(toolkit_data(version="2.0.0")))
    revision = catalog.deprecate("weather@2.0.0")
    assert revision == catalog.revision == 3
    assert catalog.get("get_forecast").version == "1.0.0"
    assert catalog.deprecate("weather@2.0.0") == 3  # already deprecated: no change
    catalog.deprecate("weather", "1.0.0")
    with pytest.raises(UnknownToolError):
        catalog.get("get_forecast")  # every version deprecated: nothing active
    assert catalog.get("weather.get_forecast@1.0.0").deprecated is True


def test_remove_one_version_then_all(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data(version="1.0.0")))
    catalog.register(Toolkit.model_validate(toolkit_data(version="2.0.0")))
    assert catalog.remove("weather@2.0.0") == 1
    assert catalog.get("get_forecast").version == "1.0.0"
    assert catalog.remove("weather") == 1
    with pytest.raises(UnknownToolkitError):
        catalog.versions("weather")
    assert catalog.search("forecast").hits == []
    with pytest.raises(UnknownToolkitError):
        catalog.remove("weather")
    catalog.register(Toolkit.model_validate(toolkit_data()))
    with pytest.raises(UnknownToolkitError, match=r"known: 1\.0\.0"):
        catalog.remove("weather@9.9")


def test_shared_tool_name_needs_toolkit_prefix(catalog: Catalog) -> None:
    catalog.register(
        Toolkit.model_validate(toolkit_data("weather")),
        Toolkit.model_validate(
            toolkit_data(
                "climate",
                module="climate_tools",
                tools=[
                    {
                        "name": "get_forecast",
                        "description": "Seasonal climate outlook.",
                        "implementation": "climate_tools:get_forecast",
                    }
                ],
            )
        ),
    )
    with pytest.raises(AmbiguousNameError) as err:
        catalog.get("get_forecast")
    assert err.value.candidates == ["climate.get_forecast", "weather.get_forecast"]
    assert catalog.get("climate.get_forecast").description == "Seasonal climate outlook."
    ids = {h.tool.id for h in catalog.search("forecast").hits}
    assert {"climate.get_forecast", "weather.get_forecast"} <= ids


def test_unknown_tool_suggests_close_matches(sample_catalog: Catalog) -> None:
    with pytest.raises(UnknownToolError) as err:
        sample_catalog.get("READ_FILE")
    assert err.value.suggestions == ["files.read_file"]
    with pytest.raises(UnknownToolError) as err:
        sample_catalog.get("convert_timezones")
    assert "time.convert_timezone" in err.value.suggestions
    for bad in ["", "a.b.c", "x@", "@1.0", "weather.get@1@2"]:
        with pytest.raises(UnknownToolError):
            sample_catalog.get(bad)


def test_list_mode_filters_and_order(sample_catalog: Catalog) -> None:
    page = sample_catalog.list(limit=1000)
    keys = [(t.toolkit, t.name) for t in page.tools]
    assert keys == sorted(keys)
    assert not any(t.defer_loading for t in page.tools)
    assert "files.delete_file" not in {t.id for t in page.tools}
    with_deferred = sample_catalog.list(include_deferred=True, limit=1000)
    assert "files.delete_file" in {t.id for t in with_deferred.tools}
    assert len(with_deferred.tools) > len(page.tools)

    both = sample_catalog.list(tags=["filesystem", "read-only"], limit=1000)
    assert {t.id for t in both.tools} == {
        "files.list_dir",
        "files.read_file",
        "files.find_files",
        "files.file_info",
    }
    only_fs = sample_catalog.list(tags=["filesystem"], limit=1000)
    assert len(only_fs.tools) > len(both.tools)
    assert sample_catalog.list(tags=["filesystem", "math"]).tools == []
    assert {t.toolkit for t in sample_catalog.list(toolkit="math").tools} == {"math"}
    with pytest.raises(UnknownToolkitError):
        sample_catalog.list(toolkit="math@9")


def test_list_pagination_covers_everything_once(sample_catalog: Catalog) -> None:
    everything = [t.id for t in sample_catalog.list(include_deferred=True, limit=1000).tools]
    seen: list[str] = []
    cursor = None
    while True:
        page = sample_catalog.list(include_deferred=True, limit=4, cursor=cursor)
        assert page.revision == sample_catalog.revision
        seen.extend(t.id for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == everything


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"include_deferred": True, "limit": 3},
        {"tags": ["filesystem", "read-only"]},
        {"toolkit": "math"},
        {"toolkit": "files@1.0.0", "include_deferred": True},
        {"include_denied": True, "include_deferred": True},
    ],
    ids=["default", "deferred-paged", "tags", "toolkit", "pinned", "denied"],
)
def test_list_summaries_is_list_as_plain_data(
    sample_catalog: Catalog, kwargs: dict[str, Any]
) -> None:
    """Page after page, the plain-dict list (the CLI's) says exactly what ``list`` says."""
    sample_catalog.policy = Policy.of(deny=["tag:destructive"])
    cursor = None
    pages = seen = 0
    while True:
        page = sample_catalog.list(**kwargs, cursor=cursor)
        seen += len(page.tools)
        plain = sample_catalog.list_summaries(**kwargs, cursor=cursor)
        expected = {
            "revision": page.revision,
            "tools": [t.summary() for t in page.tools],
            "next_cursor": page.next_cursor,
        }
        # As JSON text: 0 == False in Python, not in what `toolcat list --json` prints.
        assert json.dumps(plain) == json.dumps(expected)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen > 0
    assert pages > 1 or "limit" not in kwargs


def test_list_summaries_errors_as_list(sample_catalog: Catalog) -> None:
    with pytest.raises(InvalidQueryError, match="cursor"):
        sample_catalog.list_summaries(cursor="garbage!")
    with pytest.raises(InvalidQueryError):
        sample_catalog.list_summaries(limit=0)
    with pytest.raises(UnknownToolkitError):
        sample_catalog.list_summaries(toolkit="math@9")


@pytest.mark.parametrize("cursor", ["garbage!", "W10", "bm90IGpzb24", '["a"]'])
def test_bad_cursor_is_a_clear_error(sample_catalog: Catalog, cursor: str) -> None:
    with pytest.raises(InvalidQueryError, match="cursor"):
        sample_catalog.list(cursor=cursor)


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_bad_limit(sample_catalog: Catalog, limit: int) -> None:
    with pytest.raises(InvalidQueryError):
        sample_catalog.list(limit=limit)


def test_catalog_reopens_with_its_data(db_path: Path) -> None:
    with Catalog(db_path) as cat:
        cat.register(Toolkit.model_validate(toolkit_data()))
    with Catalog(db_path) as cat:
        assert cat.revision == 1
        assert cat.get("weather.get_forecast").name == "get_forecast"


def test_default_path_honours_toolcat_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCAT_DB", str(tmp_path / "env" / "cat.db"))
    with Catalog() as cat:
        assert cat.path == tmp_path / "env" / "cat.db"
    assert (tmp_path / "env" / "cat.db").exists()
    monkeypatch.delenv("TOOLCAT_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Catalog() as cat:
        assert cat.path == tmp_path / "xdg" / "toolcat" / "catalog.db"


def test_search_index_follows_the_active_version(catalog: Catalog) -> None:
    v1 = toolkit_data(version="1.0.0")
    v1["tools"][0]["description"] = "Barometric forecast for a city."
    catalog.register(Toolkit.model_validate(v1))
    assert catalog.search("barometric").hits[0].tool.version == "1.0.0"
    catalog.register(Toolkit.model_validate(toolkit_data(version="2.0.0")))
    assert catalog.search("barometric").hits == []  # only active versions are indexed
    assert catalog.search("forecast", toolkit="weather@2.0.0").hits
    with pytest.raises(InvalidQueryError, match="active versions only"):
        catalog.search("forecast", toolkit="weather@1.0.0")
    catalog.deprecate("weather@2.0.0")
    assert catalog.search("barometric").hits[0].tool.version == "1.0.0"
    catalog.remove("weather@1.0.0")
    assert catalog.search("forecast").hits == []
    conn = catalog._conn
    assert conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0] == 0


def test_registered_definitions_are_stored_exactly_as_written(catalog: Catalog) -> None:
    data = toolkit_data()
    original = json.dumps(data["tools"][0]["parameters"], sort_keys=True)
    catalog.register(Toolkit.model_validate(data))
    assert json.dumps(data["tools"][0]["parameters"], sort_keys=True) == original
    stored = catalog.get("weather.get_forecast").parameters
    assert json.dumps(stored, sort_keys=True) == original


def test_a_tool_of_a_deprecated_toolkit_is_reported_as_deprecated(
    catalog: Catalog, tmp_path: Path
) -> None:
    catalog.register(write_manifest(tmp_path, toolkit_data()))
    catalog.deprecate("weather@1.0.0")
    with pytest.raises(UnknownToolError, match=r"deprecated.*weather.get_forecast@1.0.0"):
        catalog.get("weather.get_forecast")
    assert catalog.get("weather.get_forecast@1.0.0").version == "1.0.0"
    with pytest.raises(UnknownToolkitError, match=r"every version .* deprecated; pin one"):
        catalog.list(toolkit="weather")
    with pytest.raises(DeprecatedToolkitError):  # what a scoped server may pass on as it is
        catalog.list(toolkit="weather")
    result = catalog.call("weather.get_forecast", {"city": "Lyon"})
    assert result.error_code == "UNKNOWN_TOOL" and "deprecated" in (result.error or "")


def test_unknown_toolkit_filters_are_errors_with_suggestions(sample_catalog: Catalog) -> None:
    with pytest.raises(UnknownToolkitError, match=r"Did you mean: math"):
        sample_catalog.list(toolkit="maths")
    with pytest.raises(UnknownToolkitError, match=r"no toolkit named 'nosuch'"):
        sample_catalog.search("add numbers", toolkit="nosuch", mode="bm25")
    with pytest.raises(UnknownToolkitError):
        list(sample_catalog.iter_tools(toolkit="nosuch"))


def test_register_accepts_lists_and_refuses_other_objects(catalog: Catalog, tmp_path: Path) -> None:
    first = Toolkit.model_validate(toolkit_data())
    second = Toolkit.model_validate(toolkit_data(name="weather2"))
    results = catalog.register([first, second])
    assert [r.toolkit for r in results] == ["weather", "weather2"]
    with pytest.raises(TypeError, match="not int"):
        catalog.register(42)  # type: ignore[arg-type]


def test_search_leaves_out_what_extra_policies_deny(sample_catalog: Catalog) -> None:
    """``policies`` (a server's scope) filter before ranking, whatever ``include_denied``
    says of the catalog's own policy; a rule that is not a Policy is refused."""
    sample_catalog.policy = Policy.of(deny=["tag:destructive"])
    extra = Policy.of(deny=["toolkit:files"], allow=["files.read_file", "files.delete_file"])
    for include_denied in (False, True):
        found = sample_catalog.search(
            "delete a file", k=50, include_denied=include_denied, policies=[extra]
        )
        hits = [h.tool.id for h in found.hits]
        assert "files.read_file" in hits and "files.find_files" not in hits
        assert ("files.delete_file" in hits) == include_denied  # the catalog's own policy
        plain = sample_catalog.search_summaries(
            "delete a file", k=50, include_denied=include_denied, policies=[extra]
        )
        assert [h["tool"]["id"] for h in plain["hits"]] == hits
    with pytest.raises(InvalidQueryError, match="Policy objects"):
        sample_catalog.search("delete a file", policies=["toolkit:files"])  # type: ignore[list-item]
