"""Bounded regular expressions: patterns from strangers, compiled and run with limits.

Everything that runs a regular expression someone else wrote (the regex search mode, the
``text`` sample tools, JSON Schema ``pattern`` checks at call time) goes through here:

- :func:`compile` refuses a pattern longer than ``max_length`` characters, or one whose counted
  repetitions multiply past :data:`MAX_COST` (the ``regex`` engine unrolls them as it compiles:
  ``(?:(?:a{1000}){1000}){1000}`` is 27 characters and gigabytes), *before* compiling it;
- :func:`search`, :func:`finditer`, :func:`subn` and :func:`check_pattern` run on the ``regex``
  engine with a time budget, so catastrophic backtracking ends with :class:`PatternTimeout`.
  The engine measures the budget in CPU time of the process: on an idle machine that is wall
  time; on a loaded one the wall time can be several times longer, the work done never more.

Patterns use Python (``regex`` V0) syntax. Errors are :class:`PatternError` (a ``ValueError``)
with a one-line message naming the pattern.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import regex

MAX_LENGTH = 1000
"""Longest pattern :func:`compile` accepts by default, in characters."""
MAX_COST = 10_000
"""Largest compiled size, counting each element once per repetition (``a{100}`` costs 100,
``(?:ab){50}`` 100, ``(?:a{100}){100}`` 10,000); the engine compiles 10,000 in about 40 ms."""
MAX_OUTPUT = 10_000_000
"""Most characters :func:`subn` may produce."""
DEFAULT_BUDGET_S = 2.0


class PatternError(ValueError):
    """A pattern that is invalid, too long, repeats too much, or ran past its time budget."""


class PatternTimeout(PatternError):
    """Matching ran longer than its time budget (catastrophic backtracking, usually)."""


def compile(pattern: str, flags: int = 0, *, max_length: int = MAX_LENGTH) -> regex.Pattern[str]:
    """``pattern`` compiled by the ``regex`` engine, once its length and repetition are checked.

    Raises:
        PatternError: The pattern is not text, too long, repeats too much or does not compile.
    """
    if not isinstance(pattern, str):
        raise PatternError(f"a regular expression is text, not {type(pattern).__name__}")
    if len(pattern) > max_length:
        raise PatternError(
            f"regular expression of {len(pattern)} characters; the limit is {max_length}"
        )
    return _compile(pattern, flags)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str, flags: int) -> regex.Pattern[str]:
    import regex

    cost = _cost(pattern, flags)
    if cost > MAX_COST:
        raise PatternError(
            f"regular expression {_short(pattern)} repeats too much: its counted repetitions "
            f"unroll to more than {MAX_COST:,} elements (nested counts multiply); "
            "use smaller {m,n} counts"
        )
    try:
        return regex.compile(pattern, flags)
    except (regex.error, ValueError, OverflowError, RecursionError) as e:
        raise PatternError(f"invalid regular expression {_short(pattern)}: {e}") from None


def search(
    compiled: regex.Pattern[str], text: str, budget: float = DEFAULT_BUDGET_S
) -> regex.Match[str] | None:
    """The first match of ``compiled`` in ``text``, or None.

    Raises:
        PatternTimeout: Matching ran longer than ``budget`` seconds.
    """
    if budget <= 0:
        raise _timeout(compiled.pattern, budget)
    try:
        return compiled.search(text, timeout=budget)
    except TimeoutError:
        raise _timeout(compiled.pattern, budget) from None


def finditer(
    compiled: regex.Pattern[str], text: str, budget: float = DEFAULT_BUDGET_S
) -> Iterator[regex.Match[str]]:
    """Every match of ``compiled`` in ``text``, all of them found within ``budget`` seconds.

    Raises:
        PatternTimeout: Finding them ran longer than ``budget`` seconds.
    """
    deadline = time.monotonic() + budget
    try:
        for match in compiled.finditer(text, timeout=budget):
            if time.monotonic() > deadline:
                raise TimeoutError
            yield match
    except TimeoutError:
        raise _timeout(compiled.pattern, budget) from None


def subn(
    compiled: regex.Pattern[str],
    replacement: str,
    text: str,
    budget: float = DEFAULT_BUDGET_S,
    max_output: int = MAX_OUTPUT,
) -> tuple[str, int]:
    """``text`` with every match replaced (``\\1``, ``\\g<name>`` expand), and the count.

    Raises:
        PatternError: The replacement template is invalid, or the result would pass
            ``max_output`` characters.
        PatternTimeout: Replacing ran longer than ``budget`` seconds.
    """
    import regex

    deadline = time.monotonic() + budget
    produced = [len(text)]

    def expand(match: regex.Match[str]) -> str:
        if time.monotonic() > deadline:
            raise TimeoutError
        piece = match.expand(replacement)
        produced[0] += len(piece) - (match.end() - match.start())
        if produced[0] > max_output:
            raise PatternError(
                f"the replaced text would pass {max_output:,} characters; "
                "narrow the pattern or shorten the replacement"
            )
        return piece

    try:
        return compiled.subn(expand, text, timeout=budget)
    except TimeoutError:
        raise _timeout(compiled.pattern, budget) from None
    except (regex.error, IndexError) as e:
        raise PatternError(f"invalid replacement {replacement[:60]!r}: {e}") from None


def check_pattern(pattern: str, value: str, budget: float = DEFAULT_BUDGET_S) -> bool:
    """Whether ``value`` matches ``pattern`` anywhere (JSON Schema ``pattern`` semantics).

    Raises:
        PatternError: The pattern is refused or invalid.
        PatternTimeout: The check ran longer than ``budget`` seconds.
    """
    return search(compile(pattern), value, budget) is not None


def _timeout(pattern: str, budget: float) -> PatternTimeout:
    return PatternTimeout(
        f"regular expression {_short(pattern)} ran longer than {max(budget, 0):g} s "
        "(catastrophic backtracking?); simplify it"
    )


def _short(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")


# Counting repetition ---------------------------------------------------------------------


def _cost(pattern: str, flags: int) -> int:
    """The pattern's size with counted repetitions unrolled, read from the ``regex`` engine's
    own parse (cheap: nothing is compiled), or a cautious estimate where that is unavailable."""
    try:
        tree = _parse(pattern, flags)
    except RecursionError:
        raise PatternError(f"regular expression {_short(pattern)} is nested too deeply") from None
    except Exception as e:
        import regex

        if isinstance(e, regex.error):  # compile reports it, with the engine's message
            return 0
        return _estimate(pattern)
    if tree is None:
        return _estimate(pattern)
    return _tree_cost(tree, 0)


def _parse(pattern: str, flags: int) -> Any:
    """The parse tree ``regex.compile`` would build (its first step), or None."""
    core = _core()

    parse: Callable[..., Any] | None = getattr(core, "_parse_pattern", None)
    if parse is None or not hasattr(core, "GreedyRepeat"):
        return None
    global_flags = flags
    for _ in range(4):  # an inline global flag such as (?x) restarts the parse, as in regex
        source = core.Source(pattern)
        info = core.Info(global_flags, source.char_type, {})
        source.ignore_space = bool(info.flags & core.VERBOSE)
        try:
            return parse(source, info)
        except core._UnscopedFlagSet:
            global_flags = info.global_flags
    return None


def _core() -> Any:
    """The ``regex`` engine's parser module (private: used defensively, with a fallback)."""
    import importlib

    return importlib.import_module("regex._regex_core")


def _tree_cost(node: Any, depth: int) -> int:
    core = _core()

    if depth > 200:
        raise PatternError("regular expression nested too deeply")
    inner = 0
    for value in vars(node).values():
        children = value if isinstance(value, (list, tuple)) else (value,)
        for child in children:
            if isinstance(child, core.RegexBase):
                inner += _tree_cost(child, depth + 1)
                if inner > MAX_COST:
                    return inner
    inner = max(inner, 1)
    if isinstance(node, core.GreedyRepeat):  # LazyRepeat and PossessiveRepeat too
        count = node.max_count if node.max_count is not None else node.min_count
        inner *= max(int(count or 0), 1)
    return inner


def _estimate(pattern: str) -> int:
    """Cautious: every counted repetition multiplies every other, nested or not."""
    import re

    cost = 1
    for low, high in re.findall(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}", pattern):
        count = int(high or low or 0)
        cost *= max(count, 1)
        if cost > MAX_COST:
            break
    return cost
