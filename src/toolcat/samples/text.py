"""Search, compare, measure and reshape plain text."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from toolcat import tool
from toolcat.definitions import patterns

if TYPE_CHECKING:
    import regex

__toolcat__ = {"toolkit": "text", "version": "1.0.0", "tags": ["text"]}

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


TIME_BUDGET_S = 2.0
"""Seconds (CPU) a regex_search or regex_replace call may spend matching."""


def _compile(pattern: str, ignore_case: bool) -> regex.Pattern[str]:
    """``pattern`` on the ``regex`` engine, refused if it is too long or repeats too much."""
    import regex

    flags = regex.MULTILINE | (regex.IGNORECASE if ignore_case else 0)
    return patterns.compile(pattern, flags, max_length=1000)


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["find all email addresses in this text", "grep for a pattern"],
)
def regex_search(
    text: str, pattern: str, ignore_case: bool = False, max_matches: int = 100
) -> list[dict[str, Any]]:
    """Find every match of a regular expression in a text, with line numbers and captured groups.

    Args:
        text: Text to search.
        pattern: Python regular expression.
        ignore_case: Match regardless of case.
        max_matches: Stop after this many matches.
    """
    compiled = _compile(pattern, ignore_case)
    matches = []
    for match in patterns.finditer(compiled, text, TIME_BUDGET_S):
        matches.append(
            {
                "match": match.group(0),
                "line": text.count("\n", 0, match.start()) + 1,
                "start": match.start(),
                "groups": list(match.groups()),
                "named": match.groupdict(),
            }
        )
        if len(matches) >= max_matches:
            break
    return matches


@tool(tags=["read-only"], idempotent=True, examples=["substitute every date with a placeholder"])
def regex_replace(
    text: str, pattern: str, replacement: str, ignore_case: bool = False
) -> dict[str, Any]:
    """Replace every match of a regular expression in a text; the replacement may use groups like \\1.

    Args:
        text: Text to change.
        pattern: Python regular expression.
        replacement: Replacement text; \\1 or \\g<name> insert groups.
        ignore_case: Match regardless of case.
    """
    compiled = _compile(pattern, ignore_case)
    result, count = patterns.subn(compiled, replacement, text, TIME_BUDGET_S)
    return {"text": result, "replacements": count}


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["what changed between these two versions", "compare two documents"],
)
def text_diff(before: str, after: str, context: int = 3) -> dict[str, Any]:
    """Compare two texts line by line and return a unified diff with counts of added and removed lines.

    Args:
        before: Original text.
        after: Changed text.
        context: Unchanged lines shown around each change.
    """
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), "before", "after", n=context, lineterm=""
        )
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return {"diff": "\n".join(lines), "added": added, "removed": removed}


@tool(tags=["read-only"], idempotent=True, examples=["how many words is this essay", "word count"])
def word_stats(text: str, top: int = 10) -> dict[str, Any]:
    """Count characters, words, sentences and lines in a text, its most frequent words and an estimated reading time.

    Args:
        text: Text to measure.
        top: How many frequent words to list.
    """
    words = _WORD.findall(text)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
    counts = Counter(w.lower() for w in words)
    return {
        "characters": len(text),
        "words": len(words),
        "sentences": len(sentences),
        "lines": len(text.splitlines()),
        "reading_minutes": round(len(words) / 230, 1),
        "top_words": counts.most_common(top),
    }


@tool(tags=["read-only"], idempotent=True, examples=["turn this variable name into snake case"])
def change_case(
    text: str, style: Literal["snake", "camel", "pascal", "kebab", "upper", "lower", "title"]
) -> str:
    """Convert text between snake_case, camelCase, PascalCase, kebab-case, UPPER, lower and Title Case.

    Args:
        text: Text or identifier to convert.
        style: Target style.
    """
    if style in ("upper", "lower", "title"):
        return {"upper": text.upper(), "lower": text.lower(), "title": text.title()}[style]
    words = [w.lower() for w in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", text)]
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    capitalised = [w.capitalize() for w in words]
    if style == "pascal":
        return "".join(capitalised)
    return "".join(words[:1] + capitalised[1:])


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["url-friendly version of a blog post title"],
)
def slugify(text: str, max_length: int = 80) -> str:
    """Make a URL slug from a title - lowercase ASCII words joined by hyphens.

    Args:
        text: Title to turn into a slug.
        max_length: Longest slug to return.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return slug[:max_length].rstrip("-")


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["list the links in this message"],
)
def extract_urls(text: str) -> dict[str, list[str]]:
    """Pull every http(s) URL and email address out of a text, de-duplicated in order of appearance.

    Args:
        text: Text to scan.
    """
    urls = re.findall(r"https?://[^\s<>\"')\]]+", text)
    emails = re.findall(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", text)
    return {
        "urls": list(dict.fromkeys(u.rstrip(".,;:!?") for u in urls)),
        "emails": list(dict.fromkeys(emails)),
    }
