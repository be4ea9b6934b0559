"""Toolkits read from OpenAPI 3.0/3.1 documents: one tool per operation, forwarding over HTTP.

Each operation becomes a tool:

- name: its ``operationId`` fitted to the catalog's rule (``[A-Za-z0-9_-]{1,64}``); two ids that
  fit to one name keep both, the later with a hash suffix (deterministic, never dropped);
- description: ``summary`` and ``description``; search hint: ``METHOD /path``;
- parameters: the path, query, header and cookie parameters (the path item's and the
  operation's) and the JSON (or form) body merged into one object schema. A body that is an
  object contributes its properties (renamed ``body_NAME`` where a parameter has the name);
  any other body is one ``body`` argument. ``$ref``s are inlined; a reference back into a
  schema being expanded is cut (``{"description": "(recursive: NAME)"}``);
- where each argument goes is the implementation's plan (``toolcat.remote.openapi``);
- tags: the operation's tags; annotations: GET/HEAD read-only, DELETE destructive,
  GET/HEAD/PUT/DELETE idempotent.

Only local references (``#/...``) are followed; security schemes are not read: give the
credentials as ``headers`` (with ``${NAME}`` references). A header (or cookie) parameter that
would set a header the HTTP layer or the admin owns (``Host``, ``Authorization``, a
``headers`` name: ``toolcat.remote.openapi.owned_header``) is left out of the tool, with a
warning logged that names the operation and the parameter.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from ..definitions.names import fitted_name
from ..definitions.printable import escape
from ..errors import ImportFailedError, ManifestError
from ..models import MAX_TOOLS_PER_TOOLKIT, Toolkit
from ..remote.credentials import header_value_problem, references
from ..remote.openapi import (
    DEFAULT_TIMEOUT,
    MAX_REDIRECTS,
    Operation,
    has_dot_segment,
    origin,
    owned_header,
)
from .manifest import imported_toolkit

log = logging.getLogger(__name__)

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ARGUMENT_INVALID = r"[^A-Za-z0-9_.-]+"  # Anthropic's rule for property names, the strictest
MAX_DEPTH = 24
MAX_EXPANDED_NODES = 200_000  # the TMDB and Spotify documents expand to 380 and 486
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024  # GitHub's REST description, among the largest, is ~12 MB
DROPPED_KEYS = {"xml", "externalDocs", "discriminator", "example", "$schema", "$id"}
BOOLEAN_KEYS = {"additionalProperties", "uniqueItems", "readOnly", "writeOnly", "deprecated"}
NUMERIC_KEYS = {
    "maximum",
    "minimum",
    "multipleOf",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
}


def _number(value: Any) -> Any:
    """``value`` as a number when it is numeric text (published documents write ``"50"``),
    else ``None``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return int(number) if number.is_integer() else number
    return None


def _true(value: Any) -> bool:
    """A boolean field, also when written as text (``"required": "false"``)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def load_document(
    source: str | Path | Mapping[str, Any], *, timeout: float = 30.0
) -> tuple[dict[str, Any], str, str | None]:
    """The OpenAPI document at ``source`` (a file, an http(s) URL, or the parsed document), a
    label naming it for errors, and the URL it was served from (``None`` unless fetched).

    Raises:
        ImportFailedError: The file cannot be read or the URL fetched.
        ManifestError: The text is neither JSON nor YAML, or not an OpenAPI 3.x document.
    """
    served_from = None
    if isinstance(source, Mapping):
        document, label = dict(source), "(OpenAPI document)"
    else:
        label = str(source)
        if re.match(r"^https?://", label):
            text, served_from = _fetch(label, timeout)
        else:
            text = _read(label)
        document = _parse(text, label)
    version = str(document.get("openapi", ""))
    if not re.match(r"^3\.[01](\.|$)", version):
        found = (
            f"Swagger {document['swagger']}"
            if "swagger" in document
            else f"openapi {version!r}"
            if version
            else "no 'openapi' field"
        )
        raise ManifestError(f"not an OpenAPI 3.0/3.1 document ({found})", file=label)
    if not isinstance(document.get("paths"), dict) or not document["paths"]:
        raise ManifestError("the document has no paths", file=label, field="paths")
    return document, label, served_from


def _too_large(label: str) -> ManifestError:
    return ManifestError(
        f"is larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB, the most an OpenAPI "
        "document may be",
        file=label,
    )


def _decoded(raw: bytes, label: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(f"not UTF-8 text: invalid byte at offset {e.start}", file=label) from e


def _read(path: str) -> str:
    """The text of a document file: a regular file of at most ``MAX_DOCUMENT_BYTES``."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ImportFailedError(f"cannot read OpenAPI document {path!r}: not a regular file")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise _too_large(path)
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ImportFailedError(f"cannot read OpenAPI document {path!r}: {e}") from e
    return _decoded(raw, path)


def _fetch(url: str, timeout: float) -> tuple[str, str]:
    """The text at ``url`` (at most ``MAX_DOCUMENT_BYTES``) and the URL it was finally served
    from. Redirects are followed only within ``url``'s origin (scheme, host, port): a
    document server cannot send the fetch on to another host, an internal address included."""
    try:
        import httpx
    except ImportError as e:
        raise ImportFailedError(
            "fetching an OpenAPI document needs httpx: pip install 'toolcat[openapi]'"
        ) from e
    try:
        with httpx.Client(follow_redirects=False, timeout=timeout) as http:
            response = http.send(http.build_request("GET", url), stream=True)
            for _ in range(MAX_REDIRECTS + 1):
                hop = response.next_request if response.has_redirect_location else None
                if hop is None:
                    break
                response.close()
                if origin(str(hop.url)) != origin(url):
                    raise ImportFailedError(
                        f"cannot fetch {url}: it redirects to another origin "
                        f"({hop.url.scheme}://{hop.url.netloc.decode()}), which is not "
                        "followed; fetch that URL directly if you trust it"
                    )
                response = http.send(hop, stream=True)
            else:
                raise ImportFailedError(f"cannot fetch {url}: more than {MAX_REDIRECTS} redirects")
            try:
                if response.status_code != 200:
                    raise ImportFailedError(f"cannot fetch {url}: HTTP {response.status_code}")
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_DOCUMENT_BYTES:
                        raise _too_large(url)
                    chunks.append(chunk)
            finally:
                response.close()
    except httpx.HTTPError as e:
        raise ImportFailedError(f"cannot fetch {url}: {type(e).__name__}: {e}") from e
    return _decoded(b"".join(chunks), url), str(response.url)


def _parse(text: str, label: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        import yaml

        try:
            found = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ManifestError(f"neither JSON nor YAML: {e}", file=label) from None
    if not isinstance(found, dict):
        raise ManifestError("expected a JSON or YAML object at the top", file=label)
    return found


class _TooLarge(ManifestError):
    """The document's ``$ref``s expand past ``MAX_EXPANDED_NODES``: reading stops there."""


def _weight(value: Any, budget: int) -> int:
    """How many JSON nodes ``value`` has, counted up to ``budget`` (then ``budget + 1``)."""
    count, stack = 0, [value]
    while stack and count <= budget:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


class _Resolver:
    """Inlines local ``$ref``s of one document; a reference to a schema that is being
    expanded (a cycle) is cut. What the expansion produces is counted as it grows (schema
    nodes, copied values included) and bounded by ``MAX_EXPANDED_NODES`` for the whole
    document: a few KB whose references fan out (8 wide, 12 deep) would otherwise expand to
    billions of nodes."""

    def __init__(self, document: Mapping[str, Any], label: str, toolkit: str) -> None:
        self.document = document
        self.label = label
        self.toolkit = toolkit
        self.where = ""  # the operation being read, for errors
        self.expanded = 0

    def grow(self, nodes: int) -> None:
        self.expanded += nodes
        if self.expanded > MAX_EXPANDED_NODES:
            raise _TooLarge(
                f"{self.where}: the document's $refs expand to more than "
                f"{MAX_EXPANDED_NODES:,} schema nodes; import fewer operations "
                "(--operation/--include-tag) or simplify the schemas",
                file=self.label,
                toolkit=self.toolkit,
            )

    def target(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise ManifestError(
                f"{self.where}: only local references (#/...) are supported, not {ref!r}",
                file=self.label,
                toolkit=self.toolkit,
            )
        node: Any = self.document
        for part in ref[2:].split("/"):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif (
                isinstance(node, list)
                and part.isascii()
                and part.isdigit()
                and int(part) < len(node)
            ):
                node = node[int(part)]
            else:
                raise ManifestError(
                    f"{self.where}: $ref {ref!r} points to nothing in the document",
                    file=self.label,
                    toolkit=self.toolkit,
                )
        return node

    def deref(self, node: Any) -> Any:
        """``node`` itself if it is no reference, else what it references (followed)."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen or len(seen) >= MAX_DEPTH:
                why = "refers to itself" if ref in seen else f"starts a chain of over {MAX_DEPTH}"
                raise ManifestError(
                    f"{self.where}: $ref {ref!r} {why}", file=self.label, toolkit=self.toolkit
                )
            seen.add(ref)
            node = self.target(ref)
        return node

    def schema(self, node: Any, stack: tuple[str, ...] = (), depth: int = 0) -> Any:
        """A JSON Schema with references inlined and OpenAPI 3.0 spellings made JSON Schema
        (``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum``, ``example``)."""
        self.grow(1)
        if isinstance(node, list):
            return [self.schema(item, stack, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if ref in stack or depth > MAX_DEPTH:
                return {"description": f"(recursive: {name}; any JSON value)"}
            target = self.target(ref)
            siblings = {k: v for k, v in node.items() if k != "$ref"}  # 3.1 allows them
            merged = {**target, **siblings} if isinstance(target, dict) else target
            return self.schema(merged, (*stack, ref), depth + 1)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROPPED_KEYS or key.startswith("x-"):
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {
                    prop: self.schema(sub, stack, depth + 1)
                    for prop, sub in value.items()
                    if not (isinstance(sub, dict) and _true(sub.get("readOnly")))
                }
            elif key in BOOLEAN_KEYS and isinstance(value, str):
                out[key] = _true(value)
            elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
                out[key] = self.schema(value, stack, depth + 1)
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                if value and _number(node.get(bound)) is not None:
                    out[key] = _number(node[bound])
            elif key == "nullable":
                continue
            elif key in NUMERIC_KEYS:
                number = _number(value)
                if number is not None:
                    out[key] = number
            else:
                self.grow(_weight(value, MAX_EXPANDED_NODES))
                out[key] = copy.deepcopy(value)
        if "exclusiveMinimum" in out and node.get("exclusiveMinimum") is True:
            out.pop("minimum", None)
        if "exclusiveMaximum" in out and node.get("exclusiveMaximum") is True:
            out.pop("maximum", None)
        if _true(node.get("nullable")):
            kind = out.get("type")
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
            elif "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        if node.get("type") in ("integer", "number") and isinstance(out.get("default"), str):
            number = _number(out["default"])
            if number is None:
                out.pop("default")
            else:
                out["default"] = number
        if "example" in node and "examples" not in out:
            out["examples"] = [copy.deepcopy(node["example"])]
        return out


def toolkit_from_openapi(
    source: str | Path | Mapping[str, Any],
    toolkit: str,
    version: str,
    *,
    base_url: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_tags: Iterable[str] = (),
    operations: Iterable[str] = (),
    description: str | None = None,
    tags: Iterable[str] = (),
    defer_loading: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
) -> Toolkit:
    """Read an OpenAPI document and build a toolkit with one tool per (selected) operation.

    Args:
        source: A file (JSON or YAML), an http(s) URL, or the parsed document.
        toolkit: The toolkit's name.
        version: The toolkit's version.
        base_url: The API's URL (default: the document's first ``servers`` entry).
        headers: Sent with every call; values may reference ``${ENV_VAR}`` (stored as such).
        include_tags: Only operations carrying one of these tags.
        operations: Only these ``operationId``s.
        description: The toolkit's description (default: the document's title).
        tags: Tags for every tool (``openapi`` is always added).
        defer_loading: Whether the tools are deferred (found by search, not listed).
        timeout: Seconds a call may take (each tool's ``timeout``, and httpx's).

    Raises:
        ImportFailedError: The document cannot be read or fetched.
        ManifestError: The document is not OpenAPI 3.x, a ``$ref`` points to nothing, a
            selected operation has no ``operationId``, a filter selects nothing (names the
            document, toolkit and operation).
    """
    document, label, served_from = load_document(source, timeout=timeout)
    resolver = _Resolver(document, label, toolkit)
    problems: list[ManifestError] = []  # every problem of the document, reported together

    def keep(error: ManifestError) -> None:
        problems.append(error)
        if isinstance(error, _TooLarge):  # nothing more is read of such a document
            raise ManifestError.of(problems)

    base = ""
    try:
        base = _base_url(document, label, base_url, toolkit, served_from)
    except ManifestError as e:
        keep(e)
    headers = dict(headers or {})
    for name, value in headers.items():
        if not name.strip() or re.search(r"[\s:]", name):
            keep(ManifestError(f"header name {name!r} is not valid", file=label, toolkit=toolkit))
        # Secrets are resolved by the process making calls; a value typed in full is checked
        # now, naming the header, never the value.
        reason = None if references(value) else header_value_problem(value)
        if reason:
            keep(
                ManifestError(
                    f"header {name!r} cannot be sent: {reason}", file=label, toolkit=toolkit
                )
            )
    wanted_tags = {t.strip().lower() for t in include_tags if t.strip()}
    wanted_ops = list(dict.fromkeys(o.strip() for o in operations if o.strip()))
    selected: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    seen_ids: list[str] = []
    seen_tags: set[str] = set()
    for path, item in document["paths"].items():
        resolver.where = f"paths.{path}"
        if not str(path).startswith("/") or has_dot_segment(str(path)):
            keep(
                ManifestError(
                    f"path {path!r} must start with '/' and hold no '.' or '..' segment",
                    file=label,
                    toolkit=toolkit,
                    field="paths",
                )
            )
            continue
        try:
            item = resolver.deref(item)
        except ManifestError as e:
            keep(e)
            continue
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            op_id = op.get("operationId")
            op_tags = [str(t) for t in op.get("tags") or []]
            seen_tags.update(t.lower() for t in op_tags)
            if isinstance(op_id, str):
                seen_ids.append(op_id)
            if wanted_tags and not wanted_tags & {t.lower() for t in op_tags}:
                continue
            if wanted_ops and op_id not in wanted_ops:
                continue
            if not isinstance(op_id, str) or not op_id.strip():
                keep(
                    ManifestError(
                        f"operation {method.upper()} {path} has no operationId; give it one, or "
                        "leave it out with include_tags/operations (--include-tag/--operation)",
                        file=label,
                        toolkit=toolkit,
                    )
                )
                continue
            selected.append((path, method, item, op))
    missing_tags = sorted(wanted_tags - seen_tags)
    if missing_tags:
        keep(
            ManifestError(
                f"no operation has the tag(s) {', '.join(missing_tags)}; tags in the document: "
                f"{', '.join(sorted(seen_tags)) or '(none)'}",
                file=label,
                toolkit=toolkit,
            )
        )
    unknown = [o for o in wanted_ops if o not in seen_ids]
    if unknown:
        import difflib

        hints = [
            f"{o!r}" + (f" (did you mean {', '.join(close)}?)" if close else "")
            for o in unknown
            for close in [difflib.get_close_matches(o, seen_ids, n=3, cutoff=0.6)]
        ]
        keep(ManifestError(f"no operation with id {'; '.join(hints)}", file=label, toolkit=toolkit))
    if len(selected) > MAX_TOOLS_PER_TOOLKIT:
        keep(
            _TooLarge(
                f"{len(selected):,} operations selected; a toolkit holds at most "
                f"{MAX_TOOLS_PER_TOOLKIT:,} (pick some with --include-tag/--operation)",
                file=label,
                toolkit=toolkit,
            )
        )
    if not selected and not problems:
        keep(ManifestError("no operation matches the filters", file=label, toolkit=toolkit))
    taken: set[str] = set()
    tools = []
    for path, method, item, op in selected:
        resolver.where = f"operation {op['operationId']!r} ({method.upper()} {path})"
        try:
            tools.append(_tool(resolver, base, path, method, item, op, headers, timeout, taken))
        except ManifestError as e:
            keep(e)
    if problems:
        raise ManifestError.of(problems)
    info: dict[str, Any] = document["info"] if isinstance(document.get("info"), dict) else {}
    title = str(info.get("title") or label)
    default_description = f"{title} {info.get('version', '')}".strip()
    first_line = str(info.get("description") or "").strip().split("\n", 1)[0]
    if first_line:
        default_description = f"{default_description}: {first_line}"
    return imported_toolkit(
        label,
        toolkit=toolkit,
        version=version,
        description=description or default_description[:500],
        tags=["openapi", *tags],
        defer_loading=defer_loading,
        tools=tools,
    )


def _base_url(
    document: Mapping[str, Any],
    label: str,
    base_url: str | None,
    toolkit: str,
    served_from: str | None,
) -> str:
    """The API's URL: ``base_url``, else the first ``servers`` entry (its variables at their
    defaults). As the OpenAPI specification says, no ``servers`` means ``/``, and a relative
    server URL is relative to where the document was served: both need a fetched document."""
    if base_url:
        url = base_url.strip()
    else:
        declared = document.get("servers")
        servers = declared or [{"url": "/"}]
        server = servers[0] if isinstance(servers, list) and isinstance(servers[0], dict) else {}
        url = str(server.get("url") or "")
        for name, variable in (server.get("variables") or {}).items():
            if isinstance(variable, dict) and "default" in variable:
                url = url.replace("{" + name + "}", str(variable["default"]))
        if url and not re.match(r"^https?://", url) and served_from:
            url = urljoin(served_from, url)
    parts = urlsplit(url)
    if not re.fullmatch(r"https?://[^\s#?{}]+", url) or not parts.hostname:
        if not url:
            why = "the first server has no url"
        elif not declared and not base_url:
            why = "the document has no servers (the default '/' is relative to a fetched document)"
        elif not re.match(r"^https?://", url) and not base_url:
            why = f"the server URL {url!r} is relative and the document was not fetched from a URL"
        else:
            why = f"the base URL {url!r} is not an absolute http(s) URL (without query or fragment)"
        raise ManifestError(
            f"{why}; give the API's URL with base_url (--base-url)",
            file=label,
            toolkit=toolkit,
            field="servers",
        )
    return url.rstrip("/")


def _tool(
    resolver: _Resolver,
    base: str,
    path: str,
    method: str,
    item: Mapping[str, Any],
    op: Mapping[str, Any],
    headers: Mapping[str, str],
    timeout: float,
    taken: set[str],
) -> dict[str, Any]:
    op_id = str(op["operationId"])
    name = fitted_name(op_id, taken)
    properties: dict[str, Any] = {}
    required: list[str] = []
    args: dict[str, tuple[str, str]] = {}
    joined: list[str] = []
    arg_names: set[str] = set()

    # The path item's parameters, overridden by the operation's of the same name and place.
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
        param = resolver.deref(raw)
        if not isinstance(param, dict) or not param.get("name") or not param.get("in"):
            raise ManifestError(
                f"{resolver.where}: a parameter without 'name' and 'in'",
                file=resolver.label,
                toolkit=resolver.toolkit,
                tool=name,
            )
        params[(str(param["in"]), str(param["name"]))] = param
    for template in re.findall(r"\{([^{}]+)\}", path):  # path parameters nobody declared
        params.setdefault(("path", template), {"name": template, "in": "path"})
    for (location, raw_name), param in params.items():
        if location not in ("path", "query", "header", "cookie"):
            continue
        owned = owned_header(location, raw_name, headers)
        if owned:  # the OpenAPI specification ignores Accept, Content-Type, Authorization too
            log.warning(
                "%s: %s parameter %r left out: the header %r is set by the HTTP layer or "
                "the admin, never by a caller",
                escape(resolver.where, 300, spaces=True),  # the document's path, as written
                location,
                raw_name,
                owned,
            )
            continue
        arg = fitted_name(raw_name, arg_names, invalid=ARGUMENT_INVALID)
        schema = param.get("schema")
        if schema is None and isinstance(param.get("content"), dict) and param["content"]:
            schema = next(iter(param["content"].values())).get("schema")
        schema = resolver.schema(schema) if isinstance(schema, dict) else {"type": "string"}
        if not isinstance(schema, dict):
            schema = {}
        if param.get("description") and "description" not in schema:
            schema["description"] = str(param["description"])
        if _true(param.get("deprecated")):
            schema["deprecated"] = True
        properties[arg] = schema
        args[arg] = (location, raw_name)
        if location == "path" or _true(param.get("required")):
            required.append(arg)
        style_joins = param.get("explode") is False or (
            location in ("path", "header") and param.get("explode") is not True
        )
        if style_joins and (schema.get("type") == "array"):
            joined.append(arg)

    body_kind = "json"
    request_body = resolver.deref(op.get("requestBody")) if op.get("requestBody") else None
    if isinstance(request_body, dict):
        content = request_body.get("content") or {}
        media = next((m for m in content if "json" in m.lower()), None)
        if media is None and "application/x-www-form-urlencoded" in content:
            media, body_kind = "application/x-www-form-urlencoded", "form"
        if media is None and content:
            raise ManifestError(
                f"{resolver.where}: request bodies of type {', '.join(content)} are not "
                "supported (JSON and form bodies are); leave it out with --operation",
                file=resolver.label,
                toolkit=resolver.toolkit,
                tool=name,
            )
        raw_schema = (content.get(media) or {}).get("schema") if media else None
        body = resolver.schema(raw_schema) if isinstance(raw_schema, dict) else {}
        body_required = _true(request_body.get("required"))
        body_properties = body.get("properties") if isinstance(body, dict) else None
        if isinstance(body_properties, dict) and body_properties and "oneOf" not in body:
            inner_required = set(body.get("required") or [])
            for prop, sub in body_properties.items():
                wanted = prop if prop not in arg_names else f"body_{prop}"
                arg = fitted_name(wanted, arg_names, invalid=ARGUMENT_INVALID)
                properties[arg] = sub
                args[arg] = ("body", prop)
                if body_required and prop in inner_required:
                    required.append(arg)
        elif media:
            arg = fitted_name("body", arg_names, invalid=ARGUMENT_INVALID)
            schema = dict(body) if isinstance(body, dict) else {}
            description = str(request_body.get("description") or "").strip()
            if description and "description" not in schema:
                schema["description"] = description
            properties[arg] = schema or {"description": "The request body (any JSON value)."}
            args[arg] = ("body", "")
            if body_required:
                required.append(arg)

    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    summary = " ".join(str(op.get("summary") or "").split())
    long_text = str(op.get("description") or "").strip()
    text = summary if not long_text or long_text == summary else f"{summary}\n\n{long_text}"
    text = text.strip() or f"{method.upper()} {path}"
    if summary and long_text and not summary.endswith((".", "!", "?", ":")):
        text = text.replace(summary, summary + ".", 1)
    operation = Operation(
        base_url=base,
        method=method.upper(),
        path=path,
        args=args,
        headers=headers,
        timeout=timeout,
        body=body_kind,
        joined=tuple(joined),
    )
    upper = method.upper()
    annotations: dict[str, Any] = {}
    if summary:
        annotations["title"] = summary[:200]
    if upper in ("GET", "HEAD"):
        annotations["read_only"] = True
    elif upper == "DELETE":
        annotations["destructive"] = True
    data: dict[str, Any] = {
        "name": name,
        "description": text,
        "parameters": parameters,
        "implementation": operation.implementation(),
        "search_hint": f"{upper} {path}",
        "timeout": timeout,
        "idempotent": upper in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS"),
        "tags": list(dict.fromkeys(t.strip()[:64] for t in op.get("tags") or [] if t.strip())),
    }
    if annotations:
        data["annotations"] = annotations
    return data
