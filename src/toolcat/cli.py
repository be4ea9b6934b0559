"""The ``toolcat`` command: a thin click face over ``Catalog``.

Each command opens the catalog, calls one method and renders the answer, as text or (with
``--json``) in the documented JSON shapes. ``ToolcatError`` becomes one line on stderr and the
error's exit code, here and nowhere else.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .catalog import DEFAULT_LIST_LIMIT, SEARCH_MODES, Catalog
from .errors import (
    ImportFailedError,
    InvalidArgumentsError,
    ManifestError,
    ToolcatError,
    ToolDeniedError,
    ToolFailedError,
    ToolTimeoutError,
    UnknownToolError,
)
from .formats import FORMATS
from .policy import Policy
from .tagfilter import TagFilter

if TYPE_CHECKING:
    from .models import ToolEvent
    from .store.replica import Follower

F = TypeVar("F", bound=Callable[..., Any])
CALL_EXIT_CODES = {  # a failed ToolResult's error_code -> `toolcat call`'s exit code
    "UNKNOWN_TOOL": UnknownToolError.exit_code,
    "IMPORT_FAILED": ImportFailedError.exit_code,
    "INVALID_ARGUMENTS": InvalidArgumentsError.exit_code,
    "TOOL_DENIED": ToolDeniedError.exit_code,
    "TIMEOUT": ToolTimeoutError.exit_code,
    "TOOL_ERROR": ToolFailedError.exit_code,
}


class ToolcatGroup(click.Group):
    """Turns ``ToolcatError`` into one line on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ToolcatError as e:
            if ctx.meta.get("toolcat.debug"):
                raise
            if ctx.meta.get("toolcat.json"):  # a program reads stdout: the error is JSON there
                error: dict[str, Any] = {"code": e.code, "message": str(e)}
                if isinstance(e, ManifestError):
                    error["problems"] = e.to_dict()
                emit_json({"error": error})
            lines = e.lines() if isinstance(e, ManifestError) else [str(e)]
            for line in lines:
                click.echo(f"error: {line}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # a bug: still one line, and the way to see more
            if ctx.meta.get("toolcat.debug"):
                raise
            text = " ".join(str(e).split())[:300]
            click.echo(
                f"error: unexpected {type(e).__name__}: {text} (a bug in toolcat; "
                "--debug shows the traceback)",
                err=True,
            )
            ctx.exit(ToolcatError.exit_code)


def json_option(fn: F) -> F:
    """``--json``: print JSON, errors included (``{"error": {"code", "message"}}`` on stdout
    besides the line on stderr)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        ctx.meta["toolcat.json"] = value
        return value

    return click.option(
        "--json", "as_json", is_flag=True, callback=remember, help="Print JSON (errors too)."
    )(fn)


def tag_options(fn: F) -> F:
    """``--tag`` (all of), ``--any-tag`` (at least one of), ``--exclude-tag`` (none of): the
    one tag rule of ``TagFilter``, each repeatable."""
    options = [
        click.option(
            "--tag", "tags", multiple=True, help="Only tools with this tag (repeat: all)."
        ),
        click.option(
            "--any-tag", "any_tags", multiple=True, help="Only tools with one of these tags."
        ),
        click.option(
            "--exclude-tag", "exclude_tags", multiple=True, help="Leave out tools with this tag."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def emit_json(value: Any) -> None:
    """Indented for a person at a terminal, compact (and faster) for a program."""
    indent = 2 if sys.stdout.isatty() else None
    click.echo(json.dumps(value, indent=indent, ensure_ascii=False))


def open_catalog(ctx: click.Context, isolation: str = "thread", *, create: bool = False) -> Catalog:
    """The catalog the global options name; ``--isolate`` overrides ``isolation``. Only the
    commands that create a catalog (``init``, ``register``) pass ``create``: any other
    command on a missing file (a mistyped ``--db``) is an error naming the path."""
    params = ctx.find_root().params
    policy = Policy.of(allow=params.get("allow") or (), deny=params.get("deny") or ())
    mode: Any = params.get("isolate") or isolation
    catalog = Catalog(
        params.get("db"),
        policy=policy,
        isolation=mode,
        trust_any_module=bool(params.get("trust_any_module")),
        create=create,
    )
    ctx.call_on_close(catalog.close)
    return catalog


def plural(count: int, word: str) -> str:
    """``1 tool``, ``2 tools``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def one_line(text: str, width: int = 80) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def tool_line(tool_id: str, description: str, defer_loading: bool) -> str:
    deferred = " [deferred]" if defer_loading else ""
    return f"{tool_id:<36} {one_line(description, 70)}{deferred}"


@click.group(cls=ToolcatGroup)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="TOOLCAT_DB",
    help="Catalog file. Default: $TOOLCAT_DB, else ~/.local/share/toolcat/catalog.db.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option(
    "--deny",
    multiple=True,
    help="Policy: refuse (and hide) tools matching this rule, e.g. tag:destructive.",
)
@click.option("--allow", multiple=True, help="Policy: exempt tools matching this rule from --deny.")
@click.option(
    "--isolate",
    type=click.Choice(["thread", "process"]),
    help="Run tools in threads (fast; a timeout stops the wait, not the work, and not even "
    "the wait while a tool holds the GIL in a long C call) or in worker processes (a timeout "
    "kills the work). Default: process for `call`, thread otherwise.",
)
@click.option(
    "--trust-any-module",
    is_flag=True,
    help="Let implementations lie outside their toolkit's module, even in the standard "
    "library (os:system), and manifests start commands (mcp+stdio:). Only for catalogs whose "
    "every manifest you wrote.",
)
@click.version_option(package_name="toolcat")
@click.pass_context
def cli(
    ctx: click.Context,
    db: Path | None,
    debug: bool,
    deny: tuple[str, ...],
    allow: tuple[str, ...],
    isolate: str | None,
    trust_any_module: bool,
) -> None:
    """A searchable catalog of LLM tool definitions with deferred loading."""
    ctx.meta["toolcat.debug"] = debug


@cli.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create the catalog file (if missing) and print its path."""
    click.echo(str(open_catalog(ctx, create=True).path))


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--module", "modules", multiple=True, help="Register a module's @tool functions.")
@click.option("--entry-points", is_flag=True, help="Register installed toolcat.toolkits plugins.")
@click.option("--toolkit", "toolkit_name", help="Toolkit name for --module (default: from it).")
@click.option(
    "--version",
    "toolkit_version",
    help="Toolkit version for --module or an import (default: from the module; for imports "
    "the newest registered, bumped when tools changed, else 1.0.0).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Overwrite a registered version whose content changed; let this registration take "
    "over a toolkit that came from another kind of source (manifest, Python code, MCP server, "
    "OpenAPI document).",
)
@click.option("--mcp-stdio", "mcp_command", help="Import the tools of this MCP server command.")
@click.option("--mcp-http", "mcp_url", help="Import the tools of the MCP server at this URL.")
@click.option(
    "--openapi", "openapi_spec", help="Import the operations of this OpenAPI document (file/URL)."
)
@click.option("--base-url", help="With --openapi: the API's URL (default: the document's servers).")
@click.option(
    "--header",
    "header_items",
    multiple=True,
    metavar="NAME=VALUE",
    help="With an import: a header sent with every call (repeatable); ${ENV_VAR} in VALUE is "
    "stored as written and resolved when calling.",
)
@click.option(
    "--include-tag",
    "include_tags",
    multiple=True,
    help="With --openapi: only operations tagged so.",
)
@click.option(
    "--operation", "operation_ids", multiple=True, help="With --openapi: only this operationId."
)
@click.option(
    "--tag", "tags", multiple=True, help="With an import: a tag for every tool (repeatable)."
)
@click.option(
    "--defer/--no-defer",
    default=True,
    show_default=True,
    help="With an import: the tools are deferred (found by search, not listed).",
)
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="With an import: seconds to wait for the server (--openapi: for each call).",
)
@click.option(
    "--env",
    "env_items",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --mcp-stdio: an environment variable of the server (repeatable; ${ENV_VAR} "
    "references allowed). The server gets only these and safe defaults (PATH, HOME, LANG...).",
)
@click.option("--cwd", "cwd", help="With --mcp-stdio: the server's working directory.")
@click.option(
    "--on-change",
    type=click.Choice(["refuse", "warn"]),
    default="refuse",
    show_default=True,
    help="With --mcp-*: when the server's definition of a tool no longer matches the "
    "registered one at its first call, refuse the call or only warn.",
)
@json_option
@click.pass_context
def register(
    ctx: click.Context,
    paths: tuple[Path, ...],
    modules: tuple[str, ...],
    entry_points: bool,
    toolkit_name: str | None,
    toolkit_version: str | None,
    replace: bool,
    mcp_command: str | None,
    mcp_url: str | None,
    openapi_spec: str | None,
    base_url: str | None,
    header_items: tuple[str, ...],
    include_tags: tuple[str, ...],
    operation_ids: tuple[str, ...],
    tags: tuple[str, ...],
    defer: bool,
    timeout: float,
    env_items: tuple[str, ...],
    cwd: str | None,
    on_change: str,
    as_json: bool,
) -> None:
    """Register toolkits from manifests (YAML, TOML, JSON), directories, modules, plugins
    or MCP servers.

    Manifests are never imported. --module imports the module once, now, to read its
    @tool functions; their code is imported again only when a tool is called. All or
    nothing: if any source is invalid, nothing is registered.

    --mcp-stdio "COMMAND ARGS" / --mcp-http URL (with --toolkit NAME) read the server's
    tools; calls are forwarded to it, starting it on the first call. Registering again
    picks up added, changed and removed tools as a new version (or --version). A tool
    whose definition changed on the server since is refused (or, --on-change warn, only
    logged) until it is registered again. Secrets: --header 'Authorization=Bearer
    ${TOKEN}' (HTTP) and --env 'KEY=${KEY}' (stdio) store the reference, never the value.

    --openapi SPEC (a JSON/YAML file or URL, with --toolkit NAME) registers one tool per
    operation, calling the API at --base-url (default: the document's servers) with the
    --header values; --include-tag and --operation pick operations.
    """
    from .credentials import parse_assignments
    from .registry.python import toolkit_from_module, toolkits_from_entry_points

    headers = parse_assignments(header_items, option="--header")
    env = parse_assignments(env_items, option="--env")
    if (env or cwd is not None) and not mcp_command:
        raise click.UsageError("--env and --cwd go with --mcp-stdio")
    if openapi_spec:
        if paths or modules or entry_points or mcp_command or mcp_url:
            raise click.UsageError("--openapi registers one document, nothing else")
        if not toolkit_name:
            raise click.UsageError("--openapi needs --toolkit NAME")
        _warn_literal_secrets(headers, env)
        result = open_catalog(ctx, create=True).register_openapi(
            openapi_spec,
            toolkit=toolkit_name,
            base_url=base_url,
            headers=headers,
            include_tags=include_tags,
            operations=operation_ids,
            version=toolkit_version,
            tags=tags,
            defer_loading=defer,
            timeout=timeout,
            replace=replace,
        )
        _echo_import(result, as_json)
        return
    if base_url or include_tags or operation_ids:
        raise click.UsageError("--base-url, --include-tag and --operation go with --openapi")
    if headers and not mcp_url:
        raise click.UsageError("--header goes with --mcp-http or --openapi (stdio: --env)")
    if mcp_command or mcp_url:
        if (paths or modules or entry_points) or (mcp_command and mcp_url):
            raise click.UsageError("--mcp-stdio/--mcp-http register one server, nothing else")
        if not toolkit_name:
            raise click.UsageError("--mcp-stdio/--mcp-http need --toolkit NAME")
        _warn_literal_secrets(headers, env)
        result = open_catalog(ctx, create=True).register_mcp(
            mcp_command or mcp_url or "",
            toolkit=toolkit_name,
            version=toolkit_version,
            http=bool(mcp_url),
            tags=tags,
            defer_loading=defer,
            timeout=timeout,
            headers=headers,
            env=env,
            cwd=cwd,
            on_change=on_change,
            replace=replace,
        )
        _echo_import(result, as_json)
        return
    if not (paths or modules or entry_points):
        raise click.UsageError(
            "give manifest PATHS, --module, --entry-points, --mcp-* or --openapi"
        )
    sources: list[Any] = list(paths)
    sources += [toolkit_from_module(m, name=toolkit_name, version=toolkit_version) for m in modules]
    if entry_points:
        sources += [toolkit for toolkit, _ in toolkits_from_entry_points()]
    results = open_catalog(ctx, create=True).register(*sources, replace=replace)
    if as_json:
        emit_json({"results": [r.model_dump() for r in results]})
        return
    for r in results:
        click.echo(f"{r.status:<9} {r.toolkit} {r.version} ({plural(r.tools, 'tool')})")
    if results:
        click.echo(f"revision {results[-1].revision}")


def _warn_literal_secrets(headers: dict[str, str], env: dict[str, str]) -> None:
    """Warn (stderr) about secrets typed in full into an import's --header/--env."""
    from .credentials import literal_secrets

    for what in literal_secrets(headers, env):
        click.echo(
            f"warning: {what} is stored in the catalog as typed; write the secret as "
            "${ENV_VAR} to store only the reference",
            err=True,
        )


def _echo_import(result: Any, as_json: bool) -> None:
    """Print the registration of an imported toolkit (MCP server, OpenAPI document)."""
    if as_json:
        emit_json({"results": [result.model_dump()]})
        return
    click.echo(
        f"{result.status:<9} {result.toolkit} {result.version} ({plural(result.tools, 'tool')})"
    )
    for kind, names in (result.changes or {}).items():
        if names and result.status != "unchanged":
            click.echo(f"  {kind}: {', '.join(names)}")
    click.echo(f"revision {result.revision}")


@cli.command()
@click.option("--module", "module", required=True, help="Module whose @tool functions to read.")
@click.option("--toolkit", "toolkit_name", help="Toolkit name (default: from the module).")
@click.option("--version", "toolkit_version", help="Toolkit version (default: from the module).")
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
def manifest(
    module: str,
    toolkit_name: str | None,
    toolkit_version: str | None,
    fmt: str,
    output: Path | None,
) -> None:
    """Write the manifest of a module's @tool functions, so a production catalog can be
    registered from files without importing any code."""
    from .registry.python import manifest_text, toolkit_from_module

    text = manifest_text(
        toolkit_from_module(module, name=toolkit_name, version=toolkit_version), fmt
    )
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


@cli.command(name="list")
@tag_options
@click.option("--toolkit", help="Only this toolkit (name or name@version).")
@click.option("--include-deferred", is_flag=True, help="Include deferred tools.")
@click.option("--limit", type=int, default=DEFAULT_LIST_LIMIT, show_default=True, help="Page size.")
@click.option("--cursor", help="The next_cursor of the previous page.")
@json_option
@click.pass_context
def list_(
    ctx: click.Context,
    tags: tuple[str, ...],
    any_tags: tuple[str, ...],
    exclude_tags: tuple[str, ...],
    toolkit: str | None,
    include_deferred: bool,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List the always-on tools (list mode)."""
    # Plain dicts, not models: a one-shot `toolcat list` never imports pydantic.
    page = open_catalog(ctx).list_summaries(
        tags=tags,
        any_tags=any_tags,
        exclude_tags=exclude_tags,
        toolkit=toolkit,
        include_deferred=include_deferred,
        limit=limit,
        cursor=cursor,
    )
    if as_json:
        emit_json(page)
        return
    for tool in page["tools"]:
        click.echo(tool_line(tool["id"], tool["description"], tool["defer_loading"]))
    footer = f"{plural(len(page['tools']), 'tool')}, revision {page['revision']}"
    if page["next_cursor"]:
        footer += f"; more with --cursor {page['next_cursor']}"
    click.echo(footer)


@cli.command()
@click.argument("query")
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    help="Ranking mode. Default: hybrid when the catalog has vectors, else bm25.",
)
@click.option("-k", "k", type=int, default=10, show_default=True, help="Number of hits.")
@tag_options
@click.option("--toolkit", help="Only this toolkit (name or name@version).")
@click.option("--no-deferred", is_flag=True, help="Leave deferred tools out.")
@json_option
@click.pass_context
def search(
    ctx: click.Context,
    query: str,
    mode: str | None,
    k: int,
    tags: tuple[str, ...],
    any_tags: tuple[str, ...],
    exclude_tags: tuple[str, ...],
    toolkit: str | None,
    no_deferred: bool,
    as_json: bool,
) -> None:
    """Search every tool, deferred ones included (search mode)."""
    # A one-shot search imports numpy and onnxruntime: thousands of objects that live
    # until the process exits. Looking for cycles among them ran ~100 collections while
    # they were created, and one more over all of them at exit, to free a few hundred
    # objects. So the `toolcat` process collects none during its search and freezes what it
    # built out of later collections (7% fewer instructions for the whole search).
    collecting = _OWN_PROCESS and gc.isenabled()
    if collecting:
        gc.disable()
    if _OWN_PROCESS:
        # numpy's OpenBLAS starts a thread per core at import, and they spin: ~0.1 s of CPU
        # that one search (no BLAS call: the cosines are an einsum) never uses.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from .search.embeddings import one_shot

        one_shot()
    try:
        # Plain data, no models: pydantic was a fifth of a one-shot hybrid search, half of a
        # BM25 one (README, "Speed: one-shot search").
        result = open_catalog(ctx).search_summaries(
            query,
            mode=mode,
            k=k,
            tags=tags,
            any_tags=any_tags,
            exclude_tags=exclude_tags,
            toolkit=toolkit,
            include_deferred=not no_deferred,
        )
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
    if _OWN_PROCESS:
        # Nothing a search leaves needs finalising (its catalog is closed with the command's
        # context): the process leaves at once instead of tearing down the interpreter and
        # onnxruntime, ~10% of a one-shot search's CPU (docs/benchmarks.md "Cold one-shot
        # search").
        _LEAVE_AT_ONCE.append(True)
    hits, warnings = result["hits"], result["warnings"]
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    no_match = result["no_match"]
    if as_json:
        shape: dict[str, Any] = {
            "revision": result["revision"],
            "query": result["query"],
            "mode": result["mode"],
            "no_match": no_match,
            "hits": hits,
        }
        if warnings:
            shape["warnings"] = warnings
        emit_json(shape)
        return
    for hit in hits:
        t = hit["tool"]
        line = tool_line(t["id"], t["description"], t["defer_loading"])
        click.echo(f"{hit['rank']:>3}. {hit['score']:8.3f} {hit['match']:<6}  {line}")
    if not hits:
        click.echo("no matching tools")
    elif no_match:
        click.echo("nothing fits: no tool matches this request well")


@cli.command()
@click.argument("name")
@json_option
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one tool: NAME, TOOLKIT.NAME, or either with @VERSION."""
    tool = open_catalog(ctx).get(name)
    if as_json:
        emit_json(tool.model_dump(mode="json"))
        return
    click.echo(f"{tool.id}  (toolkit {tool.toolkit} {tool.version})")
    click.echo(f"tags: {', '.join(tool.tags) or '-'}")
    click.echo(f"deferred: {'yes' if tool.defer_loading else 'no'}")
    if tool.deprecated:
        click.echo("deprecated: yes")
    if tool.implementation:
        click.echo(f"implementation: {tool.implementation}")
    click.echo("")
    click.echo(tool.description)
    click.echo("")
    click.echo("parameters:")
    click.echo(json.dumps(tool.parameters, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("toolkit")
@json_option
@click.pass_context
def versions(ctx: click.Context, toolkit: str, as_json: bool) -> None:
    """List every registered version of TOOLKIT, oldest first."""
    found = open_catalog(ctx).versions(toolkit)
    if as_json:
        emit_json({"toolkit": toolkit, "versions": [v.model_dump() for v in found]})
        return
    for v in found:
        state = "active" if v.active else ("deprecated" if v.deprecated else "")
        click.echo(f"{v.version:<14} {state:<11} {plural(v.tools, 'tool'):>10}  {v.registered_at}")


@cli.command()
@json_option
@click.pass_context
def toolkits(ctx: click.Context, as_json: bool) -> None:
    """List the active version of every toolkit."""
    catalog = open_catalog(ctx)
    found = catalog.toolkits()
    if as_json:
        emit_json({"toolkits": [v.model_dump() for v in found]})
        return
    if not found:
        click.echo(f"no active toolkits in {catalog.path}; `toolcat register` adds some")
    for v in found:
        click.echo(
            f"{v.toolkit:<20} {v.version:<10} {plural(v.tools, 'tool'):>10}  "
            + one_line(v.description, 50)
        )


@cli.command()
@click.argument("ref", metavar="TOOLKIT@VERSION")
@click.pass_context
def deprecate(ctx: click.Context, ref: str) -> None:
    """Deprecate one version; the newest version not deprecated becomes active.

    `toolcat activate TOOLKIT@VERSION` takes it back."""
    catalog = open_catalog(ctx)
    revision = catalog.deprecate(*_versioned(ref))
    click.echo(f"deprecated {ref}; {_active_now(catalog, ref)}; revision {revision}")


@cli.command()
@click.argument("ref", metavar="TOOLKIT@VERSION")
@click.pass_context
def activate(ctx: click.Context, ref: str) -> None:
    """Take back the deprecation of one version: the newest version not deprecated becomes
    active again (this one, unless a newer one is in use)."""
    catalog = open_catalog(ctx)
    revision = catalog.activate(*_versioned(ref))
    click.echo(f"{ref} is not deprecated; {_active_now(catalog, ref)}; revision {revision}")


def _versioned(ref: str) -> tuple[str, str]:
    """(toolkit, version) of TOOLKIT@VERSION; a missing version is a usage error."""
    name, _, version = ref.partition("@")
    if not name or not version:
        raise click.BadParameter(
            f"{ref!r} names no version; write TOOLKIT@VERSION (`toolcat versions {name or ref}` "
            "lists them)",
            param_hint="TOOLKIT@VERSION",
        )
    return name, version


def _active_now(catalog: Catalog, ref: str) -> str:
    name = ref.partition("@")[0]
    active = [v.version for v in catalog.versions(name) if v.active]
    return f"active: {name} {active[0]}" if active else f"{name} has no active version"


@cli.command()
@click.argument("ref", metavar="TOOLKIT[@VERSION]")
@click.pass_context
def remove(ctx: click.Context, ref: str) -> None:
    """Remove one version of a toolkit, or (no @VERSION) all of its versions."""
    removed = open_catalog(ctx).remove(ref)
    click.echo(f"removed {ref} ({removed} version{'s' if removed != 1 else ''})")


@cli.command()
@click.argument("name")
@click.option("--args", "args_json", default="{}", show_default=True, help="Arguments as JSON.")
@click.option("--timeout", type=float, help="Seconds to wait for the tool.")
@click.option(
    "--save-artifacts",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the artifacts the tool hands back into this folder.",
)
@json_option
@click.pass_context
def call(
    ctx: click.Context,
    name: str,
    args_json: str,
    timeout: float | None,
    save_artifacts: Path | None,
    as_json: bool,
) -> None:
    """Call a tool and print its result.

    On a terminal, the tool's progress, status and log lines appear on stderr as it runs;
    the artifacts it hands back are listed on stderr after the result (--save-artifacts
    DIR writes them out; --json gives them in "events", kind "artifact").

    The tool runs in a worker process (unless --isolate thread), so --timeout stops it.
    Exit 0 only when the tool succeeded; otherwise the result is printed all the same
    (stdout with --json, else its error on stderr) and the exit code says what failed:
    unknown tool 4, import failed 9, invalid arguments 10, timeout 11, denied 12, the
    tool failed 14.
    """
    try:
        arguments = json.loads(args_json)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint="--args") from None
    except RecursionError:
        raise click.BadParameter("JSON nested too deeply", param_hint="--args") from None
    catalog = open_catalog(ctx, isolation="process")
    show = None if as_json or not sys.stderr.isatty() else show_progress
    result = catalog.call(name, arguments, timeout=timeout, on_event=show)
    if show is None:  # warnings (a forwarded tool that changed, --on-change warn) still show
        for event in result.events:
            if event.kind == "log" and event.level in ("warning", "error"):
                click.echo(f"{event.level}: {event.message}", err=True)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    elif result.success:
        data = result.data
        click.echo(
            data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False)
        )
        if result.truncated:
            click.echo("[truncated]", err=True)
    else:
        click.echo(f"error ({result.error_code}): {result.error}", err=True)
    saved = save_all(result.artifacts, save_artifacts) if save_artifacts else {}
    if not as_json:
        for event in result.artifacts:
            click.echo(artifact_line(event, saved.get(id(event))), err=True)
    if catalog.runtime.executor.threads.busy:  # a timed-out thread that cannot be stopped:
        _LEAVE_AT_ONCE.append(True)  # main() exits without waiting for it
    if not result.success:
        ctx.exit(CALL_EXIT_CODES.get(result.error_code or "", ToolFailedError.exit_code))


def show_progress(event: ToolEvent) -> None:
    """One line on stderr per event of a running tool (a terminal only)."""
    if event.kind == "progress":
        total = f"/{event.total:g}" if event.total is not None else ""
        text = f"[{event.progress or 0:g}{total}] {event.message or ''}"
    elif event.kind == "status":
        text = f"[status] {event.state}" + (f": {event.message}" if event.message else "")
    elif event.kind == "artifact":
        return  # listed with the result
    else:
        text = f"[{event.level or 'log'}] {event.message or ''}"
    click.echo(text.rstrip(), err=True)


def artifact_line(event: ToolEvent, saved: Path | None) -> str:
    """``artifact NAME (TYPE, SIZE): DESCRIPTION -> where it is``."""
    where = str(saved) if saved else event.uri or "in the result (--json, --save-artifacts)"
    about = f": {event.message}" if event.message else ""
    return f"artifact {event.name} ({event.mime_type}, {event.size or 0:,} bytes){about} -> {where}"


def save_all(events: list[ToolEvent], folder: Path) -> dict[int, Path]:
    """Write each artifact into ``folder`` under its safe name, never over a file."""
    from .runtime.artifacts import safe_name

    folder.mkdir(parents=True, exist_ok=True)
    saved: dict[int, Path] = {}
    for event in events:
        stem, dot, suffix = safe_name(event.name or "artifact").rpartition(".")
        target, number = folder / f"{stem}{dot}{suffix}", 1
        try:
            content = event.content()
            while True:
                try:  # "x": never over a file, nor through a link (a dangling one too)
                    with open(target, "xb") as file:
                        file.write(content)
                    break
                except FileExistsError:
                    number += 1
                    name = f"{stem}-{number}{dot}{suffix}" if dot else f"{suffix}-{number}"
                    target = folder / name
        except (OSError, ValueError) as e:
            click.echo(f"warning: artifact {event.name!r} not saved: {e}", err=True)
            continue
        saved[id(event)] = target
    return saved


@cli.command()
@click.argument("toolkit", required=False)
@json_option
@click.pass_context
def check(ctx: click.Context, toolkit: str | None, as_json: bool) -> None:
    """Check each tool's implementation: Python ones are imported in a child process and
    their signatures checked; tools imported from an MCP server are compared with what the
    server lists now (changed, removed and added tools are reported)."""
    report = open_catalog(ctx).check(toolkit)
    failed = [r for r in report if not r["ok"]]
    added = [r for r in report if r.get("change") == "added"]
    if as_json:
        emit_json({"tools": report, "failed": len(failed)})
    else:
        for r in report:
            label = "new " if r.get("change") == "added" else ("ok  " if r["ok"] else "FAIL")
            click.echo(f"{label} {r['id']}")
            for problem in r["problems"] + ([r["note"]] if r.get("note") else []):
                click.echo(f"     {problem}")
        summary = f"{len(report) - len(failed) - len(added)} ok, {len(failed)} failed"
        if added:
            summary += f", {len(added)} new on the server"
        click.echo(summary)
        if failed or added:
            moved = any(r.get("change") for r in report)
            if moved:
                click.echo(
                    "an imported server changed: review it, then `toolcat register` it again "
                    "to register what it lists now as a new version",
                    err=True,
                )
    if failed:
        ctx.exit(ImportFailedError.exit_code)


def progress_line(done: int, total: int, rate: float | None) -> str:
    """``embedded DONE/TOTAL (N tools/s, ETA H:MM:SS)``; the rate and ETA once known."""
    line = f"embedded {done}/{total}"
    if not rate or rate <= 0:
        return line
    left = round((total - done) / rate)
    return f"{line} ({rate:.0f} tools/s, ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d})"


class ReindexProgress:
    """Reindex's progress on stderr: on a terminal one line rewritten in place (at most
    every half second), else a line every 2 seconds; always the last one."""

    def __init__(self, terminal: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.terminal = terminal
        self.clock = clock
        self.first: tuple[int, float] | None = None
        self.shown = -1.0
        self.pending = False

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.first is None:  # rates count from the first stored batch on
            self.first = (done, now)
        if done < total and now - self.shown < (0.5 if self.terminal else 2.0):
            return
        self.shown = now
        first_done, first_at = self.first
        rate = (done - first_done) / (now - first_at) if now > first_at else None
        line = progress_line(done, total, rate)
        if self.terminal:
            click.echo(f"\r{line}\x1b[K", nl=False, err=True, color=True)
            self.pending = True
        else:
            click.echo(line, err=True)

    def finish(self) -> None:
        if self.pending:
            click.echo("", err=True)
            self.pending = False


@cli.command()
@click.option(
    "--model",
    help="Switch to this model: toolcat-tool-retriever-v1 (default, packaged), "
    "all-MiniLM-L6-v2, or a sentence-transformers model (name or folder).",
)
@click.option("--batch-size", type=int, default=64, show_default=True, help="Texts per batch.")
@click.option("--full", is_flag=True, help="Rebuild the FTS index and re-embed everything.")
@json_option
@click.pass_context
def reindex(
    ctx: click.Context, model: str | None, batch_size: int, full: bool, as_json: bool
) -> None:
    """Embed what changed since the last reindex, and drop what is gone.

    Safe to interrupt: every batch is committed, and the next run resumes.
    """
    catalog = open_catalog(ctx)
    progress = ReindexProgress(sys.stderr.isatty() and not as_json)

    def stage(line: str) -> None:
        click.echo(f"{line}...", err=True)

    try:
        report = catalog.reindex(
            model=model, batch_size=batch_size, full=full, progress=progress, stage=stage
        )
    finally:
        progress.finish()
    if as_json:
        emit_json(report.model_dump())
        return
    click.echo(
        f"model {report.model} (dim {report.dimension}): embedded {report.embedded}, "
        f"skipped {report.skipped}, removed {report.removed}"
        + (f", FTS rows rebuilt {report.fts_rebuilt}" if full else "")
        + f" in {report.seconds:.1f} s ({report.tools_per_second:.0f} tools/s"
        + (f" on {report.device}" if report.device else "")
        + (f"; ONNX export {report.export_seconds:.1f} s" if report.export_seconds >= 0.1 else "")
        + (
            f"; ANN shortlist saved {report.shortlist_seconds:.1f} s"
            if report.shortlist_seconds >= 0.1
            else ""
        )
        + ")"
    )


@cli.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show index coverage per search mode, the embedding model and the revision."""
    info = open_catalog(ctx).status()
    if as_json:
        emit_json(info)
        return
    click.echo(f"catalog   {info['path']} (revision {info['revision']})")
    click.echo(f"toolkits  {info['toolkits']} active ({info['toolkit_versions']} versions)")
    click.echo(f"tools     {info['active_tools']} active")
    dim = info["embedding_dim"]
    indexed = f"dim {dim}" if dim is not None else "not indexed yet: run `toolcat reindex`"
    click.echo(f"model     {info['embedding_model']} ({indexed})")
    for mode, cov in info["coverage"].items():
        click.echo(f"{mode:<9} {cov['indexed']}/{cov['of']} indexed")
    click.echo(f"default   {info['default_mode']}")
    replica = info.get("replica")
    if replica:
        primary_revision = replica["primary_revision"]
        known = (
            f"revision {primary_revision}"
            if primary_revision is not None
            else f"{replica['behind_transactions']} transactions ahead"
        )
        stale = replica["stale_seconds"]
        click.echo(f"replica   of {replica['primary']}")
        click.echo(f"          revision {replica['revision']}; primary: {known}")
        click.echo(
            f"          lag {replica['lag_seconds']:.1f} s; store last answered "
            + (f"{stale:.1f} s ago" if stale is not None else "never")
        )
        if replica["error"]:
            click.echo(f"          last error: {replica['error']}")


def first_revision(ctx: click.Context, source: str, wait: float) -> Follower:
    """A replica's follower, once its file holds a revision: a restarted replica serves
    its last one at once (and catches up while serving); a fresh one waits for its first,
    at most ``wait`` seconds."""
    import time

    from .errors import CatalogError
    from .store.connection import default_path
    from .store.replica import Follower

    db = ctx.find_root().params.get("db")
    follower = Follower(Path(db) if db else default_path(), source)
    if follower.serving:
        return follower
    said = None
    deadline = time.monotonic() + wait
    while not follower.sync():
        error = follower.state.get("error")
        if time.monotonic() > deadline:
            raise CatalogError(f"no first revision from {follower.primary} in {wait:g} s: {error}")
        if error != said:
            click.echo(f"waiting for a first revision: {error}", err=True)
            said = error
        time.sleep(1.0)
    return follower


@cli.command()
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP, not stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: port.")
@click.option(
    "--token",
    envvar="TOOLCAT_TOKEN",
    help="HTTP: require 'Authorization: Bearer TOKEN' (env TOOLCAT_TOKEN).",
)
@click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTTP: a YAML/TOML file of principals, each with its token and its own view.",
)
@tag_options
@click.option("--toolkit", help="Only list, search and call this toolkit (name[@version]).")
@click.option(
    "--deny",
    "serve_deny",
    multiple=True,
    help="Refuse (and hide) tools matching this rule, as the global --deny.",
)
@click.option(
    "--allow", "serve_allow", multiple=True, help="Exempt tools matching this rule from --deny."
)
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option(
    "--refuse-unsearched",
    is_flag=True,
    help="Refuse calls of deferred tools not found by search first.",
)
@click.option("--mode", type=click.Choice(SEARCH_MODES), help="search_tools mode (default: best).")
@click.option(
    "--plain",
    is_flag=True,
    help="An ordinary MCP server: list every selected tool, deferred too; no search_tools.",
)
@click.option(
    "--access-log/--no-access-log",
    default=None,
    help="A line per request on stderr: time, principal, method/tool, status, duration "
    "(never tokens or arguments). Default: on with --http, off on stdio.",
)
@click.option(
    "--replica-of",
    "replica_of",
    envvar="TOOLCAT_REPLICA_OF",
    metavar="URL",
    help="Serve --db as a read-only replica following the primary's Litestream replica at "
    "URL (s3://bucket/path?endpoint=..., gs://, abs://, file:///path); env "
    "TOOLCAT_REPLICA_OF.",
)
@click.option(
    "--replica-wait",
    type=click.FloatRange(min=1),
    default=300,
    show_default=True,
    metavar="SECONDS",
    help="With --replica-of: how long a fresh replica waits for its first revision.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    use_http: bool,
    host: str,
    port: int,
    token: str | None,
    tokens_file: Path | None,
    tags: tuple[str, ...],
    any_tags: tuple[str, ...],
    exclude_tags: tuple[str, ...],
    toolkit: str | None,
    serve_deny: tuple[str, ...],
    serve_allow: tuple[str, ...],
    page_size: int,
    refuse_unsearched: bool,
    mode: str | None,
    plain: bool,
    access_log: bool | None,
    replica_of: str | None,
    replica_wait: float,
) -> None:
    """Serve the catalog over MCP: list mode as tools/list, plus search_tools and call_tool.

    stdio by default (for clients that start toolcat); --http serves streamable HTTP at
    http://HOST:PORT/mcp, on loopback unless --host says otherwise. Both MCP eras are
    served: 2026-07-28 (stateless) and 2025-11-25 sessions. --toolkit, the tag options,
    --deny and --allow bound what clients can list, search and call. --replica-of URL makes
    --db a read-only copy of a primary that Litestream replicates to URL: it follows each
    new revision, refuses writes, and reports its lag (toolcat status, GET /healthz).
    """
    from .mcpclient import require_sdk

    require_sdk()
    import anyio

    from .server.mcp import CatalogServer, ServeOptions, serve_stdio
    from .server.tokens import Tokens, load_tokens

    if tokens_file and not use_http:
        raise click.UsageError("--tokens protects --http; stdio needs no token")
    if token and tokens_file:
        if ctx.get_parameter_source("token") == click.core.ParameterSource.ENVIRONMENT:
            token = None  # the file names every identity; TOOLCAT_TOKEN is not one of them
        else:
            raise click.UsageError("give --token or --tokens, not both")
    tokens = load_tokens(tokens_file) if tokens_file else Tokens.single(token) if token else None
    if replica_of:  # SIGTERM unwinds (stopping Litestream's children) until uvicorn takes it
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    follower = first_revision(ctx, replica_of, replica_wait) if replica_of else None
    if follower is not None:
        ctx.call_on_close(follower.close)  # its Litestream child stops with it
    catalog = open_catalog(ctx)
    # A bad filter fails now, not per client.
    catalog.list(tags=tags, any_tags=any_tags, exclude_tags=exclude_tags, toolkit=toolkit, limit=1)
    server = CatalogServer(
        catalog,
        ServeOptions(
            tags=tags,
            any_tags=any_tags,
            exclude_tags=exclude_tags,
            toolkit=toolkit,
            page_size=page_size,
            refuse_unsearched=refuse_unsearched,
            search_mode=mode,
            plain=plain,
            policy=Policy.of(allow=serve_allow, deny=serve_deny),
            per_caller=tokens_file is not None,
            access_log=use_http if access_log is None else access_log,
        ),
        follower=follower,
    )
    if follower is not None:  # a replica listens once it can answer its revision at speed
        server.prepare(server.watcher.revision)
        follower.look()  # how fresh the copy is now, not when the last process looked
    if not use_http:
        anyio.run(serve_stdio, server)
        return
    from .server.http import listening_socket, serve_http

    sock = listening_socket(host, port)  # a busy port fails here, before the announcement
    click.echo(f"serving MCP at http://{host}:{port}/mcp", err=True)
    serve_http(server, host=host, port=port, tokens=tokens, sock=sock)


@cli.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    required=True,
    help="The API whose tool format to write.",
)
@click.option("--query", help="Export the tools this search finds.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="With --query: hits.")
@click.option("--toolkit", help="Export this toolkit's tools (name or name@version).")
@click.option("--all", "everything", is_flag=True, help="Export every active tool.")
@click.option("--tools-only", is_flag=True, help="Print only the tools array, no name map.")
@tag_options
@click.pass_context
def export(
    ctx: click.Context,
    fmt: str,
    query: str | None,
    k: int,
    toolkit: str | None,
    everything: bool,
    tools_only: bool,
    tags: tuple[str, ...],
    any_tags: tuple[str, ...],
    exclude_tags: tuple[str, ...],
) -> None:
    """Write tool definitions in an LLM API's format, as JSON.

    Prints {"format", "tools", "names"}: "tools" is what to pass as the API's tools
    parameter; "names" maps each exported name back to its catalog address, for calls that
    come back (toolcat call ADDRESS). Deferred tools carry defer_loading in the anthropic
    format. The tag options narrow any of the three.
    """
    if sum(map(bool, (query, toolkit, everything))) != 1:
        raise click.UsageError("give exactly one of --query, --toolkit or --all")
    catalog = open_catalog(ctx)
    by_tags = TagFilter.of(tags, any_tags, exclude_tags)
    if query is not None:
        tools: list[Any] = [h.tool for h in catalog.search(query, k=k, tags=by_tags).hits]
    else:
        tools = list(catalog.iter_tools(toolkit=toolkit, tags=by_tags))
    exported = catalog.export(tools, fmt)
    emit_json(exported.tools if tools_only else exported.to_json())


@cli.command()
@click.argument("action", type=click.Choice(["show", "clear", "on", "off"]), default="show")
@click.option("--toolkit", help="Only this toolkit's tools.")
@click.option("-n", "limit", type=int, default=50, show_default=True, help="Uses to show.")
@json_option
@click.pass_context
def usage(ctx: click.Context, action: str, toolkit: str | None, limit: int, as_json: bool) -> None:
    """Learning from use: show or clear recorded (query, tool) uses, or turn learning on/off.

    A search followed by a call of one of its hits records the query for that tool; reindex
    adds the catalog's own recorded queries (this CLI, the Python API) to the tools' search
    documents. A server's callers' uses are kept per principal and reorder only that
    principal's own results, by a bounded amount.
    """
    catalog = open_catalog(ctx)
    if action == "clear":
        removed = catalog.clear_usage(toolkit)
        click.echo(f"cleared {plural(removed, 'use')}; run `toolcat reindex` to unlearn them")
        return
    if action in ("on", "off"):
        catalog.learning = action == "on"
        click.echo(f"learning from use is {action}; run `toolcat reindex` to apply it")
        return
    uses = catalog.usage(toolkit)
    if as_json:
        emit_json({"learning": catalog.learning, "uses": uses[:limit], "total": len(uses)})
        return
    click.echo(
        f"learning from use: {'on' if catalog.learning else 'off'}, {plural(len(uses), 'use')}"
    )
    for use in uses[:limit]:
        who = use["principal"] or "(catalog)"
        click.echo(
            f"{use['recorded_at']}  {who:<12} {use['tool']:<36} {one_line(use['query'], 60)}"
        )


@cli.command()
@click.argument("action", type=click.Choice(["show", "prune"]), default="show")
@click.option(
    "--keep",
    "keep",
    multiple=True,
    metavar="MODEL",
    help="prune: keep this model's export too (the retriever's and MiniLM's are kept).",
)
@click.option("--all", "everything", is_flag=True, help="prune: delete the whole export cache.")
@json_option
def cache(action: str, keep: tuple[str, ...], everything: bool, as_json: bool) -> None:
    """The ONNX export cache ($XDG_CACHE_HOME/toolcat/onnx): show its size, or prune it.

    One export per model content, shared by every venv of the user. prune deletes the
    exports of models this install does not name (keep others with --keep), graphs saved
    for other onnxruntime versions, the int8 graph while queries run fp32, and leftovers of
    interrupted exports; a later reindex makes again what it needs.
    """
    from .search import embeddings, onnx_encoder

    root = onnx_encoder.cache_root()
    if action == "prune":
        removed, freed = embeddings.prune_export_cache(keep, everything)
        if as_json:
            emit_json({"cache": str(root), "removed": removed, "bytes_freed": freed})
            return
        for path in removed:
            click.echo(f"removed {path}")
        click.echo(f"freed {freed / 1e6:.1f} MB in {root}")
        return
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    sizes = {p.name: onnx_encoder.size(p) for p in folders}
    if as_json:
        emit_json({"cache": str(root), "exports": sizes, "bytes": sum(sizes.values())})
        return
    for name, size in sizes.items():
        click.echo(f"{size / 1e6:8.1f} MB  {name}")
    click.echo(f"{sum(sizes.values()) / 1e6:8.1f} MB  in {root}")


EVAL_KEYS = ["source", "mode", "queries", "R@1", "R@5", "R@10", "nDCG@10", "MRR@10"]
EVAL_EXTRA = (
    "pooled",
    "lenient",
    "multi_tool",
    "learned_from",
    "abstain_own",
    "abstain_foreign",
    "refused",
    "names_mapped",
    "schemas_repaired",
)


@cli.command(name="eval")
@click.argument("bench_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--source", "sources", multiple=True, help="Only this source (repeatable).")
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(SEARCH_MODES),
    help="Search mode to score (repeatable). Default: bm25, embedding, hybrid.",
)
@click.option("--pooled", is_flag=True, help="Search every source's queries against all tools.")
@click.option(
    "--max-queries",
    type=click.IntRange(min=1),
    help="Score a seeded sample of queries per source.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the samples.")
@click.option(
    "--learn-split",
    help="Replay the queries of this split as usage, reindex, score the other queries.",
)
@click.option(
    "--learn-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Replay a seeded share of each source's queries as usage; score the rest.",
)
@click.option(
    "--abstention",
    is_flag=True,
    help="Also count 'nothing fits' in each source's own catalog and in one without its tools.",
)
@click.option(
    "--vector-cache",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of tool vectors to reuse across runs (created if missing).",
)
@click.option(
    "--baseline",
    is_flag=True,
    help="Also score the plain baseline on the same queries: rank-bm25 + base MiniLM fused "
    "by reciprocal rank (rrf-baseline), and base MiniLM alone (minilm-baseline).",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@json_option
def eval_(
    bench_dir: Path,
    sources: tuple[str, ...],
    modes: tuple[str, ...],
    pooled: bool,
    max_queries: int | None,
    seed: int,
    learn_split: str | None,
    learn_fraction: float | None,
    abstention: bool,
    vector_cache: Path | None,
    baseline: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Measure retrieval quality on tool-retrieval benchmarks (the ../shared/bench format).

    Registers each source's tools into a temporary catalog and scores Recall@1/5/10,
    nDCG@10 and MRR@10 of every query, per source and mode, through the public search API.
    Progress goes to stderr; each source's rows are printed as soon as they are computed.
    """
    from .evaluate import DEFAULT_MODES, evaluate, summary

    started = time.monotonic()

    def progress(message: str) -> None:
        if not quiet:
            click.echo(f"[{time.monotonic() - started:5.0f}s] {message}", err=True)

    header = [False]
    done: list[dict[str, Any]] = []

    def json_rows() -> dict[str, Any]:
        results = {
            "results": [
                {**{k: r[k] for k in EVAL_KEYS}, **{k: r[k] for k in EVAL_EXTRA if k in r}}
                for r in done
            ]
        }
        return {**results, "mean": summary(done)} if baseline else results

    def print_row(r: dict[str, Any]) -> None:
        done.append(r)
        if as_json:  # the JSON comes at the end; each row is announced as it is computed
            learned = f", learned from {r['learned_from']} uses" if r.get("learned_from") else ""
            progress(
                f"{r['source']} {r['mode']}: R@5 {r['R@5']:.3f}, nDCG@10 {r['nDCG@10']:.3f} "
                f"over {r['queries']} queries{learned}"
            )
            return
        if not header[0]:
            header[0] = True
            click.echo(
                f"{'source':<12} {'mode':<15} {'queries':>7}  R@1   R@5   R@10  nDCG@10 MRR@10"
                "  multi-tool R@5 (n)"
            )
        multi = r["multi_tool"]
        multi_cell = f"  {multi['R@5']:.3f} ({multi['queries']})" if multi["queries"] else ""
        click.echo(
            f"{r['source']:<12} {r['mode']:<15} {r['queries']:>7}  {r['R@1']:.3f} {r['R@5']:.3f} "
            f"{r['R@10']:.3f} {r['nDCG@10']:.3f}   {r['MRR@10']:.3f}{multi_cell}"
        )
        if "lenient" in r:
            le = r["lenient"]
            click.echo(
                f"{'  lenient':<12} {'':<15} {'':>7}  {le['R@1']:.3f} {le['R@5']:.3f} "
                f"{le['R@10']:.3f} {le['nDCG@10']:.3f}   {le['MRR@10']:.3f}"
            )
        notes = []
        if r.get("learned_from"):
            notes.append(f"learned from {r['learned_from']} uses")
        if "abstain_own" in r:
            foreign = r["abstain_foreign"]
            notes.append(
                f"nothing fits: own {r['abstain_own']:.2f}, "
                f"foreign {'-' if foreign is None else f'{foreign:.2f}'}"
            )
        if r["names_mapped"] or r["schemas_repaired"]:
            notes.append(
                f"{r['names_mapped']} names mapped, {r['schemas_repaired']} schemas repaired"
            )
        if r.get("refused"):
            notes.append(f"{r['refused']} queries refused by the mode")
        if notes:
            click.echo(f"{'':<12} {'; '.join(notes)}")

    import signal
    import threading

    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")  # so a killed run still prints its JSON

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main_thread else None
    try:
        evaluate(
            bench_dir,
            sources=sources,
            modes=modes or DEFAULT_MODES,
            pooled=pooled,
            max_queries=max_queries,
            seed=seed,
            learn_split=learn_split,
            learn_fraction=learn_fraction,
            abstention=abstention,
            vector_cache=vector_cache,
            baseline=baseline,
            progress=progress,
            on_row=print_row,
        )
    except BaseException:
        if as_json and done:  # what was computed is not lost
            emit_json({**json_rows(), "complete": False})
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if as_json:
        emit_json(json_rows())
    elif baseline and done:
        click.echo(f"\nmean over sources {'':<6} R@5   nDCG@10  vs rrf-baseline (R@5, nDCG@10)")
        for line in summary(done):
            margin = line.get("vs_rrf_baseline")
            learned = " (learned)" if line.get("learned") else ""
            click.echo(
                f"{line['mode'] + learned:<24} {line['R@5']:.3f} {line['nDCG@10']:.3f}"
                + (f"    {margin['R@5']:+.3f} {margin['nDCG@10']:+.3f}" if margin else "")
            )


_LEAVE_AT_ONCE: list[bool] = []
# Set by main(): this process runs one command and exits (not a caller's process that runs
# ``cli.main`` or a test runner, whose objects must stay collectable).
_OWN_PROCESS = False


def main() -> None:
    """Console entry point. After a `call` whose tool is still running in a thread (timed
    out, unstoppable), the process leaves at once instead of waiting for it at exit."""
    global _OWN_PROCESS
    _OWN_PROCESS = True
    # onnxruntime (1.32 here) records telemetry events in a SQLite store in the user's cache
    # ($XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime), with four fsyncs and a thread
    # flushing it at exit: in a one-shot search, ~5 ms of CPU and tens of ms of wall time,
    # more on a busy disk (docs/benchmarks.md "Cold one-shot search"). The toolcat process
    # turns it off unless its user set the variable; a program that imports toolcat decides
    # for itself.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from .importpath import prefer_current_directory

    prefer_current_directory()  # modules beside you are found, as `python -m` finds them
    try:
        cli.main(prog_name="toolcat")
    except SystemExit as e:
        if _LEAVE_AT_ONCE:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.code if isinstance(e.code, int) else 1)
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
