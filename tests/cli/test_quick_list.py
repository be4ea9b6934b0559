"""A plain ``toolcat list`` runs without click (``toolcat.cli.quick``), and prints what click's
path prints: the same stdout, stderr and exit status for every form of ``list``, the ones the
quick path takes and the ones it leaves to click (an error, an odd option, a hostile value,
a catalog with escapes in its text)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures.terminal_tools import HOSTILE
from tests.helpers import SAMPLE_TOOLKITS, toolkit_data, write_manifest
from toolcat import Catalog
from toolcat.cli.quick import list_arguments, quick_list

SRC = str(Path(__file__).resolve().parents[2] / "src")
CLICK_ONLY = (  # `main` with the quick path turned off: what `toolcat` printed before it
    "import toolcat.cli.quick as quick\n"
    "quick.quick_list = lambda args: None\n"
    "from toolcat.cli import main\n"
    "main()\n"
)


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The sample catalog, and one whose listed tool has escapes in its name's description."""
    root = tmp_path_factory.mktemp("quick")
    sample = root / "sample.db"
    with Catalog(sample) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        cursor = catalog.list_summaries(limit=2)["next_cursor"]
    data = toolkit_data()
    data["description"] = f"toolkit {HOSTILE}"
    for tool in data["tools"]:
        tool["defer_loading"] = False
        tool["description"] = f"weather {HOSTILE}\nsecond line {HOSTILE}"
    hostile = root / "hostile.db"
    with Catalog(hostile) as catalog:
        catalog.register(write_manifest(root, data, suffix=".json"))
    (root / "folder.db").mkdir()
    return {
        "DB": str(sample),
        "HOSTILE": str(hostile),
        "FOLDER": str(root / "folder.db"),
        "MISSING": str(root / "missing.db"),
        "CURSOR": cursor,
        "HOME": str(root),
    }


# (args, environment); DB and the other names are filled from `dbs`.
CASES = {
    "plain": (["--db", "DB", "list"], {}),
    "json": (["--db", "DB", "list", "--json"], {}),
    "joined values": (["--db=DB", "list", "--tag", "filesystem", "--tag=read-only"], {}),
    "tag filters": (
        [
            "--db",
            "DB",
            "list",
            "--any-tag",
            "math",
            "--exclude-tag",
            "destructive",
            "--include-deferred",
        ],
        {},
    ),
    "toolkit": (["--db", "DB", "list", "--toolkit", "math", "--include-deferred", "--json"], {}),
    "page": (["--db", "DB", "list", "--limit", "2"], {}),
    "next page": (["--db", "DB", "list", "--limit", "2", "--cursor", "CURSOR", "--json"], {}),
    "environment": (["list"], {"TOOLCAT_DB": "DB"}),
    "hostile text": (["--db", "HOSTILE", "list"], {}),
    "hostile json": (["--db", "HOSTILE", "list", "--json"], {}),
    # Left to click: errors from the catalog, then anything click reads its own way.
    "limit 0": (["--db", "DB", "list", "--limit", "0"], {}),
    "bad cursor": (["--db", "DB", "list", "--cursor", "zzz"], {}),
    "bad cursor json": (["--db", "DB", "list", "--cursor", "zzz", "--json"], {}),
    "unknown toolkit": (["--db", "DB", "list", "--toolkit", "nope"], {}),
    "hostile tag": (["--db", "DB", "list", "--tag", HOSTILE, "--json"], {}),
    "missing catalog": (["--db", "MISSING", "list"], {}),
    "folder": (["--db", "FOLDER", "list"], {}),
    "empty environment": (["list"], {"TOOLCAT_DB": "", "XDG_DATA_HOME": "HOME"}),
    "limit not a number": (["--db", "DB", "list", "--limit", "x"], {}),
    "limit signed": (["--db", "DB", "list", "--limit", "+3"], {}),
    "limit spaced": (["--db", "DB", "list", "--limit", " 3"], {}),
    "limit other digits": (["--db", "DB", "list", "--limit", "\u0663"], {}),
    "limit huge": (["--db", "DB", "list", "--limit", "9" * 5000], {}),
    "limit negative": (["--db", "DB", "list", "--limit", "-1"], {}),
    "repeated option": (["--db", "DB", "list", "--toolkit", "math", "--toolkit", "files"], {}),
    "repeated flag": (["--db", "DB", "list", "--json", "--json"], {}),
    "flag with value": (["--db", "DB", "list", "--json=1"], {}),
    "missing value": (["--db", "DB", "list", "--tag"], {}),
    "empty value": (["--db", "DB", "list", "--tag="], {}),
    "dash value": (["--db", "DB", "list", "--toolkit", "--json"], {}),
    "extra argument": (["--db", "DB", "list", "extra"], {}),
    "double dash": (["--db", "DB", "list", "--"], {}),
    "help": (["--db", "DB", "list", "--help"], {}),
    "unknown option": (["--db", "DB", "list", "--nope"], {}),
    "prefix of an option": (["--db", "DB", "list", "--incl"], {}),
    "global option": (["--db", "DB", "--deny", "tag:destructive", "list", "--json"], {}),
    "option after list": (["list", "--db", "DB"], {}),
    "two catalogs": (["--db", "DB", "--db", "HOSTILE", "list"], {}),
    "ascii stdout": (["--db", "HOSTILE", "list"], {"PYTHONIOENCODING": "ascii"}),
}
QUICK = {  # the cases the quick path takes (the rest it leaves to click untouched)
    "plain", "json", "joined values", "tag filters", "toolkit", "page", "next page",
    "environment", "hostile text", "hostile json",
}  # fmt: skip


def filled(values: dict[str, str], words: list[str]) -> list[str]:
    out = []
    for word in words:
        name, joined, rest = word.partition("=")
        if joined and rest in values:
            out.append(f"{name}={values[rest]}")
        else:
            out.append(values.get(word, word))
    return out


def run(code: list[str], args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    done = subprocess.run(
        [sys.executable, *code, *args],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
        cwd=env["HOME"],
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_quick_and_click_print_the_same(dbs: dict[str, str]) -> None:
    def both(case: str) -> tuple[str, tuple[int, bytes, bytes], tuple[int, bytes, bytes]]:
        words, extra = CASES[case]
        args = filled(dbs, words)
        env = {k: v for k, v in os.environ.items() if k not in ("TOOLCAT_DB", "COLUMNS")}
        env.update({"PYTHONPATH": SRC, "HOME": dbs["HOME"]})
        env.update({k: dbs.get(v, v) for k, v in extra.items()})
        quick = run(["-m", "toolcat"], args, env)
        click = run(["-c", CLICK_ONLY], args, env)
        return case, quick, click

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(both, CASES))
    for case, quick, click in results:
        assert quick == click, case
    printed = {case: quick for case, quick, _ in results}
    assert all(printed[case][0] == 0 and printed[case][1] for case in QUICK)
    for case in ("hostile text", "hostile json"):
        out = printed[case][1].decode()
        assert "\x1b" not in out and "\u202e" not in out, case
        assert "\\x1b" in out or "\\u001b" in out, case
    assert printed["limit not a number"][0] == 2  # click's usage error, not ours


def test_the_quick_path_takes_only_plain_lists(dbs: dict[str, str]) -> None:
    for case, (words, extra) in CASES.items():
        if extra or "MISSING" in words:
            continue
        parsed = list_arguments(filled(dbs, words))
        wanted = case in QUICK or case in {
            "limit 0",
            "bad cursor",
            "bad cursor json",
            "unknown toolkit",
            "hostile tag",
        }  # fmt: skip  (the catalog refuses these: then click runs them again)
        assert (parsed is not None) == wanted, case
    path, options = list_arguments(
        ["--db=x.db", "list", "--tag", "a", "--tag=b", "--limit", "7", "--json"]
    ) or (None, {})
    assert path == Path("x.db")
    assert options == {
        "tags": ("a", "b"), "any_tags": (), "exclude_tags": (), "limit": 7, "as_json": True
    }  # fmt: skip


def test_an_error_is_left_to_click_before_anything_is_written(
    dbs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert quick_list(["--db", dbs["DB"], "list", "--cursor", "zzz"]) is None
    assert quick_list(["--db", dbs["MISSING"], "list"]) is None
    assert not Path(dbs["MISSING"]).exists()
    assert capsys.readouterr() == ("", "")


def test_a_fresh_toolcat_list_does_not_import_click(dbs: dict[str, str]) -> None:
    """The process itself, as a user starts it: no click, no other command's module."""
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "toolcat", "--db", dbs["DB"], "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "toolcat.cli.quick" in imported and "toolcat.catalog" in imported
    assert not imported & {"click", "toolcat.cli.root", "toolcat.cli.agent", "toolcat.cli.admin"}
    assert done.stdout.endswith("revision 1\n")
