"""attack57: the JSON tree walks in C (``definitions/_walks.c``) against finalizers that run
in the middle of a walk, cycles, threads, leaks and schemas the meta-schema refuses."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest

from toolcat.definitions import walks
from toolcat.definitions.schema_draft7 import DRAFT7_META_SCHEMA
from toolcat.definitions.schema_draft7_plain import MAX_NESTING, plainly_valid
from toolcat.models import REF_KEYWORDS, remote_references
from toolcat.registry import limits
from toolcat.text import documents

pytestmark = pytest.mark.skipif(walks._walks is None, reason="_walks not compiled")

SRC = Path(__file__).resolve().parents[2] / "src"

# A garbage cycle whose finalizer empties the ``properties`` being walked, then fills the
# freed memory: collected when the walk makes an object the collector tracks (the lists'
# free list is emptied first, so the next list is made, not reused). ``{shift}`` moves the
# collection along the walk's allocations.
FINALIZER = """
import gc, sys
from toolcat.definitions import _walks

props = {{}}
for i in range(50):
    props[f"p{{i}}"] = {prop}
schema = {{"type": "object", "properties": props}}

class Bomb:
    def __del__(self):
        props.clear()
        Bomb.junk = [bytes([0x41]) * {size} for _ in range(200)]

def arm():
    bomb = Bomb()
    bomb.self = bomb

gc.disable()
keep = [[] for _ in range(1000)]
arm()
gc.set_threshold(gc.get_count()[0] + {shift}, 1000, 1000)
gc.enable()
answer = {call}
gc.disable()
print("answered", type(answer).__name__)
"""


def run_python(source: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize(
    ("prop", "size", "call"),
    [
        (
            '{"description": "d", "enum": [f"v{j}" for j in range(2000)]}',
            16000,
            "_walks.schema_texts(schema, 4)",
        ),
        (
            '{"type": "object", "required": [f"r{j}" for j in range(3000)]}',
            24000,
            "_walks.plainly_valid(schema, 32)",
        ),
    ],
    ids=["schema_texts", "plainly_valid"],
)
def test_a_finalizer_that_runs_mid_walk_cannot_crash_it(prop: str, size: int, call: str) -> None:
    """Making a list or a set may start a collection, and a collection runs finalizers:
    anyone's code, which may free the dict or list the walk holds borrowed (a segfault
    before the walks made their lists and sets before they start)."""
    for shift in range(6):
        done = run_python(FINALIZER.format(prop=prop, size=size, call=call, shift=shift))
        assert done.returncode == 0, (shift, done.returncode, done.stderr[-2000:])
        assert "answered" in done.stdout


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timer")
def test_a_cycle_in_a_schema_made_in_python_can_be_interrupted() -> None:
    """The Python walks a cycle for ever too; Ctrl-C stops it, and now the C as well."""
    source = textwrap.dedent(
        """
        import signal
        from toolcat.definitions import _walks
        loop = []
        loop.append(loop)
        signal.signal(signal.SIGALRM, signal.default_int_handler)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            _walks.remote_references({"type": "object", "x": {"y": loop}}, ("$ref",))
        except KeyboardInterrupt:
            print("interrupted")
        """
    )
    try:
        done = run_python(source, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("remote_references on a cycle ignored the interrupt")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted"


def test_the_walks_leak_no_memory_on_any_path() -> None:
    native = walks.compiled()
    assert native is not None

    class Sub(dict):  # type: ignore[type-arg]
        pass

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "a": {"description": "x", "enum": ["p", 1, "q"], "items": {"properties": {"b": {}}}},
            "c": {"$ref": "http://far", "type": ["string", "null"]},
        },
        "required": ["a", "a"],
    }
    calls = [
        lambda: native.schema_texts(schema, 4),
        lambda: native.schema_texts({"properties": {"a": Sub()}}, 4),
        lambda: native.schema_texts({"properties": {"a": {"enum": ["x", 2**70, Sub()]}}}, 4),
        lambda: native.plainly_valid(schema, 32),
        lambda: native.plainly_valid({"required": ["a", "b"], "type": ["null", "string"]}, 32),
        lambda: native.remote_references(schema, REF_KEYWORDS),
        lambda: native.remote_references([schema, Sub()], REF_KEYWORDS),
        lambda: native.plain_json(schema, 64),
    ]
    for call in calls:
        for _ in range(200):
            call()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(20_000):
                call()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 10_000, call


def test_threads_that_change_other_trees_change_no_answer() -> None:
    """Walks hold the GIL from start to end: threads rebuilding trees beside them never
    change what a walk of a tree of its own answers."""
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"description": f"d{i}", "enum": ["a", "b"]} for i in range(40)},
        "required": [f"p{i}" for i in range(40)],
    }
    expected = (
        list(documents.schema_texts(schema)),
        plainly_valid(schema),
        remote_references(schema),
        limits.plain_json(schema),
    )
    shared: dict[str, Any] = {"properties": {}}
    stop = threading.Event()
    wrong: list[object] = []

    def churn() -> None:
        while not stop.is_set():
            shared["properties"] = {f"x{i}": {"enum": [str(i)] * 5} for i in range(50)}
            shared.pop("properties")

    def walk() -> None:
        for _ in range(300):
            answer = (
                list(documents.schema_texts(schema)),
                plainly_valid(schema),
                remote_references(schema),
                limits.plain_json(schema),
            )
            documents.schema_texts(shared)
            if answer != expected:
                wrong.append(answer)

    churners = [threading.Thread(target=churn) for _ in range(2)]
    walkers = [threading.Thread(target=walk) for _ in range(3)]
    for thread in churners + walkers:
        thread.start()
    for thread in walkers:
        thread.join()
    stop.set()
    for thread in churners:
        thread.join()
    assert not wrong


META = fastjsonschema.compile(DRAFT7_META_SCHEMA, use_default=False)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "maxLength": -(2**70)},
        {"type": "object", "minItems": -1},
        {"type": "object", "minItems": True},
        {"type": "object", "minimum": True},
        {"type": "object", "minimum": "1"},
        {"type": ["object", "object"]},
        {"type": []},
        {"type": "object\x00"},
        {"type": ["object", "string\x00"]},
        {"type": "object", "required": ["a", "a"]},
        {"type": "object", "description": b"x"},
        {"type": "object", "uniqueItems": 1},
        {"type": "object", "allOf": []},
        {"type": "object", "properties": {"a": {"type": "strin"}}},
        {"type": "object", "properties": {"a": {"items": [{"type": 1}]}}},
        {"type": "object", "definitions": {"a": 1}},
        {"type": "object", "not": None},
    ],
)
def test_what_the_meta_schema_refuses_is_never_plainly_valid(schema: dict[str, Any]) -> None:
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        META(schema)
    for native in (True, False):
        walks.NATIVE = native
        try:
            assert not plainly_valid(schema)
        finally:
            walks.NATIVE = True


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "maxLength": 2**70, "minimum": -0.0, "maximum": float("nan")},
        {"type\x00": 5, "typé": 1, "名": None, "": {}},
        {"type": ["null", "object"], "required": [], "examples": [], "enum": []},
    ],
    ids=["numbers", "unknown-keys", "empty-lists"],
)
def test_edge_values_the_meta_schema_takes_answer_as_the_python(schema: dict[str, Any]) -> None:
    META(schema)
    walks.NATIVE = False
    try:
        python = plainly_valid(schema)
    finally:
        walks.NATIVE = True
    assert plainly_valid(schema) == python


def test_nesting_stops_at_the_bound_in_c_and_python() -> None:
    for depth in (MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 5_000):
        schema: Any = {"type": "string"}
        for _ in range(depth):
            schema = {"type": "object", "properties": {"a": schema}}
        walks.NATIVE = False
        try:
            python = plainly_valid(schema) if depth < 500 else False
        finally:
            walks.NATIVE = True
        assert plainly_valid(schema) == python


def test_a_wide_schema_is_walked_in_linear_time() -> None:
    def timed(schema: Any) -> float:
        start = time.perf_counter()
        for _ in range(5):
            plainly_valid(schema)
            list(documents.schema_texts(schema))
            remote_references(schema)
        return time.perf_counter() - start

    n = 20_000
    plain = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}
    hostile = {
        "type": "object",
        "required": [f"r{i}" for i in range(n)],
        "properties": {f"p{i}": {"enum": ["x"] * 3, "description": "d"} for i in range(n)},
    }
    assert timed(hostile) < 20 * timed(plain) + 0.5
