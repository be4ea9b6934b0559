"""Attack56: ``canonical_json`` against ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``: same text for every value, same exception type and message for every
error, and no crash or blow-up where ``json.dumps`` stops at once (cycles)."""

from __future__ import annotations

import collections
import decimal
import enum
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from toolcat.models import canonical_json

SRC = str(Path(__file__).resolve().parents[1] / "src")


def dumps(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def outcome(fn, value):
    try:
        return ("ok", fn(value))
    except Exception as exc:  # compared, not swallowed
        return (type(exc), str(exc))


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PYTHONPATH": SRC},
    )


class Color(enum.IntEnum):
    RED = 1


class Name(str, enum.Enum):
    A = "a"


class LoudInt(int):
    def __repr__(self):
        return "LOUD"

    __str__ = __repr__


class LoudFloat(float):
    def __repr__(self):
        return "LOUD"

    __str__ = __repr__


class LoudStr(str):
    def __str__(self):
        return "LOUD"

    def __repr__(self):
        return "LOUD"


class ItemsDict(dict):
    def items(self):
        return [("z", 1), ("a", 2)]

    def keys(self):
        return ["q"]


class IterList(list):
    def __iter__(self):
        return iter([9, 9])


class JsonMethod:
    def __json__(self):
        return {}


def _cycles():
    d: dict = {}
    d["a"] = d
    lst: list = []
    lst.append(lst)
    t = ([],)
    t[0].append(t)
    deep: dict = {"k": [{"x": [1, {"y": None}]}]}
    deep["k"][0]["x"][1]["y"] = deep
    after_ok: dict = {"a": 1, "b": "x", "c": [1.5]}
    after_ok["z"] = [after_ok]
    return [d, lst, t, deep, after_ok]


VALUES = [
    None,
    True,
    False,
    0,
    -1,
    10**30,
    -(10**300),
    1.5,
    -0.0,
    0.0,
    1e308,
    5e-324,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "é\n\t\x00\x1f\x7f\u2028\u2029",
    "\ud800",
    "\udfff lone",
    "\U0001f600",
    '"\\/',
    {},
    [],
    (),
    (1, [2, (3,)]),
    {1: "a", 2.5: "b", True: "c", None: "d", "e": "f"},  # noqa: F601 - True is 1, as JSON sees it
    {"b": 1, "a": {"d": [], "c": {}}},
    {"\ud800": 1, "\x00": 2, "é": 3, "e": 4},
    {1: 1, "1": 2},  # duplicate text keys
    {1: "a", "b": 2},  # mixed under sort: TypeError
    {None: 1, 0: 2},
    {(1, 2): 3},  # tuple key: TypeError
    collections.OrderedDict([("b", 1), ("a", 2)]),
    Color.RED,
    {Color.RED: Color.RED},
    Name.A,
    {Name.A: [Name.A]},
    LoudInt(3),
    LoudFloat(2.5),
    LoudStr("s"),
    {LoudStr("k"): LoudInt(1), "a": LoudFloat(1.0)},
    ItemsDict(x=1),
    IterList([1, 2]),
    decimal.Decimal("1.1"),
    b"bytes",
    {1, 2},
    frozenset(),
    object(),
    JsonMethod(),
    {"a": object()},
    [1, {2, 3}],
    complex(1, 2),
    int("9" * 4000),
]


@pytest.mark.parametrize("value", VALUES + _cycles(), ids=lambda v: type(v).__name__)
def test_text_and_errors_match_json_dumps(value):
    assert outcome(canonical_json, value) == outcome(dumps, value)


def test_int_over_str_digits_limit_raises_like_dumps():
    if not hasattr(sys, "set_int_max_str_digits"):
        pytest.skip("no int digit limit")
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    try:
        value = [10**5000]
        assert outcome(canonical_json, value) == outcome(dumps, value)
        assert outcome(canonical_json, value)[0] is ValueError
    finally:
        sys.set_int_max_str_digits(old)


def test_deep_nesting_raises_recursion_error_like_dumps():
    value: list = []
    for _ in range(sys.getrecursionlimit() * 3):
        value = [value]
    got, want = outcome(canonical_json, value), outcome(dumps, value)
    assert got[0] is want[0] is RecursionError
    assert got == want


def test_recursion_error_from_user_code_is_not_swallowed():
    """A RecursionError raised by user code during encoding reaches the caller, as with
    json.dumps; it must not be taken for a cycle and the value encoded again."""

    class Key(str):
        calls = 0

        def __lt__(self, other):
            Key.calls += 1
            if Key.calls == 1:
                raise RecursionError("from user code")
            return str.__lt__(self, other)

    value = {Key("a"): 1, Key("b"): 2}
    want = outcome(dumps, value)
    Key.calls = 0
    assert outcome(canonical_json, value) == want == (RecursionError, "from user code")


def test_cycle_seen_only_once_raises_circular_reference_like_dumps():
    """A mapping whose items() yields itself on the first call only: json.dumps sees the
    container twice on the stack and raises; the encoder without markers went on."""

    class Flip(dict):
        calls = 0

        def items(self):
            Flip.calls += 1
            return [("a", self)] if Flip.calls == 1 else []

    want = outcome(dumps, Flip(x=1))
    Flip.calls = 0
    assert outcome(canonical_json, Flip(x=1)) == want == (ValueError, "Circular reference detected")


def test_cycle_in_small_stack_thread_raises_valueerror_not_segfault():
    child = run_child(
        """
        import threading
        from toolcat.models import canonical_json
        threading.stack_size(65536)
        d = {}; d["a"] = [d]
        def go():
            try:
                canonical_json(d)
            except ValueError as e:
                print("VE", e)
        t = threading.Thread(target=go); t.start(); t.join()
        """
    )
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() == "VE Circular reference detected"


def test_cycle_with_raised_recursion_limit_raises_valueerror_not_segfault():
    child = run_child(
        """
        import sys
        from toolcat.models import canonical_json
        sys.setrecursionlimit(200000)
        d = {}; d["a"] = [d]
        try:
            canonical_json(d)
        except ValueError as e:
            print("VE", e)
        """
    )
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() == "VE Circular reference detected"


def test_wide_cycle_fails_fast_like_dumps():
    """A cycle through a wide dict: json.dumps raises at the first repeat; encoding down to
    the recursion limit re-encodes the width at every level (1000x the work)."""
    child = run_child(
        """
        import time
        from toolcat.models import canonical_json
        d = {str(i): "x" * 100 for i in range(5000)}
        d["zz"] = d
        t = time.perf_counter()
        try:
            canonical_json(d)
        except ValueError as e:
            print("VE", e)
        print(time.perf_counter() - t)
        """,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-500:]
    verdict, seconds = child.stdout.strip().splitlines()
    assert verdict == "VE Circular reference detected"
    assert float(seconds) < 0.5


def test_lowered_recursion_limit_small_values_still_match():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(len(_stack_depth()) + 80, 100))
    try:
        value: list = [1]
        for _ in range(20):
            value = [value, {"k": value}]
        assert outcome(canonical_json, value) == outcome(dumps, value)
    finally:
        sys.setrecursionlimit(old)


def _stack_depth():
    import inspect

    return inspect.stack(0)


def test_threads_shared_and_distinct_values_match():
    shared = {"s": [1, 2.5, "é", {"b": None, "a": True}], "n": list(range(50))}
    cyc: dict = {}
    cyc["c"] = [cyc]
    want_shared = dumps(shared)
    errors: list = []

    def work(i):
        own = {"i": i, "l": [i] * 10, "d": {str(j): j for j in range(i % 20)}}
        for _ in range(300):
            if canonical_json(shared) != want_shared or canonical_json(own) != dumps(own):
                errors.append(i)
                return
            if outcome(canonical_json, cyc) != (ValueError, "Circular reference detected"):
                errors.append(("cycle", i))
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
