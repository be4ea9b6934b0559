from collections.abc import Iterable, Sequence
from typing import Any

class Index:
    bounded: bool
    nbytes: int
    postings: int
    def __init__(
        self,
        tools: dict[int, bytes],
        typecode: str,
        idf: Any,
        scale: float,
        k1: float,
        b: float,
        avgdl: float,
    ) -> None: ...
    def top(
        self, term_ids: Sequence[int], n: int, mask: bytes | None = None
    ) -> list[tuple[float, int]]: ...
    def best(
        self,
        term_ids: Sequence[int],
        k: int,
        depth: int,
        most: int,
        slack: float,
        spare_above: int = -1,
        mask: bytes | None = None,
    ) -> tuple[list[tuple[int, float]], int, int]: ...
    def held(
        self, term_ids: Sequence[int], rows: Sequence[int], labels: Sequence[str]
    ) -> list[set[str] | None]: ...
    def mask(self, rows: Iterable[int]) -> bytes: ...

class TermCounts:
    term_ids: dict[str, int]
    def __init__(self) -> None: ...
    def add(self, texts: Sequence[str], times: Sequence[int]) -> tuple[bytes, int, int]: ...
    def doc_freq(self) -> bytes: ...
