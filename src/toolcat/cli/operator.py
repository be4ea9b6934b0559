"""The operator's commands: serve the catalog over MCP, measure search quality (``eval``),
and look after usage records and the encoder cache."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..catalog import SEARCH_MODES
from ..errors import ServeError
from ..policy.rules import Policy
from ..server.loopback import is_loopback

if TYPE_CHECKING:
    from ..store.replica import Follower
from .options import check_policy, json_option, open_catalog, tag_options
from .output import echo, emit_json
from .text import PROCESS, one_line, plural


def first_revision(ctx: click.Context, source: str, wait: float) -> Follower:
    """A replica's follower, once its file holds a revision: a restarted replica serves
    its last one at once (and catches up while serving); a fresh one waits for its first,
    at most ``wait`` seconds."""
    import time

    from ..errors import CatalogError
    from ..store.connection import default_path
    from ..store.replica import Follower

    db = ctx.find_root().params.get("db")
    follower = Follower(Path(db) if db else default_path(), source, follow=True)
    if follower.serving:
        return follower
    said = None
    deadline = time.monotonic() + wait
    while not follower.sync():
        error = follower.state.get("error")
        if time.monotonic() > deadline:
            raise CatalogError(f"no first revision from {follower.primary} in {wait:g} s: {error}")
        if error != said:
            echo(f"waiting for a first revision: {error}", err=True)
            said = error
        time.sleep(1.0)
    return follower


@click.command()
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP, not stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="HTTP: port (0: any free one; the one bound is printed).",
)
@click.option(
    "--token",
    envvar="TOOLCAT_TOKEN",
    help="HTTP: require 'Authorization: Bearer TOKEN'. Prefer the env TOOLCAT_TOKEN: a "
    "command line is visible to every user in `ps`.",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="HTTP: serve an address other than loopback without --token/--tokens (anyone who "
    "reaches it can call every tool in scope).",
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
    "--metrics/--no-metrics",
    default=None,
    help="HTTP: Prometheus metrics at /metrics, behind the tokens (needs toolcat[metrics]). "
    "Default: on when prometheus-client is installed.",
)
@click.option(
    "--metrics-public",
    is_flag=True,
    help="HTTP: serve /metrics without a token (a scraper on a trusted network).",
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
    no_auth: bool,
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
    metrics: bool | None,
    metrics_public: bool,
    replica_of: str | None,
    replica_wait: float,
) -> None:
    """Serve the catalog over MCP: list mode as tools/list, plus search_tools and call_tool.

    stdio by default (for clients that start toolcat); --http serves streamable HTTP at
    http://HOST:PORT/mcp, on loopback unless --host says otherwise (then a token is
    required: TOOLCAT_TOKEN or --tokens, or an explicit --no-auth). Both MCP eras are
    served: 2026-07-28 (stateless) and 2025-11-25 sessions. --toolkit, the tag options,
    --deny and --allow bound what clients can list, search and call. --replica-of URL makes
    --db a read-only copy of a primary that Litestream replicates to URL: it follows each
    new revision, refuses writes, and reports its lag (toolcat status, GET /healthz).
    """
    from ..remote.mcp import require_sdk

    require_sdk()
    import anyio

    from ..server.mcp import CatalogServer, ServeOptions, serve_stdio, settle_heap
    from ..server.tokens import Tokens, load_tokens

    if tokens_file and not use_http:
        raise click.UsageError("--tokens protects --http; stdio needs no token")
    if no_auth and not use_http:
        raise click.UsageError("--no-auth goes with --http; stdio needs no token")
    metrics = serve_metrics(use_http, metrics, metrics_public)
    if token is not None and tokens_file:
        if ctx.get_parameter_source("token") == click.core.ParameterSource.ENVIRONMENT:
            token = None  # the file names every identity; TOOLCAT_TOKEN is not one of them
        else:
            raise click.UsageError("give --token or --tokens, not both")
    if token is None and tokens_file is None and os.environ.get("TOOLCAT_TOKEN") == "":
        token = ""  # click reads an empty variable as unset: here it is a mistake to report
    if use_http:
        check_authentication(host, token, tokens_file, no_auth)
    tokens = load_tokens(tokens_file) if tokens_file else Tokens.single(token) if token else None
    if replica_of:  # SIGTERM unwinds (stopping Litestream's children) until uvicorn takes it
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    follower = first_revision(ctx, replica_of, replica_wait) if replica_of else None
    restarted = follower is not None and follower.restarted
    if follower is not None:
        ctx.call_on_close(follower.close)  # its Litestream child stops with it
    catalog = open_catalog(ctx)
    # A bad filter fails now, not per client.
    catalog.list(tags=tags, any_tags=any_tags, exclude_tags=exclude_tags, toolkit=toolkit, limit=1)
    policy = Policy.of(allow=serve_allow, deny=serve_deny)
    check_policy(catalog, policy, "serve ")
    for principal in tokens.principals() if tokens else ():
        check_policy(catalog, principal.scope.policy, f"principal {principal.name!r}: ")
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
            policy=policy,
            per_caller=tokens_file is not None,
            access_log=use_http if access_log is None else access_log,
            settle_heap=PROCESS.own,
            yield_to_loop=PROCESS.own,
        ),
        follower=follower,
    )
    if follower is not None:
        if not restarted:  # a fresh replica listens once it can answer its revision at speed
            server.prepare(server.watcher.revision)
        # A restarted one answers from its last copy at once: its watcher's first look checks
        # that copy, catches up and warms the readers off the request path.
        follower.look()  # how fresh the copy is now, not when the last process looked
    else:  # the matrix, the index the last write saved: the first query waits for neither
        catalog.warm(mode)
    if PROCESS.own and (follower is None or restarted):  # ``prepare`` settled a fresh one
        settle_heap()
    if not use_http:
        anyio.run(serve_stdio, server)
        return
    from ..server.http import listening_socket, serve_http

    sock = listening_socket(host, port)  # a busy port fails here, before the announcement
    port = sock.getsockname()[1]  # --port 0: the one the system picked
    shown = f"[{host}]" if ":" in host else host
    echo(f"serving MCP at http://{shown}:{port}/mcp", err=True)
    serve_http(
        server,
        host=host,
        port=port,
        tokens=tokens,
        sock=sock,
        metrics=metrics,
        metrics_public=metrics_public,
    )


def serve_metrics(use_http: bool, asked: bool | None, public: bool) -> bool:
    """Whether to serve /metrics: as asked (the extra must be there), else when installed."""
    if (asked is not None or public) and not use_http:
        raise click.UsageError("--metrics and --metrics-public are for --http")
    if public and asked is False:
        raise click.UsageError("--metrics-public serves /metrics: not with --no-metrics")
    if not use_http or asked is False:
        return False
    from ..server.metrics import require_prometheus

    if asked or public:
        require_prometheus()  # a missing extra is an error naming it
        return True
    try:
        require_prometheus()
    except ServeError:
        return False
    return True


def check_authentication(
    host: str, token: str | None, tokens_file: Path | None, no_auth: bool
) -> None:
    """Refuse to serve HTTP without authentication by accident: an empty token (``--token
    "$T"`` with T unset) is an error, and an address other than loopback needs a token or
    an explicit ``--no-auth`` (which then warns, once)."""
    if token is not None and not token.strip():
        raise click.BadParameter(
            "the token is empty (an unset variable?); give a token, or leave --token and "
            "TOOLCAT_TOKEN out to serve loopback without one",
            param_hint="--token / TOOLCAT_TOKEN",
        )
    authenticated = bool(token) or tokens_file is not None
    if no_auth and authenticated:
        raise click.UsageError("--no-auth contradicts --token/--tokens/TOOLCAT_TOKEN")
    if authenticated or is_loopback(host):
        return
    if not no_auth:
        raise click.UsageError(
            f"--host {host} is reachable from other machines, and no token protects it: set "
            "TOOLCAT_TOKEN (or --tokens FILE), or say --no-auth to serve it open"
        )
    echo(
        f"warning: serving {host} with no authentication (--no-auth): anyone who reaches it "
        "can list, search and call every tool in scope",
        err=True,
    )


@click.command()
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
        echo(f"cleared {plural(removed, 'use')}; run `toolcat reindex` to unlearn them")
        return
    if action in ("on", "off"):
        catalog.learning = action == "on"
        echo(f"learning from use is {action}; run `toolcat reindex` to apply it")
        return
    uses = catalog.usage(toolkit)
    if as_json:
        emit_json({"learning": catalog.learning, "uses": uses[:limit], "total": len(uses)})
        return
    echo(f"learning from use: {'on' if catalog.learning else 'off'}, {plural(len(uses), 'use')}")
    for use in uses[:limit]:
        who = use["principal"] or "(catalog)"
        echo(f"{use['recorded_at']}  {who:<12} {use['tool']:<36} {one_line(use['query'], 60)}")


@click.command()
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
    from ..search import embeddings
    from ..search.encoders.export import cache_root
    from ..search.encoders.onnx import size as disk_size

    root = cache_root()
    if action == "prune":
        removed, freed = embeddings.prune_export_cache(keep, everything)
        if as_json:
            emit_json({"cache": str(root), "removed": removed, "bytes_freed": freed})
            return
        for path in removed:
            echo(f"removed {path}")
        echo(f"freed {freed / 1e6:.1f} MB in {root}")
        return
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    sizes = {p.name: disk_size(p) for p in folders}
    if as_json:
        emit_json({"cache": str(root), "exports": sizes, "bytes": sum(sizes.values())})
        return
    for name, size in sizes.items():
        echo(f"{size / 1e6:8.1f} MB  {name}")
    echo(f"{sum(sizes.values()) / 1e6:8.1f} MB  in {root}")


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


MARGIN_COLUMNS = (
    ("hybrid", "default"),
    ("bm25", "bm25"),
    ("embedding", "embedding"),
    ("rrf-baseline", "rrf-baseline"),
    ("minilm-baseline", "minilm-base"),
    ("vs_rrf", "default-rrf"),
    ("vs_best_single", "default-best"),
    ("embedding_vs_minilm", "emb-minilm"),
)


def margin_table(lines: list[dict[str, Any]]) -> list[str]:
    """``quality.evaluate.margins`` as text: one line per source and a mean line, each cell
    R@5/nDCG@10; the margins signed ("default-best": hybrid minus the better of bm25 and
    embedding)."""
    if not lines:
        return []
    where = "pooled catalog" if lines[0]["pooled"] else "own catalogs"
    out = [
        f"per source, {where} (R@5/nDCG@10)",
        f"{'source':<16}" + "".join(f"{title:>14}" for _, title in MARGIN_COLUMNS),
    ]
    for line in lines:
        cells = []
        for key, _ in MARGIN_COLUMNS:
            value = line.get(key)
            if value is None:
                cells.append(f"{'-':>14}")
            elif key.startswith(("vs_", "embedding_vs")):
                cells.append(f"{value['R@5']:+.3f}/{value['nDCG@10']:+.3f}".rjust(14))
            else:
                cells.append(f"{value['R@5']:.3f}/{value['nDCG@10']:.3f}".rjust(14))
        label = line["source"] + (" (learned)" if line.get("learned") else "")
        out.append(f"{label[:16]:<16}" + "".join(cells))
    return out


@click.command(name="eval")
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
@click.option(
    "--save",
    is_flag=True,
    help="Keep the result in the catalog (--db) as its last eval, for the web console's "
    "quality page; the catalog's embedding model is the one evaluated.",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@click.pass_context
def eval_(
    ctx: click.Context,
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
    save: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Measure retrieval quality on tool-retrieval benchmarks (the ../shared/bench format).

    Registers each source's tools into a temporary catalog and scores Recall@1/5/10,
    nDCG@10 and MRR@10 of every query, per source and mode, through the public search API.
    Progress goes to stderr; each source's rows are printed as soon as they are computed.
    """
    from ..quality import saved
    from ..quality.evaluate import DEFAULT_MODES, evaluate, margins, summary

    started = time.monotonic()
    target = open_catalog(ctx) if save else None
    model = saved.target_model(target) if target is not None else None

    def progress(message: str) -> None:
        if not quiet:
            echo(f"[{time.monotonic() - started:5.0f}s] {message}", err=True)

    header = [False]
    done: list[dict[str, Any]] = []

    def json_rows() -> dict[str, Any]:
        results = {
            "results": [
                {**{k: r[k] for k in EVAL_KEYS}, **{k: r[k] for k in EVAL_EXTRA if k in r}}
                for r in done
            ]
        }
        if not baseline:
            return results
        return {**results, "mean": summary(done), "margins": margins(done)}

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
            echo(
                f"{'source':<12} {'mode':<15} {'queries':>7}  R@1   R@5   R@10  nDCG@10 MRR@10"
                "  multi-tool R@5 (n)"
            )
        multi = r["multi_tool"]
        multi_cell = f"  {multi['R@5']:.3f} ({multi['queries']})" if multi["queries"] else ""
        echo(
            f"{r['source']:<12} {r['mode']:<15} {r['queries']:>7}  {r['R@1']:.3f} {r['R@5']:.3f} "
            f"{r['R@10']:.3f} {r['nDCG@10']:.3f}   {r['MRR@10']:.3f}{multi_cell}"
        )
        if "lenient" in r:
            le = r["lenient"]
            echo(
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
            echo(f"{'':<12} {'; '.join(notes)}")

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
            embedding_model=model,
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
        echo()
        echo(f"mean over sources {'':<6} R@5   nDCG@10  vs rrf-baseline (R@5, nDCG@10)")
        for line in summary(done):
            margin = line.get("vs_rrf_baseline")
            learned = " (learned)" if line.get("learned") else ""
            echo(
                f"{line['mode'] + learned:<24} {line['R@5']:.3f} {line['nDCG@10']:.3f}"
                + (f"    {margin['R@5']:+.3f} {margin['nDCG@10']:+.3f}" if margin else "")
            )
        echo()
        for text in margin_table(margins(done)):
            echo(text)
    if target is not None and model is not None:  # after the output: a refusal loses nothing
        kept = saved.save(target, done, model=model)
        progress(f"saved as the last eval of {str(target.path)!r} (revision {kept.revision})")


COMMANDS = [serve, usage, cache, eval_]
