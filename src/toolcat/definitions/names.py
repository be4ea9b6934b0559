"""Naming rules: toolcat's own (tool and toolkit names), and names fitted to someone else's
rules (a provider's tool names, benchmark tool names).

Standard library only, so the modules that check names (``models``, ``addresses``) share one
rule without the list path importing pydantic.
"""

from __future__ import annotations

import re

TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOLKIT_NAME_RE = re.compile(r"[a-z0-9_-]{1,64}")
HASH_CHARS = 8


def fitted_name(
    raw: str,
    taken: set[str],
    *,
    invalid: str = r"[^A-Za-z0-9_-]+",
    max_length: int = 64,
    must_start: str = "",
) -> str:
    """``raw`` rewritten to fit a naming rule, unique within ``taken`` (and added to it).

    Characters matching ``invalid`` become ``_``. A name that is too long, or already taken,
    keeps a prefix and gets a hash of ``raw`` as suffix, so the same ``raw`` always maps to
    the same name in the same set. ``must_start`` is a character class the first character
    must match (``_`` is prefixed otherwise).

    Args:
        raw: The name to fit.
        taken: Names already used; the result is added.
        invalid: A regex of the characters the rule does not allow.
        max_length: The longest name the rule allows.
        must_start: A regex character class for the first character, e.g. ``[A-Za-z_]``.
    """
    name = re.sub(invalid, "_", raw).strip("_") or "tool"
    if must_start and not re.match(must_start, name):  # the first character only
        name = f"_{name}"
    if len(name) > max_length or name in taken:
        import hashlib  # only for a name that does not fit as it is

        suffix = hashlib.sha1(raw.encode()).hexdigest()[:HASH_CHARS]
        name = f"{name[: max_length - HASH_CHARS - 1]}_{suffix}"
        counter = 1
        while name in taken:  # two raws with one hash prefix: vanishingly rare, still handled
            name = f"{name[: max_length - HASH_CHARS - 4]}_{suffix}{counter:03d}"[:max_length]
            counter += 1
    taken.add(name)
    return name
