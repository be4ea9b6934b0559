from collections.abc import Callable

def words(text: str) -> list[str] | None: ...
def terms(
    text: str,
    stems: dict[str, str],
    stop_words: frozenset[str],
    max_length: int,
    stem: Callable[[str], str],
) -> list[str] | None: ...
