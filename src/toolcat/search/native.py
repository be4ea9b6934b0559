"""BM25's first stage in C: upper bounds from quantized impacts (``_impacts.c``).

``TantivyIndex.rank`` (lexical_index.py) rescores candidates exactly, best bound first, until
the k-th exact score beats the next bound: tantivy's scores are such bounds, built to be. At
a million tools tantivy's block-max WAND over a long query's terms costs ~4 ms (its
pruning skips little when a dozen terms' bounds add up past the 10th score almost
everywhere: docs/benchmarks.md, "Warm BM25 at 1M"). This first stage visits every posting
of the query's terms instead, a block of tools at a time in the core's cache, adding 16-bit
impacts: each (term, tool) contribution to ``bm25()`` rounded up to a multiple of its
term's IDF / 65534, so a tool's sum of them is a bound of its exact score. Same certificate,
same exact scores, same ranking; about a quarter of tantivy's time at 1M. (One quantum for
every term, the largest IDF's, rounded a common term's contributions all up to one quantum:
every tool tied, and a query of such terms rescored every tool holding them, 2.7 s at 100k.)

``Index.best`` does the whole ranking in C: the bounds, then each candidate scored exactly
from its packed tool as ``_score`` scores it (the same double, bit for bit), round after
round until certified (0.35 us a tool at 100k, 1.5 at 1M where each packed tool is a cache
miss, against ~8 us in Python). In large catalogs it may leave a long query's common terms
out of the bounds (``spare_above``): candidates from the rarer terms only, scored with
every term, and certified against the spared terms' largest impacts; an answer that is not
is asked again with every term (lexical_index.py, ``SPARE_FROM``), so answers stay exact.
``Index.held`` reads which query terms each hit holds (fusion's signals) the same way.

The index is built from the revision's packed tools (``TantivyIndex._tools``: the rows as
they are now, brought-forward ones included) on a thread of its own, the first time a
revision has been asked ``BUILD_AFTER`` queries (a one-shot search never pays for it),
with the GIL let go for all but gathering the blobs (~1 s of C at 1M tools; 4 bytes a
posting, a 16-bit gap and a 16-bit impact: 150 MB there; the packed tools are shared with
the index, not copied). Until it is ready, and where the extension was not compiled (a
machine without a C compiler: ``setup.py`` builds it optionally), tantivy answers.

The same extension counts the rows' terms when an index is built (``term_counts``:
``TantivyIndex.build``'s first pass, the Python's bytes in a fifth of the time).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

# A revision's index is built once it has been asked this many queries (unfiltered, or
# filtered where the stage costs less than scoring the filter's tools: ``TantivyIndex.scans``).
BUILD_AFTER = 3
ENABLED = True  # tests and benchmarks switch it off (built or not) to measure tantivy alone


_UNKNOWN = object()
_compiled: Any = _UNKNOWN  # the module, None where it was not built, or not looked for yet


def module() -> Any | None:
    """The compiled ``_impacts`` module, or None where it was not built: looked for once (a
    failed import searches the path again each time, ~60 us, and without the extension
    every unfiltered query past a revision's 3rd asked)."""
    global _compiled
    if _compiled is _UNKNOWN:
        try:
            from . import _impacts
        except ImportError:
            _compiled = None
        else:
            _compiled = _impacts
    return _compiled


def available() -> bool:
    return ENABLED and module() is not None


COUNT_TERMS = True  # tests switch it off to compare the Python first pass


def term_counts() -> Any | None:
    """A new ``_impacts.TermCounts`` (a saved index's first pass in C), or None where the
    extension was not built."""
    compiled = module()
    return compiled.TermCounts() if COUNT_TERMS and compiled is not None else None


class Impacts:
    """One revision's native first stage, built once on a thread of its own when asked."""

    def __init__(self) -> None:
        self._asked = 0
        self._started = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.index: Any | None = None  # the built ``_impacts.Index``, when bounded
        self.error = ""

    # ``source``, below: a callable giving ``_impacts.Index``'s arguments (packed tools,
    # their counts' typecode, the IDFs, scale, K1, B, avgdl), called when the build starts
    # (the revision's index is complete by then). Passed at each call, not kept: a bound
    # method of the index kept here would make a cycle, and a revision's index (and its
    # hundreds of MB at 1M tools) would wait for the cyclic collector to be freed.

    def ready(self, source: Callable[[], tuple[Any, ...]]) -> Any | None:
        """The index if built; counts the ask and starts the build at ``BUILD_AFTER``."""
        if not ENABLED:
            return None
        index = self.index
        if index is not None or self._started:
            return index
        self._asked += 1  # a lost update under threads only delays the build by a query
        if self._asked >= BUILD_AFTER and available():
            self.start(source)
        return None

    def start(self, source: Callable[[], tuple[Any, ...]]) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(
            target=self._build, args=(source,), name="toolcat-bm25-impacts", daemon=True
        ).start()

    def wait(self, source: Callable[[], tuple[Any, ...]], timeout: float | None = None) -> Any:
        """Build now if not started, and wait for it (tests, benchmarks, warm-ups)."""
        if not available():
            return None
        self.start(source)
        self._done.wait(timeout)
        return self.index

    def _build(self, source: Callable[[], tuple[Any, ...]]) -> None:
        compiled = module()
        try:
            if compiled is None:
                return
            index = compiled.Index(*source())
            if index.bounded:
                self.index = index
            else:  # a forged save's counts or IDFs: tantivy answers
                self.error = "a contribution is not a finite number under its term's IDF"
        except (MemoryError, ValueError, TypeError, OverflowError, RuntimeError) as e:
            self.error = str(e)
            logger.warning("BM25's native first stage was not built: %s", e)
        finally:
            self._done.set()
