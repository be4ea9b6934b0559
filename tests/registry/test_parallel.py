"""Registering many manifests with worker processes: the same rows and the same refusals as
one process, whatever a worker sends back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import ManifestError, VersionConflictError
from toolcat.registry import parallel
from toolcat.registry.manifest import load_manifest
from toolcat.store.rows import ToolkitRows, check_rows, rows_of

from ..helpers import table_snapshot, toolkit_data, write_manifest


def many_tools(name: str, count: int) -> dict[str, Any]:
    tools = [
        {
            "name": f"tool_{i}",
            "description": f"Look up record number {i} of the {name} registry by its key.",
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": f"The key of record {i}"},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["key"],
            },
            "tags": ["lookup", f"group-{i % 7}"],
        }
        for i in range(count)
    ]
    return toolkit_data(name, tools=tools, module=None)


def manifests(folder: Path, sizes: list[int]) -> list[Path]:
    folder.mkdir(exist_ok=True)
    return [
        write_manifest(folder, many_tools(f"kit-{i:02d}", size), ".json")
        for i, size in enumerate(sizes)
    ]


def loaded(paths: list[Path], workers: int) -> list[Any]:
    """What ``load_each`` hands over, comparable across processes."""
    found = []
    for item in parallel.load_each(paths, workers=workers, min_bytes=0):
        if isinstance(item, ManifestError):
            found.append(str(item))
        else:
            toolkit, source, rows = item
            found.append((toolkit, source, rows))
    return found


def test_workers_hand_over_what_one_process_makes(tmp_path: Path, answers: list[Path]) -> None:
    paths = manifests(tmp_path / "m", [30, 5, 60, 1, 12])
    bad = many_tools("broken", 3)
    bad["tools"][1]["parameters"]["properties"]["key"]["type"] = "strin"
    paths.insert(2, write_manifest(tmp_path / "m", bad, ".json"))
    alone = loaded(paths, workers=1)
    assert not answers
    assert loaded(paths, workers=2) == alone
    assert answers == paths
    assert "tool 'tool_1', field 'parameters'" in alone[2]


def garbled(path: str) -> tuple[Any, ...]:
    """A worker whose answers are wrong in every way but one in nine."""
    answer = parallel._load_here(Path(path))
    assert not isinstance(answer, ManifestError)
    toolkit, source, rows = answer
    first = rows.tools[0]
    kind = int(Path(path).stem.rsplit("-", 1)[1]) % 9
    if kind == 0:
        return ("ok", source, toolkit, "not rows")
    if kind == 1:  # a definition that does not match its hash
        tampered = first._replace(definition=first.definition.replace("Look", "Cook"))
        return ("ok", source, toolkit, ToolkitRows(rows.digest, [tampered, *rows.tools[1:]]))
    if kind == 2:  # another file's answer
        return ("ok", source + ".other", toolkit, rows)
    if kind == 3:  # rows of another toolkit (one tool short)
        return ("ok", source, toolkit, ToolkitRows(rows.digest, rows.tools[1:]))
    if kind == 4:  # an FTS5 column that is not text
        return ("ok", source, toolkit, ToolkitRows(rows.digest, [first._replace(fts=(1,) * 5)]))
    if kind == 5:  # a head whose description (stored as is) is not text
        return ("ok", source, toolkit._replace(description=b"x"), rows)
    if kind == 6:  # a tool's implementation (checked against the trust roots) not text
        tools = (toolkit.tools[0]._replace(implementation=["os:system"]), *toolkit.tools[1:])
        return ("ok", source, toolkit._replace(tools=tools), rows)
    if kind == 7:  # the toolkit itself, not its head
        return ("ok", source, load_manifest(path), rows)
    return ("ok", source, toolkit, rows)


def test_a_garbled_answer_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    paths = manifests(tmp_path / "m", [4, 9, 2, 7, 3, 5, 8, 6, 1, 2])
    alone = loaded(paths, workers=1)
    monkeypatch.setattr(parallel, "_work", garbled)  # the forked workers run this one
    assert loaded(paths, workers=2) == alone
    assert answers == paths  # every answer came from a worker, and was checked


def dies_on_the_third(path: str) -> tuple[Any, ...]:
    if path.endswith("kit-02.json"):
        os._exit(9)
    return parallel._load_here(Path(path))  # type: ignore[return-value]


def test_a_worker_that_dies_leaves_the_files_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    paths = manifests(tmp_path / "m", [4, 9, 2, 7, 3])
    alone = loaded(paths, workers=1)
    monkeypatch.setattr(parallel, "_work", dies_on_the_third)
    assert loaded(paths, workers=2) == alone
    assert answers and set(answers) < set(paths)  # workers answered some, this process the rest


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        (lambda r: "rows", "not rows"),
        (lambda r: ToolkitRows("x" * 64, r.tools), "SHA-256"),
        (lambda r: ToolkitRows(r.digest, r.tools[:-1]), "1 tool rows for 2 tools"),
        (lambda r: ToolkitRows(r.digest, r.tools[::-1]), "the row names"),
        (
            lambda r: ToolkitRows(r.digest, [r.tools[0]._replace(tags_json="[]"), r.tools[1]]),
            "tags do not match",
        ),
        (
            lambda r: ToolkitRows(r.digest, [r.tools[0]._replace(defer_loading=1), r.tools[1]]),
            "not a boolean",
        ),
        (lambda r: ToolkitRows(r.digest, [tuple(r.tools[0]), r.tools[1]]), "not a row"),
    ],
    ids=["type", "digest", "count", "order", "tags", "defer", "tuple"],
)
def test_check_rows_names_what_is_wrong(rows: Any, problem: str) -> None:
    from toolcat.models import Toolkit

    toolkit = Toolkit.model_validate(toolkit_data())
    made = rows_of(toolkit)
    assert check_rows(toolkit, made) is None
    found = check_rows(toolkit, rows(made))
    assert found is not None and problem in found


def test_a_bad_tool_deep_in_a_large_manifest_is_refused_and_nothing_written(
    tmp_path: Path, answers: list[Path]
) -> None:
    folder = tmp_path / "m"
    paths = manifests(folder, [300, 2500, 400])
    data = json.loads(paths[1].read_text())
    data["tools"][1999]["parameters"]["properties"]["limit"]["minimum"] = "one"
    paths[1].write_text(json.dumps(data))
    db = tmp_path / "catalog.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(write_manifest(tmp_path, many_tools("before", 2), ".json"))
        before = table_snapshot(db)
        with pytest.raises(ManifestError) as refused:
            catalog.register(folder)
    assert answers == paths  # the workers read them
    assert (refused.value.file, refused.value.toolkit, refused.value.tool) == (
        str(paths[1]),
        "kit-01",
        "tool_1999",
    )
    assert refused.value.field == "parameters"
    assert table_snapshot(db) == before
    result = CliRunner().invoke(cli, ["--db", str(db), "register", str(folder)])
    assert result.exit_code == 3
    assert result.output.strip().splitlines() == [
        f"error: {paths[1]}: toolkit 'kit-01', tool 'tool_1999', field 'parameters': "
        "parameters is not valid JSON Schema at properties/limit/minimum: must be number"
    ]
    assert table_snapshot(db) == before


def test_a_conflict_after_written_toolkits_rolls_them_back(
    tmp_path: Path, answers: list[Path]
) -> None:
    folder = tmp_path / "m"
    paths = manifests(folder, [300, 300, 300])
    db = tmp_path / "catalog.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(paths[1])
        changed = json.loads(paths[1].read_text())
        changed["description"] = "Other content, same version."
        paths[1].write_text(json.dumps(changed))
        before = table_snapshot(db)
        with pytest.raises(VersionConflictError):
            catalog.register(folder)
        assert table_snapshot(db) == before
        # a manifest problem in a later file outranks the conflict, as when all is read first
        broken = json.loads(paths[2].read_text())
        broken["tools"][5]["name"] = "bad name"
        paths[2].write_text(json.dumps(broken))
        with pytest.raises(ManifestError) as refused:
            catalog.register(folder)
        assert refused.value.tool == "bad name" and refused.value.file == str(paths[2])
        assert table_snapshot(db) == before
    assert answers == paths + paths  # the two registrations of the folder used workers


def test_a_database_failure_is_raised_at_once_not_outranked_by_later_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from toolcat.store import writer

    folder = tmp_path / "m"
    paths = manifests(folder, [3, 4, 5])
    broken = json.loads(paths[2].read_text())
    broken["tools"][1]["name"] = "bad name"
    paths[2].write_text(json.dumps(broken))
    db = tmp_path / "catalog.db"
    with Catalog(db, create=True) as catalog:
        before = table_snapshot(db)
        read: list[str] = []
        original = parallel._load_here

        def counted(path: Path) -> Any:
            read.append(path.name)
            return original(path)

        def full_disk(*args: Any, **kwargs: Any) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(parallel, "_load_here", counted)
        monkeypatch.setattr(writer, "_register_one", full_disk)
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            catalog.register(folder)
        assert read == [paths[0].name]  # no file read past the failure
    assert table_snapshot(db) == before


@pytest.mark.parametrize("value", ["lots", "2.5", "-"])
def test_a_worker_count_that_is_not_a_number_is_refused_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    folder = tmp_path / "m"
    manifests(folder, [3, 4])
    db = tmp_path / "catalog.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(write_manifest(tmp_path, many_tools("before", 2), ".json"))
    before = table_snapshot(db)
    monkeypatch.setenv("TOOLCAT_REGISTER_WORKERS", value)
    result = CliRunner().invoke(cli, ["--db", str(db), "register", str(folder)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: TOOLCAT_REGISTER_WORKERS must be a whole number, not {value!r}"
    ]
    assert table_snapshot(db) == before
    monkeypatch.setenv("TOOLCAT_REGISTER_WORKERS", " 0 ")  # blank around a number is fine
    assert parallel.worker_count() == 0


def test_a_worker_count_past_the_cores_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TOOLCAT_REGISTER_WORKERS=100000`` with 100,000 files does not fork 100,000 times."""
    from toolcat.search import batch_encoding

    monkeypatch.setenv("TOOLCAT_REGISTER_WORKERS", "100000")
    assert parallel.worker_count() == batch_encoding.MAX_WORKERS_PER_CORE * batch_encoding.cores()


def process_state(pid: int) -> str | None:
    """A process's state letter, None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def children_of(parent: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def waiting_on_a_pipe(pid: int) -> bool:
    try:
        return "pipe_read" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


# The CLI as a user runs it, with Ctrl-C's usual handling (a test runner started in the
# background may have SIGINT ignored, and children inherit that).
CLI = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " + (
    "from toolcat.cli import main; sys.argv[0] = 'toolcat'; main()"
)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_stopping_a_parallel_registration_leaves_no_worker_and_no_traceback(
    tmp_path: Path, how: str
) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) and ``kill`` (SIGTERM to the caller
    alone) stop the workers too; none prints a traceback, none is left blocked on a pipe."""
    import signal
    import subprocess
    import sys
    import time

    paths = manifests(tmp_path / "m", [1500] * 16)
    errors = tmp_path / "stderr"
    env = {**os.environ, "TOOLCAT_REGISTER_WORKERS": "2"}
    command = [sys.executable, "-c", CLI, "--db", str(tmp_path / "c.db"), "register"]
    with open(errors, "wb") as err:
        caller = subprocess.Popen(
            [*command, *map(str, paths)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    workers: set[int] = set()
    for _ in range(200):
        workers = children_of(caller.pid)
        if len(workers) == 2 or caller.poll() is not None:
            break
        time.sleep(0.05)
    assert len(workers) == 2, "the workers never started"
    for _ in range(100):  # a worker idle, waiting for its next file (read ahead: soon)
        if any(waiting_on_a_pipe(p) for p in workers):
            break
        time.sleep(0.05)
    if how == "ctrl-c":
        os.killpg(caller.pid, signal.SIGINT)
    else:
        caller.terminate()
    caller.wait(30)
    for _ in range(50):
        if all(process_state(p) in (None, "Z") for p in workers):
            break
        time.sleep(0.1)
    left = {p: process_state(p) for p in workers if process_state(p) not in (None, "Z")}
    for pid in left:  # leave nothing behind, whatever happens
        os.kill(pid, signal.SIGKILL)
    assert left == {}
    assert "Traceback" not in errors.read_text()


def _collected_cycles() -> tuple[tuple[int, int, int], int]:
    """In a worker: its collector's thresholds, and how many of 120,000 cycles are freed
    without an explicit collection."""
    import gc
    import weakref

    class Node:
        pass

    alive = []
    for _ in range(120_000):
        node = Node()
        node.me = node  # type: ignore[attr-defined]
        alive.append(weakref.ref(node))
        del node
    return gc.get_threshold(), sum(ref() is None for ref in alive)


def test_workers_collect_less_often_and_still_free_cycles() -> None:
    import gc
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    before = gc.get_threshold()
    with ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("fork"), initializer=parallel._in_worker
    ) as pool:
        threshold, freed = pool.submit(_collected_cycles).result()
    assert threshold[0] == parallel.WORKER_GC_OBJECTS
    assert freed >= 50_000  # collected as they passed the threshold, not kept for ever
    assert gc.get_threshold() == before  # the caller's own collector is left alone
