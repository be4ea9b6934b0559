"""The agent's commands: find tools (``list``, ``search``, ``show``), call one, export
definitions in an LLM API's format."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..catalog import DEFAULT_LIST_LIMIT, SEARCH_MODES
from ..errors import (
    ToolFailedError,
)
from ..export.formats import FORMATS
from ..policy.tags import TagFilter

if TYPE_CHECKING:
    from ..models import ToolEvent
from .options import json_option, open_catalog, tag_options
from .output import CALL_EXIT_CODES, echo, emit_json
from .text import PROCESS, json_text, list_lines, tool_line


@click.command(name="list")
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
    if PROCESS.own:  # nothing a list leaves needs finalising: main() skips the teardown
        PROCESS.leave_at_once = True
    if as_json:
        emit_json(page)
        return
    for line in list_lines(page):
        echo(line)


@click.command()
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
    collecting = PROCESS.own and gc.isenabled()
    if collecting:
        gc.disable()
    if PROCESS.own:
        # numpy's OpenBLAS starts a thread per core at import, and they spin: ~0.1 s of CPU
        # that one search (no BLAS call: the cosines are an einsum) never uses.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from ..search.embeddings import one_shot

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
    if PROCESS.own:
        # Nothing a search leaves needs finalising (its catalog is closed with the command's
        # context): the process leaves at once instead of tearing down the interpreter and
        # onnxruntime, ~10% of a one-shot search's CPU (docs/benchmarks.md "Cold one-shot
        # search").
        PROCESS.leave_at_once = True
    hits, warnings = result["hits"], result["warnings"]
    for warning in warnings:
        echo(f"warning: {warning}", err=True)
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
        echo(f"{hit['rank']:>3}. {hit['score']:8.3f} {hit['match']:<6}  {line}")
    if not hits:
        echo("no matching tools")
    elif no_match:
        echo("nothing fits: no tool matches this request well")


@click.command()
@click.argument("name")
@json_option
@click.pass_context
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show one tool: NAME, TOOLKIT.NAME, or either with @VERSION."""
    tool = open_catalog(ctx).get(name)
    if as_json:
        emit_json(tool.model_dump(mode="json"))
        return
    echo(f"{tool.id}  (toolkit {tool.toolkit} {tool.version})")
    echo(f"tags: {', '.join(tool.tags) or '-'}")
    echo(f"deferred: {'yes' if tool.defer_loading else 'no'}")
    if tool.deprecated:
        echo("deprecated: yes")
    if tool.implementation:
        echo(f"implementation: {tool.implementation}")
    echo("")
    echo(tool.description, lines=True)
    echo("")
    echo("parameters:")
    echo(json_text(tool.parameters, indent=2), lines=True)


@click.command()
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
    if save_artifacts is not None:  # checked before the tool runs, not after
        from ..runtime.artifacts import ready_folder

        try:
            ready_folder(save_artifacts)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--save-artifacts") from None
    catalog = open_catalog(ctx, isolation="process")
    show = None if as_json or not sys.stderr.isatty() else show_progress
    result = catalog.call(name, arguments, timeout=timeout, on_event=show)
    if show is None:  # warnings (a forwarded tool that changed, --on-change warn) still show
        for event in result.events:
            if event.kind == "log" and event.level in ("warning", "error"):
                echo(f"{event.level}: {event.message}", err=True)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    elif result.success:
        data = result.data
        echo(data if isinstance(data, str) else json_text(data, indent=2), lines=True)
        if result.truncated:
            echo("[truncated]", err=True)
    else:
        echo(f"error ({result.error_code}): {result.error}", err=True)
    saved = save_all(result.artifacts, save_artifacts) if save_artifacts else {}
    if not as_json:
        for event in result.artifacts:
            echo(artifact_line(event, saved.get(id(event))), err=True)
    if catalog.runtime.executor.threads.busy:  # a timed-out thread that cannot be stopped:
        PROCESS.leave_at_once = True  # main() exits without waiting for it
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
    echo(text.rstrip(), err=True)


def artifact_line(event: ToolEvent, saved: Path | None) -> str:
    """``artifact NAME (TYPE, SIZE): DESCRIPTION -> where it is``."""
    where = str(saved) if saved else event.uri or "in the result (--json, --save-artifacts)"
    about = f": {event.message}" if event.message else ""
    return f"artifact {event.name} ({event.mime_type}, {event.size or 0:,} bytes){about} -> {where}"


def save_all(events: list[ToolEvent], folder: Path) -> dict[int, Path]:
    """Write each artifact into ``folder`` under its safe name, never over a file."""
    from ..runtime.artifacts import safe_name

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
            echo(f"warning: artifact {event.name!r} not saved: {e}", err=True)
            continue
        saved[id(event)] = target
    return saved


@click.command()
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


COMMANDS = [list_, search, show, call, export]
