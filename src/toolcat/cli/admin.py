"""The admin's commands: create the catalog, register toolkits (manifests, modules, MCP
servers, OpenAPI documents), manage versions, check implementations, reindex, status."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..catalog import Catalog
from ..errors import (
    ImportFailedError,
)

if TYPE_CHECKING:
    pass
from .options import json_option, open_catalog
from .output import echo, emit_document, emit_json, rewrite_line
from .text import one_line, plural


@click.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create the catalog file (if missing) and print its path."""
    echo(str(open_catalog(ctx, create=True).path))


@click.command()
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
@click.option(
    "--no-index",
    is_flag=True,
    help="Do not save the search index now (by default it is saved before this returns, "
    "a few seconds per 100k tools): for scripts registering many toolkits one call at a "
    "time, all but the last. Without it, the first server builds it, answering from "
    "SQLite meanwhile.",
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
    no_index: bool,
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
    from ..registry.python import toolkit_from_module, toolkits_from_entry_points
    from ..remote.credentials import parse_assignments

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
        result = _writing(ctx, no_index).register_openapi(
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
        result = _writing(ctx, no_index).register_mcp(
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
    results = _writing(ctx, no_index).register(*sources, replace=replace)
    if as_json:
        emit_json({"results": [r.model_dump() for r in results]})
        return
    for r in results:
        echo(f"{r.status:<9} {r.toolkit} {r.version} ({plural(r.tools, 'tool')})")
    if results:
        echo(f"revision {results[-1].revision}")


def _writing(ctx: click.Context, no_index: bool) -> Catalog:
    """The catalog to write to; with ``no_index`` its writes leave the search index unsaved."""
    catalog = open_catalog(ctx, create=True)
    if no_index:
        ctx.with_resource(catalog.bulk(save_index=False))
    return catalog


def _warn_literal_secrets(headers: dict[str, str], env: dict[str, str]) -> None:
    """Warn (stderr) about secrets typed in full into an import's --header/--env."""
    from ..remote.credentials import literal_secrets

    for what in literal_secrets(headers, env):
        echo(
            f"warning: {what} is stored in the catalog as typed; write the secret as "
            "${ENV_VAR} to store only the reference",
            err=True,
        )


def _echo_import(result: Any, as_json: bool) -> None:
    """Print the registration of an imported toolkit (MCP server, OpenAPI document)."""
    if as_json:
        emit_json({"results": [result.model_dump()]})
        return
    echo(f"{result.status:<9} {result.toolkit} {result.version} ({plural(result.tools, 'tool')})")
    for kind, names in (result.changes or {}).items():
        if names and result.status != "unchanged":
            echo(f"  {kind}: {', '.join(names)}")
    echo(f"revision {result.revision}")


@click.command()
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
    from ..registry.python import manifest_text, toolkit_from_module

    text = manifest_text(
        toolkit_from_module(module, name=toolkit_name, version=toolkit_version), fmt
    )
    if output is None:
        emit_document(text)
    else:
        output.write_text(text, encoding="utf-8")
        echo(f"wrote {output}")


@click.command()
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
        echo(f"{v.version:<14} {state:<11} {plural(v.tools, 'tool'):>10}  {v.registered_at}")


@click.command()
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
        echo(f"no active toolkits in {catalog.path}; `toolcat register` adds some")
    for v in found:
        echo(
            f"{v.toolkit:<20} {v.version:<10} {plural(v.tools, 'tool'):>10}  "
            + one_line(v.description, 50)
        )


@click.command()
@click.argument("ref", metavar="TOOLKIT@VERSION")
@click.pass_context
def deprecate(ctx: click.Context, ref: str) -> None:
    """Deprecate one version; the newest version not deprecated becomes active.

    `toolcat activate TOOLKIT@VERSION` takes it back."""
    catalog = open_catalog(ctx)
    revision = catalog.deprecate(*_versioned(ref))
    echo(f"deprecated {ref}; {_active_now(catalog, ref)}; revision {revision}")


@click.command()
@click.argument("ref", metavar="TOOLKIT@VERSION")
@click.pass_context
def activate(ctx: click.Context, ref: str) -> None:
    """Take back the deprecation of one version: the newest version not deprecated becomes
    active again (this one, unless a newer one is in use)."""
    catalog = open_catalog(ctx)
    revision = catalog.activate(*_versioned(ref))
    echo(f"{ref} is not deprecated; {_active_now(catalog, ref)}; revision {revision}")


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


@click.command()
@click.argument("ref", metavar="TOOLKIT[@VERSION]")
@click.pass_context
def remove(ctx: click.Context, ref: str) -> None:
    """Remove one version of a toolkit, or (no @VERSION) all of its versions."""
    removed = open_catalog(ctx).remove(ref)
    echo(f"removed {ref} ({removed} version{'s' if removed != 1 else ''})")


@click.command()
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
            echo(f"{label} {r['id']}")
            for problem in r["problems"] + ([r["note"]] if r.get("note") else []):
                echo(f"     {problem}")
        summary = f"{len(report) - len(failed) - len(added)} ok, {len(failed)} failed"
        if added:
            summary += f", {len(added)} new on the server"
        echo(summary)
        if failed or added:
            moved = any(r.get("change") for r in report)
            if moved:
                echo(
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
            rewrite_line(line)
            self.pending = True
        else:
            echo(line, err=True)

    def finish(self) -> None:
        if self.pending:
            echo("", err=True)
            self.pending = False


@click.command()
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
        echo(f"{line}...", err=True)

    try:
        report = catalog.reindex(
            model=model, batch_size=batch_size, full=full, progress=progress, stage=stage
        )
    finally:
        progress.finish()
    if as_json:
        emit_json(report.model_dump())
        return
    echo(
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


def reindex_advice() -> str:
    """How to get vectors: reindex, once the embeddings extra is there."""
    from ..search.encoders.onnx import EMBEDDINGS_EXTRA, onnx_installed

    advice = "run `toolcat reindex`"
    return advice if onnx_installed() else f"{EMBEDDINGS_EXTRA}, then {advice}"


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show index coverage per search mode, the embedding model, the revision and what holds
    a process-isolated tool's processes."""
    from ..runtime.containment import MEANING, probe

    info = {**open_catalog(ctx).status(), "containment": probe()}
    if as_json:
        emit_json(info)
        return
    echo(f"catalog   {info['path']} (revision {info['revision']})")
    echo(f"toolkits  {info['toolkits']} active ({info['toolkit_versions']} versions)")
    echo(f"tools     {info['active_tools']} active")
    dim = info["embedding_dim"]
    indexed = f"dim {dim}" if dim is not None else f"not indexed yet: {reindex_advice()}"
    echo(f"model     {info['embedding_model']} ({indexed})")
    for mode, cov in info["coverage"].items():
        echo(f"{mode:<9} {cov['indexed']}/{cov['of']} indexed")
    echo(f"default   {info['default_mode']}")
    echo(f"processes {info['containment']}: {MEANING[info['containment']]}")
    replica = info.get("replica")
    if replica:
        primary_revision = replica["primary_revision"]
        known = (
            f"revision {primary_revision}"
            if primary_revision is not None
            else f"{replica['behind_transactions']} transactions ahead"
        )
        stale = replica["stale_seconds"]
        echo(f"replica   of {replica['primary']}")
        echo(f"          revision {replica['revision']}; primary: {known}")
        echo(
            f"          lag {replica['lag_seconds']:.1f} s; store last answered "
            + (f"{stale:.1f} s ago" if stale is not None else "never")
        )
        if replica["error"]:
            echo(f"          last error: {replica['error']}")


COMMANDS = [
    init,
    register,
    manifest,
    versions,
    toolkits,
    deprecate,
    activate,
    remove,
    check,
    reindex,
    status,
]
