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
    def mask(self, rows: Iterable[int]) -> bytes: ...
