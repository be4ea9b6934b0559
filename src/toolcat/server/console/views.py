"""What each console page shows, read from one catalog inside one viewer's scope.

Every function runs on a reader catalog (a worker thread) and returns plain data for a
template. A tool or toolkit outside the scope does not exist here: it is neither listed nor
found by address nor named in an error (``NotFound`` carries no detail).
"""

from __future__ import annotations

import difflib
import json
import shlex
from typing import Any

from ...catalog import Catalog
from ...definitions.names import TOOL_NAME_RE, TOOLKIT_NAME_RE
from ...errors import ToolcatError
from ...models import RegisteredTool, ToolkitVersion
from ...policy.tags import TagFilter
from ...search.modes import SEARCH_MODES
from ...text.tokenize import split_words, tokenize, tokenize_all
from ..scope import Scope

PAGE_SIZE = 50  # tools per browse page
MAX_PAGE_SIZE = 200
MAX_SCAN = 5_000  # rows read to fill one page when the scope must be checked tool by tool
MAX_K = 50  # playground hits
MAX_QUERY = 1_000  # playground query characters
MAX_DIFF_CHARS = 200_000  # each side of a version diff
MAX_DIFF_LINES = 2_000
MAX_USES = 2_000  # usage rows read per page
MAX_TAGS = 20  # tags per filter list
MAX_VERSIONS = 200  # versions of one toolkit shown
TOOLKITS_PAGE = 50  # toolkits per page


class NotFound(Exception):
    """No such page for this viewer (out of scope, unknown, malformed): a bare 404."""


class BadRequest(Exception):
    """A filter or form value that cannot be used: a 400 with this one-line message."""


def check_name(value: str, pattern: Any = TOOL_NAME_RE) -> str:
    """A tool or toolkit name taken from a URL: the catalog's own name rule or 404, so
    ``..``, ``%2e``, slashes, NUL, confusables and overlong names never reach a query."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise NotFound
    return value


def _tags(values: list[str], field: str) -> tuple[str, ...]:
    tags = tuple(v.strip() for v in values if v.strip())
    if len(tags) > MAX_TAGS or any(len(t) > 100 for t in tags):
        raise BadRequest(f"{field}: at most {MAX_TAGS} tags of at most 100 characters")
    return tags


def tag_filter(tags: list[str], any_tags: list[str], not_tags: list[str]) -> TagFilter:
    try:
        return TagFilter.of(
            _tags(tags, "tag"), _tags(any_tags, "any_tag"), _tags(not_tags, "not_tag")
        )
    except ToolcatError as e:
        raise BadRequest(str(e)) from None


def toolkit_in_scope(scope: Scope, name: str) -> bool:
    """Whether every level of ``scope`` that names toolkits names this one."""
    level: Scope | None = scope
    while level is not None:
        if level.toolkits and not any(t.split("@", 1)[0] == name for t in level.toolkits):
            return False
        level = level.parent
    return True


def pinned(scope: Scope, name: str) -> set[str]:
    """The versions of toolkit ``name`` the scope pins (``name@version``)."""
    found = set()
    level: Scope | None = scope
    while level is not None:
        found |= {t.partition("@")[2] for t in level.toolkits if t.startswith(name + "@")}
        level = level.parent
    return found


def browse(
    catalog: Catalog,
    scope: Scope,
    *,
    toolkit: str | None,
    tags: TagFilter,
    deferred: str,
    cursor: str | None,
    size: int,
) -> dict[str, Any]:
    """One page of tools (keyset pagination on the catalog's own list cursor)."""
    if toolkit is not None:
        check_toolkit(catalog, scope, toolkit)
    wanted_toolkit = toolkit or scope.single_toolkit
    tools: list[RegisteredTool] = []
    scanned = 0
    next_cursor = cursor
    try:
        while True:
            page = catalog.list(
                tags=scope.tag_filter & tags,
                toolkit=wanted_toolkit,
                include_deferred=deferred != "no",
                limit=min(size + 1 - len(tools), 1000) if scope.exact_in_search else 1000,
                cursor=next_cursor,
            )
            scanned += len(page.tools)
            for tool in page.tools:
                if scope.allows(tool) and not (deferred == "only" and not tool.defer_loading):
                    tools.append(tool)
            if len(tools) > size:
                last = tools[size - 1]
                from ...definitions.addresses import encode_cursor

                tools, next_cursor = tools[:size], encode_cursor(last.toolkit, last.name)
                break
            next_cursor = page.next_cursor
            if next_cursor is None or scanned >= MAX_SCAN:
                break
    except ToolcatError as e:
        raise BadRequest(str(e)) from None
    return {"tools": tools, "next_cursor": next_cursor, "revision": catalog.revision}


def check_toolkit(catalog: Catalog, scope: Scope, name: str) -> None:
    """A toolkit filter or page: a plain name, in scope, registered; else 404 (the
    catalog's own error would suggest names from outside the scope)."""
    check_name(name, TOOLKIT_NAME_RE)
    if not toolkit_in_scope(scope, name):
        raise NotFound
    try:
        catalog.versions(name)
    except ToolcatError:
        raise NotFound from None


def toolkits(catalog: Catalog, scope: Scope, after: str | None = None) -> dict[str, Any]:
    """One page of the toolkits in scope named after ``after`` (keyset on the name), each
    with its versions (active, deprecated, pinned) and tags; a version none of whose tools
    the scope shows is left out, and a toolkit with none. ``next`` is the ``after`` of the
    next page, None on the last."""
    if after is not None and not TOOLKIT_NAME_RE.fullmatch(after):
        raise BadRequest("after must be a toolkit name")
    shown: list[dict[str, Any]] = []
    scanned = 0
    last = after
    while scanned < MAX_SCAN:
        batch = catalog.toolkits(after=last, limit=TOOLKITS_PAGE + 1)
        for active in batch:
            if len(shown) == TOOLKITS_PAGE:
                return {"toolkits": shown, "next": last}  # ``active`` is on the next page
            scanned += 1
            last = active.toolkit
            kit = _toolkit(catalog, scope, active)
            if kit is not None:
                shown.append(kit)
        if len(batch) <= TOOLKITS_PAGE:
            return {"toolkits": shown, "next": None}
    return {"toolkits": shown, "next": last}  # a narrow scope: the next page reads on


def _toolkit(catalog: Catalog, scope: Scope, active: ToolkitVersion) -> dict[str, Any] | None:
    """``active``'s toolkit as the page shows it; None when the scope shows none of it."""
    if not toolkit_in_scope(scope, active.toolkit):
        return None
    versions = catalog.versions(active.toolkit)[-MAX_VERSIONS:]
    visible = [v for v in versions if _version_visible(catalog, scope, v.toolkit, v.version)]
    if not visible:
        return None
    pins = pinned(scope, active.toolkit)
    return {
        "name": active.toolkit,
        "active": active,
        "versions": [{"v": v, "pinned": v.version in pins} for v in visible],
    }


def _version_visible(catalog: Catalog, scope: Scope, toolkit: str, version: str) -> bool:
    if not scope.selects and (scope.parent is None or not scope.parent.selects):
        return True
    page = catalog.list(
        toolkit=f"{toolkit}@{version}", tags=scope.tag_filter, include_deferred=True, limit=1000
    )
    return any(scope.allows(t) for t in page.tools)


def tool(catalog: Catalog, scope: Scope, toolkit: str, name: str, version: str | None) -> Any:
    """A tool page: the definition, its parameters as rows, and its version history."""
    check_name(toolkit, TOOLKIT_NAME_RE)
    check_name(name)
    found = _get(catalog, scope, toolkit, name, version)
    history = []
    for v in catalog.versions(toolkit)[-MAX_VERSIONS:]:
        try:
            history.append((v, _get(catalog, scope, toolkit, name, v.version)))
        except NotFound:
            continue
    return {"tool": found, "params": parameters(found.parameters), "history": history}


def _get(
    catalog: Catalog, scope: Scope, toolkit: str, name: str, version: str | None
) -> RegisteredTool:
    if version is not None and (len(version) > 100 or not version.strip()):
        raise NotFound
    address = f"{toolkit}.{name}" + (f"@{version}" if version else "")
    try:
        return catalog.get(address, within=scope)
    except ToolcatError:
        if version is None:  # every version deprecated: show the newest visible one
            for v in reversed(catalog.versions(toolkit)):
                try:
                    return catalog.get(f"{address}@{v.version}", within=scope)
                except ToolcatError:
                    continue
        raise NotFound from None


def parameters(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """A parameter table: name, type, required, description (top-level properties)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    required = schema.get("required") if isinstance(schema, dict) else None
    required = set(required) if isinstance(required, list) else set()
    rows = []
    for key, spec in (props or {}).items() if isinstance(props, dict) else ():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "enum" if "enum" in spec else "any")
        rows.append(
            {
                "name": str(key),
                "type": " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind),
                "required": key in required,
                "description": str(spec.get("description", "")),
            }
        )
    return rows


def definition_text(tool: RegisteredTool) -> str:
    return json.dumps(tool.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False)


def diff(
    catalog: Catalog, scope: Scope, toolkit: str, name: str, old: str, new: str
) -> dict[str, Any]:
    """A unified diff of two versions' pretty JSON definitions, capped."""
    check_name(toolkit, TOOLKIT_NAME_RE)
    check_name(name)
    a = _get(catalog, scope, toolkit, name, old)
    b = _get(catalog, scope, toolkit, name, new)
    left, right = definition_text(a)[:MAX_DIFF_CHARS], definition_text(b)[:MAX_DIFF_CHARS]
    lines = list(
        difflib.unified_diff(
            left.splitlines(),
            right.splitlines(),
            f"{a.id}@{a.version}",
            f"{b.id}@{b.version}",
            lineterm="",
            n=3,
        )
    )
    cut = len(lines) > MAX_DIFF_LINES
    return {"a": a, "b": b, "lines": lines[:MAX_DIFF_LINES], "cut": cut}


def search(catalog: Catalog, scope: Scope, query: str, mode: str | None, k: int) -> dict[str, Any]:
    """The playground: hits in scope with rank, score, match, and why (their BM25 and
    embedding ranks and scores, from the same search in those modes, and the query's
    terms found in the tool's name, description and tags)."""
    if mode is not None and mode not in SEARCH_MODES:
        raise BadRequest(f"mode must be one of {', '.join(SEARCH_MODES)}")
    if not 1 <= k <= MAX_K:
        raise BadRequest(f"k must be from 1 to {MAX_K}")
    if len(query) > MAX_QUERY:
        raise BadRequest(f"the query is longer than {MAX_QUERY} characters")

    def ranked(m: str | None) -> Any:
        found = catalog.search(
            query,
            mode=m,
            k=k if scope.exact_in_search else min(k * 4 + 20, 1000),
            tags=scope.tag_filter,
            toolkit=scope.single_toolkit,
            policies=scope.search_policies,
        )
        return found, [h for h in found.hits if scope.allows(h.tool)][:k]

    try:
        found, hits = ranked(mode)
        parts = {}
        if found.mode in ("hybrid", "embedding", "bm25"):
            for part in ("bm25", "embedding"):
                if part == found.mode:
                    parts[part] = {h.tool.id: (i, h.score) for i, h in enumerate(hits, 1)}
                    continue
                try:
                    other, other_hits = ranked(part)
                except ToolcatError:
                    continue
                if other.mode == part:  # not a fallback to BM25
                    parts[part] = {h.tool.id: (i, h.score) for i, h in enumerate(other_hits, 1)}
    except ToolcatError as e:
        raise BadRequest(str(e)) from None
    words = split_words(query) if found.mode != "regex" else []
    rows = []
    for hit in hits:
        own = set(tokenize_all([hit.tool.name, hit.tool.description, *hit.tool.tags]))
        rows.append(
            {
                "hit": hit,
                "bm25": parts.get("bm25", {}).get(hit.tool.id),
                "embedding": parts.get("embedding", {}).get(hit.tool.id),
                "terms": sorted({w.lower() for w in words if set(tokenize(w)) & own}),
            }
        )
    no_match = all(h.match == "none" for h in hits)
    cli = ["toolcat", "search", query, "--mode", found.mode, "-k", str(k)]
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": query, "k": k}},
    }
    return {
        "mode": found.mode,
        "rows": rows,
        "no_match": no_match,
        "warnings": found.warnings,
        "cli": shlex.join(cli),
        "mcp": json.dumps(call, indent=2, ensure_ascii=False),
    }


def usage(
    catalog: Catalog,
    scope: Scope,
    viewer: str | None,
    gaps: list[tuple[float, str, str, str]],
) -> dict[str, Any]:
    """Recorded uses (searches that led to a call) of tools in scope, per tool and per
    principal, and the searches that found nothing. ``viewer`` None (an admin) sees every
    principal's; anyone else only their own."""
    visible: dict[str, bool] = {}

    def shown(tool_id: str) -> bool:
        if tool_id not in visible:
            try:
                catalog.get(tool_id, within=scope)
                visible[tool_id] = True
            except ToolcatError:
                visible[tool_id] = False
        return visible[tool_id]

    uses = [
        u
        for u in catalog.usage(limit=MAX_USES)
        if (viewer is None or u["principal"] == viewer) and shown(u["tool"])
    ]
    per_tool: dict[str, int] = {}
    per_principal: dict[str, int] = {}
    for u in uses:
        per_tool[u["tool"]] = per_tool.get(u["tool"], 0) + 1
        who = u["principal"] or "(catalog)"
        per_principal[who] = per_principal.get(who, 0) + 1
    mine = [g for g in gaps if viewer is None or g[1] == viewer]
    return {
        "uses": uses[:200],
        "per_tool": sorted(per_tool.items(), key=lambda kv: (-kv[1], kv[0])),
        "per_principal": sorted(per_principal.items(), key=lambda kv: (-kv[1], kv[0])),
        "gaps": mine[:200],
        "learning": catalog.learning,
    }
