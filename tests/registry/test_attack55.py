"""Attacks on the registration workers' collector, set to pass every ``WORKER_GC_OBJECTS``
(50,000) new objects instead of 700 (attack55).

A folder of manifests is input: hostile ones that fail to parse or validate make cyclic
garbage in the worker (every ``ManifestError`` is in a cycle, its ``problems`` hold it).
That garbage must still be collected, a worker's memory must not grow with the count of
such files, the caller's own collector must be left as it was, and a worker's garbled answer
must be read again here, never raised.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from toolcat.errors import ManifestError
from toolcat.registry import parallel
from toolcat.store.rows import ToolkitRows

from ..helpers import toolkit_data, write_manifest

BIG_JSON_ERROR = '{"toolkit": "k", "tools": [' + '"x' * 250_000 + "]"  # 0.5 MB, a bad comma


def peak_rss_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


# Where ``probe`` writes, and what else it does: set before the workers fork (the pool
# pickles ``_work`` by name, so the probe is a function of this module)
PROBES: list[Path] = []
EXTRA: list[Any] = []
WORK = parallel._work


def probe(path: str) -> tuple[Any, ...]:
    """A ``_work`` that also writes what its worker's collector looks like."""
    answer = WORK(path)
    for extra in EXTRA:
        extra()
    state = {
        "threshold": gc.get_threshold(),
        "peak_mb": peak_rss_mb(),
        "collections": [s["collections"] for s in gc.get_stats()],
    }
    (PROBES[0] / f"worker-{os.getpid()}.json").write_text(json.dumps(state))
    return answer


def probed(monkeypatch: pytest.MonkeyPatch, folder: Path, extra: Any = None) -> None:
    folder.mkdir()
    monkeypatch.setattr(parallel, "_work", probe)
    PROBES[:] = [folder]
    EXTRA[:] = [extra] if extra is not None else []


def worker_states(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("worker-*.json"))]


def bad_files(folder: Path, count: int) -> list[Path]:
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"bad-{i:04d}.json"
        path.write_text(BIG_JSON_ERROR)
        paths.append(path)
    return paths


def register_in_workers(paths: list[Path]) -> list[Any]:
    return list(parallel.load_each(paths, workers=2, min_bytes=0))


def test_workers_use_the_raised_threshold_and_the_caller_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    probes = tmp_path / "probes"
    probed(monkeypatch, probes)
    (tmp_path / "m").mkdir()
    paths = [
        write_manifest(tmp_path / "m", toolkit_data(f"kit-{i}", module=None), ".json")
        for i in range(6)
    ]
    before = gc.get_threshold()
    try:
        gc.set_threshold(1234, 5, 6)  # the caller's own choice
        found = register_in_workers(paths)
        assert gc.get_threshold() == (1234, 5, 6)
    finally:
        gc.set_threshold(*before)
    assert len(found) == 6 and answers == paths
    states = worker_states(probes)
    assert states and all(s["threshold"][0] == parallel.WORKER_GC_OBJECTS for s in states)
    # a process this one forks afterwards (the tool runner's workers do) starts from ours
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if gc.get_threshold() == before else 1)
    assert os.waitpid(pid, 0)[1] == 0


def test_cyclic_garbage_made_in_a_worker_is_still_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    probes = tmp_path / "probes"

    class Node:
        pass

    made: list[weakref.ref[Node]] = []

    def cycles() -> None:
        for _ in range(20_000):  # 40,000 tracked objects a file: a pass every few files
            node = Node()
            node.self = node  # type: ignore[attr-defined]
            made.append(weakref.ref(node))
        alive = sum(ref() is not None for ref in made)
        (probes / f"alive-{os.getpid()}").write_text(f"{alive} {len(made)}")

    probed(monkeypatch, probes, cycles)
    (tmp_path / "m").mkdir()
    paths = [
        write_manifest(tmp_path / "m", toolkit_data(f"kit-{i}", module=None), ".json")
        for i in range(10)
    ]
    register_in_workers(paths)
    for probe in probes.glob("alive-*"):
        alive, total = map(int, probe.read_text().split())
        assert total >= 40_000 and alive <= 60_000 and alive < total


@pytest.mark.slow
def test_a_failed_manifest_leaves_no_frame_or_file_text_in_cyclic_garbage(
    tmp_path: Path,
) -> None:
    """What a worker's failed file leaves for the collector once its answer is sent: no
    longer an error's cycle holding the frames of the parse and the file's text (for a
    YAML file of 0.3 MB, 300,000 nodes and marks, 17 MB) until the next pass."""
    cases = {
        "bad.json": BIG_JSON_ERROR,
        "bad.yaml": "toolkit: k\ntools: [" + "x, " * 100_000 + "\n  - ]]",
        "bad.toml": 'toolkit = "k"\n' + "x = 1\n" * 1000 + "bad = = 2\n",
        "invalid.json": json.dumps(
            toolkit_data(
                "k",
                module=None,
                tools=[
                    {"name": f"t{i}", "description": "w " * 50_000, "parameters": {"type": "x"}}
                    for i in range(3)
                ],
            )
        ),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        gc.collect()
        gc.disable()
        try:
            gc.set_debug(gc.DEBUG_SAVEALL)
            answer = parallel._work(str(path))
            assert answer[0] == "error"
            sent = pickle.loads(pickle.dumps(answer))
            del answer
            gc.collect()
        finally:
            gc.set_debug(0)
            gc.enable()
        left = list(gc.garbage)
        gc.garbage.clear()
        kinds = Counter(type(o).__name__ for o in left)
        assert not kinds["frame"] and not kinds["traceback"], (name, kinds)
        assert len(left) < 1000, (name, kinds.most_common(5))
        assert type(sent[2]) is ManifestError and parallel._plausible_error(sent[2])


def test_many_failing_manifests_do_not_grow_a_worker_s_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    """Each 0.5 MB JSON file with a bad comma left ~0.75 MB in an error's cycle and only ~40
    new objects: at 50,000 objects a pass, ~1,250 such files a worker (~1 GB of 1 MB files,
    ~4 GB of 4 MB ones) before its first pass; 180 more files raised the peak by 88 MB."""
    peaks = []
    for count in (20, 200):
        probes = tmp_path / f"probes-{count}"
        probed(monkeypatch, probes)
        found = register_in_workers(bad_files(tmp_path / f"m{count}", count))
        assert len(found) == count and all(isinstance(f, ManifestError) for f in found)
        peaks.append(max(s["peak_mb"] for s in worker_states(probes)))
    assert peaks[1] - peaks[0] < 40, peaks


def tags_garbled(path: str) -> tuple[Any, ...]:
    answer = parallel._load_here(Path(path))
    assert not isinstance(answer, ManifestError)
    toolkit, source, rows = answer
    first = rows.tools[0]
    bad = {0: None, 1: 5, 2: "network", 3: {"network": 1}}[int(Path(path).stem[-1]) % 4]
    tampered = first._replace(tags=bad)
    return ("ok", source, toolkit, ToolkitRows(rows.digest, [tampered, *rows.tools[1:]]))


def test_a_worker_answer_whose_tags_are_not_a_sequence_is_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Path]
) -> None:
    (tmp_path / "m").mkdir()
    paths = [
        write_manifest(tmp_path / "m", toolkit_data(f"kit-{i}", module=None), ".json")
        for i in range(4)
    ]
    alone = list(parallel.load_each(paths, workers=1))
    monkeypatch.setattr(parallel, "_work", tags_garbled)
    assert register_in_workers(paths) == alone
    assert answers == paths
