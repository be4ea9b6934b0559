"""``toolcat call`` and a tool's events: status and progress on a terminal, artifacts listed
after the result, given in --json and written out with --save-artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, ToolEvent
from toolcat.cli import cli
from toolcat.cli.agent import show_progress
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts

SALES = "region,amount\nnorth,10\nsouth,5\nnorth,2.5\n"
REPORT = "region,count,sum,mean,min,max\nnorth,2,12.5,6.25,2.5,10.0\nsouth,1,5.0,5.0,5.0,5.0\n"
ARGS = json.dumps({"csv_text": SALES, "group_by": "region", "value": "amount"})


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(tmp_path / "kept"))
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.runtime_tools"))
    return path


def call(db: Path, *args: str) -> tuple[str, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "call", *args])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout, result.stderr


def test_call_prints_the_result_and_lists_its_artifacts(db: Path) -> None:
    out, err = call(db, "group_report", "--args", ARGS)
    assert json.loads(out)["groups"] == 2
    assert err.strip() == (
        "artifact region-amount-report.csv (text/csv, 81 bytes): amount per region: count, "
        "sum, mean, min, max (2 groups) -> in the result (--json, --save-artifacts)"
    )


def test_call_json_gives_every_event_with_the_artifacts(db: Path) -> None:
    out, _ = call(db, "group_report", "--args", ARGS, "--json")
    events = json.loads(out)["events"]
    assert [e["kind"] for e in events][:2] == ["status", "status"]
    assert {e["kind"] for e in events} == {"status", "progress", "artifact"}
    (artifact,) = [e for e in events if e["kind"] == "artifact"]
    assert (artifact["name"], artifact["text"], artifact["size"]) == (
        "region-amount-report.csv",
        REPORT,
        len(REPORT),
    )
    assert [e["state"] for e in events if e["kind"] == "status"] == [
        "parsing",
        "aggregating",
        "writing report",
    ]


def test_save_artifacts_writes_them_out_never_over_a_file(db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    for _ in range(2):
        _, err = call(db, "group_report", "--args", ARGS, "--save-artifacts", str(folder))
    assert (folder / "region-amount-report.csv").read_text() == REPORT
    assert (folder / "region-amount-report-2.csv").read_text() == REPORT
    assert f"-> {folder / 'region-amount-report-2.csv'}" in err


def test_save_artifacts_never_writes_through_a_link(db: Path, tmp_path: Path) -> None:
    """A link where an artifact's file would go (dangling, as an attacker leaves it) is
    neither followed nor overwritten: the artifact takes the next free name."""
    folder, outside = tmp_path / "out", tmp_path / "outside.csv"
    folder.mkdir()
    (folder / "region-amount-report.csv").symlink_to(outside)
    call(db, "group_report", "--args", ARGS, "--save-artifacts", str(folder))
    assert not outside.exists()
    assert (folder / "region-amount-report-2.csv").read_text() == REPORT


def test_a_large_artifact_is_listed_with_its_file(db: Path, tmp_path: Path) -> None:
    size = artifacts.INLINE_BYTES + 5
    args = json.dumps({"artifacts": 1, "big": size})
    out, err = call(db, "reports", "--args", args)
    assert out.strip() == "reported"
    lines = err.splitlines()
    assert lines[0].startswith("artifact table-0.csv (text/csv, 8 bytes) -> in the result")
    assert lines[1].startswith(
        f"artifact ../big report.txt (text/plain, {size:,} bytes) -> file://"
    )
    path = Path(lines[1].split("-> file://")[1])
    assert path.parent.parent == tmp_path / "kept" and path.read_text() == "x" * size
    given, _ = call(db, "reports", "--args", args, "--json", "--save-artifacts", str(tmp_path))
    big = json.loads(given)["events"][-3]
    assert big["kind"] == "artifact" and big["uri"].startswith("file://") and big["text"] is None
    assert (tmp_path / "big_report.txt").stat().st_size == size


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (
            {"kind": "status", "state": "retrying 2/3", "message": "HTTP 503"},
            "[status] retrying 2/3: HTTP 503",
        ),
        ({"kind": "status", "state": "done"}, "[status] done"),
        ({"kind": "progress", "progress": 2, "total": 5, "message": "rows"}, "[2/5] rows"),
        ({"kind": "log", "level": "warning", "message": "slow"}, "[warning] slow"),
        ({"kind": "artifact", "name": "a.csv"}, ""),
    ],
    ids=["status", "status-bare", "progress", "log", "artifact-later"],
)
def test_terminal_lines_per_event(
    event: dict[str, object], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    show_progress(ToolEvent.model_validate(event))
    assert capsys.readouterr().err.strip() == line
