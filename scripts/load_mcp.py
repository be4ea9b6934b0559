"""toolcat's MCP server over HTTP beside a bare MCP SDK server (scripts/bare_mcp_server.py),
same transport, same run: what the serving face adds to the SDK's own floor.

The catalog is scale-shaped (``bench_scale.generate``: real benchmark tools, one always-on
toolkit, every other deferred) plus the test fixtures (``add``, ``sleeps``); ``--db`` keeps
it between runs. Both servers run in subprocesses on loopback, 2026-07-28 (stateless) by
default; the clients are the SDK's ``Client`` in this process.

0. **first tools/list**: the first list a fresh server answers, then kept ones.
1. **latency** (one client per server, request by request, the two servers interleaved):
   ``search_tools`` (each query asked once) beside ``Catalog.search`` of the same query in
   this process right before it (k=5, BM25, the caller the server ranks for: interleaved,
   so load drift hits both), ``tools/list`` and a trivial call on both servers.
2. **throughput** (``--clients`` concurrent clients): rounds alternating bare / toolcat,
   per request kind; requests/s, p50/p99 and each server's CPU time per request (from
   ``/proc``: on a shared machine the server's own work, whatever the scheduler does).
3. **beside slow calls** (``--slow``): the mixed load while clients keep a tool sleeping 2 s.

``measure`` is the whole comparison on a given catalog: ``bench_scale.py --mcp`` runs it on
the generated 10k/100k/1M catalogs (which have no ``add``: see ``TrivialCall``).

    python scripts/load_mcp.py [--tools 10000] [--db PATH] [--clients 16] [--requests 40]
        [--rounds 3] [--queries 200] [--slow 2] [--era 2026-07-28|legacy] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from tests.helpers import SAMPLE_TOOLKITS, free_port, wait_for_port  # noqa: E402

from bench_scale import SEED, queries, register_generated  # noqa: E402
from toolcat import Catalog  # noqa: E402
from toolcat.errors import ToolcatError  # noqa: E402
from toolcat.registry.python import toolkit_from_module  # noqa: E402
from toolcat.server.mcp import ANONYMOUS  # noqa: E402

MAX_CLIENTS = 64
MAX_REQUESTS = 1000
K = 5
Request = Callable[[Any, int], Awaitable[Any]]
TRIVIAL = "trivial call"
NEW_SEARCH = "search_tools new"


@dataclass(frozen=True)
class TrivialCall:
    """The trivial ``tools/call`` asked of toolcat (the bare server's is always ``add``):
    the fixtures' ``add``, or, in a catalog without it (``bench_scale``'s generated ones,
    which no benchmark may write to), a catalog tool that has no implementation, called
    with no arguments: the lookup, scope, policy and argument checks, then an error result
    (``expect_error``) where ``add`` would run."""

    name: str
    arguments: Callable[[int], dict[str, Any]]
    expect_error: bool = False


ADD = TrivialCall("add", lambda i: {"a": i})


def trivial_call(catalog: Catalog) -> TrivialCall:
    """``add`` when ``catalog`` has it, else its first always-on tool whose schema requires
    no argument (else its first always-on tool)."""
    try:
        catalog.get("add")
        return ADD
    except ToolcatError:
        pass
    listed = catalog.list(limit=200).tools
    if not listed:
        raise SystemExit(f"{catalog.path}: no always-on tool to call")
    tool = next((t for t in listed if not t.parameters.get("required")), listed[0])
    return TrivialCall(tool.id, lambda i: {}, expect_error=True)


def build(db: Path, size: int) -> None:
    """The scale-shaped catalog of ``size`` tools plus the fixtures, unless ``db`` has it."""
    if db.exists():
        return
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
        register_generated(catalog, size)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def figures(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples) * 1000, 3),
        "p99_ms": round(pct(samples, 0.99), 3),
    }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, ended threads included (in 10 ms ticks:
    for rounds of hundreds of requests)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of the live threads of process ``pid``, to the nanosecond (schedstat), for
    one request (a thread that ends meanwhile takes its time along: use medians)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e9


class Served:
    """A server subprocess and how to reach it."""

    def __init__(self, name: str, argv: list[str], src: Path = ROOT / "src") -> None:
        self.name = name
        self.port = free_port()
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [*argv, "--port", str(self.port)],
            env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process, seconds=600)
        self.listening_s = round(time.perf_counter() - started, 2)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def process_cpu(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def client(url: str, mode: str) -> Any:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(60))
    return http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None)  # type: ignore[arg-type]


async def _listed(c: Any, i: int) -> Any:
    return await c.list_tools()


def calling(call: TrivialCall) -> Request:
    async def call_it(c: Any, i: int) -> Any:
        return await c.call_tool(call.name, call.arguments(i))

    return call_it


def toolcat_requests(
    qs: list[str], call: TrivialCall = ADD, fresh: Sequence[str] = ()
) -> dict[str, Request]:
    """Each request kind of toolcat's: ``search_tools`` cycles through ``qs`` (so the
    catalog's kept answers serve repeats), ``search_tools new`` takes the next of
    ``fresh``, each asked once."""

    async def search(c: Any, i: int) -> Any:
        return await c.call_tool("search_tools", {"query": qs[i % len(qs)], "k": K})

    unasked = iter(fresh)

    async def search_new(c: Any, i: int) -> Any:
        return await c.call_tool("search_tools", {"query": next(unasked), "k": K})

    trivial = calling(call)

    async def mix(c: Any, i: int) -> Any:
        return await (search, _listed, trivial)[i % 3](c, i // 3)

    return {
        "search_tools": search,
        NEW_SEARCH: search_new,
        "tools/list": _listed,
        TRIVIAL: trivial,
        "mix": mix,
    }


BARE: dict[str, Request] = {TRIVIAL: calling(ADD), "tools/list": _listed}


async def first_lists(toolcat: Served, bare: Served, mode: str, kept: int = 5) -> dict[str, Any]:
    """The first ``tools/list`` a fresh server answers (it reads and builds the list: the
    first request of the process, too), then ``kept`` more (answers kept per revision), wall
    at the client and the server's CPU; the bare server's beside."""
    out: dict[str, Any] = {}
    for served in (toolcat, bare):
        http, c = client(served.url, mode)
        wall: list[float] = []
        cpu: list[float] = []
        async with http, c as session:
            for _ in range(1 + kept):
                used, started = served.cpu(), time.perf_counter()
                result = await session.list_tools()
                wall.append(time.perf_counter() - started)
                cpu.append(served.cpu() - used)
        out[served.name] = {
            "listed": len(result.tools),
            "first_ms": round(wall[0] * 1000, 2),
            "first_cpu_ms": round(cpu[0] * 1000, 2),
            "kept": figures(wall[1:]) | {"cpu_p50_ms": figures(cpu[1:])["p50_ms"]},
        }
    return out


async def latency(
    toolcat: Served,
    bare: Served,
    mode: str,
    qs: list[str],
    warm: list[str],
    settle: float,
    call: TrivialCall = ADD,
    local: Catalog | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each request kind on each server, one at a time, the servers interleaved: wall
    time at the client and the server's CPU time for the request; with ``local``, each
    query also asked of ``Catalog.search`` in this process right before (its thread's CPU),
    as the server asks it (k, BM25, the anonymous caller's learned uses)."""
    samples: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    t_http, t_client = client(toolcat.url, mode)
    b_http, b_client = client(bare.url, mode)
    async with t_http, t_client as tc, b_http, b_client as bc:
        for i, query in enumerate(warm):  # the server's BM25 index and first-query costs
            await tc.call_tool("search_tools", {"query": query, "k": K})
            await tc.list_tools()
            await tc.call_tool(call.name, call.arguments(i))
            await bc.call_tool("add", {"a": i})
            await bc.list_tools()
            if i == len(warm) // 2:
                await anyio.sleep(settle)  # the BM25 index builds off the request path
        for i, query in enumerate(qs):
            if local is not None:
                used, started = time.thread_time(), time.perf_counter()
                local.search(query, k=K, mode="bm25", principal=ANONYMOUS)
                samples.setdefault("python search", []).append(time.perf_counter() - started)
                cpu.setdefault("python search", []).append(time.thread_time() - used)
            steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                (
                    "toolcat search_tools",
                    partial(tc.call_tool, "search_tools", {"query": query, "k": K}),
                ),
                (f"bare {TRIVIAL}", partial(bc.call_tool, "add", {"a": i})),
                ("toolcat tools/list", tc.list_tools),
                ("bare tools/list", bc.list_tools),
                (f"toolcat {TRIVIAL}", partial(tc.call_tool, call.name, call.arguments(i))),
            ]
            for name, step in steps:
                served = toolcat if name.startswith("toolcat") else bare
                used, started = served.cpu(), time.perf_counter()
                result = await step()
                samples.setdefault(name, []).append(time.perf_counter() - started)
                cpu.setdefault(name, []).append(served.cpu() - used)
                expected = call.expect_error and name == f"toolcat {TRIVIAL}"
                if getattr(result, "is_error", False) != expected:
                    raise RuntimeError(f"{name}: {result.content}")
    return samples, cpu


@contextlib.contextmanager
def warmed_catalog(db: Path, warm: list[str]) -> Iterator[Catalog]:
    """The catalog opened in this process, its BM25 index built, as the server's is."""
    with Catalog(db) as catalog:
        for query in warm:
            catalog.search(query, k=K, mode="bm25", principal=ANONYMOUS)
        catalog._search.postings.wait()
        yield catalog


async def load_round(
    served: Served, mode: str, request: Request, clients: int, requests: int
) -> dict[str, Any]:
    samples: list[float] = []
    errors: list[bool] = []

    async def one_client(index: int) -> None:
        http, c = client(served.url, mode)
        async with http, c as session:
            await request(session, index)  # connected before the clock starts
            ready.append(True)
            await go.wait()
            for i in range(requests):
                started = time.perf_counter()
                result = await request(session, index * requests + i)
                samples.append(time.perf_counter() - started)
                errors.append(bool(getattr(result, "is_error", False)))

    ready: list[bool] = []
    go = anyio.Event()
    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(one_client, index)
        while len(ready) < clients:
            await anyio.sleep(0.01)
        cpu, started = served.process_cpu(), time.perf_counter()
        go.set()
    took, cpu = time.perf_counter() - started, served.process_cpu() - cpu
    return {
        "requests": len(samples),
        "rps": round(len(samples) / took, 1),
        **figures(samples),
        "server_cpu_ms_per_request": round(cpu * 1000 / len(samples), 3),
        "errors": sum(errors),
    }


async def slow_loop(url: str, mode: str, stop: anyio.Event) -> None:
    http, c = client(url, mode)
    async with http, c as session:
        while not stop.is_set():
            await session.call_tool("call_tool", {"name": "sleeps", "arguments": {"seconds": 2}})


async def beside_slow(
    served: Served, mode: str, request: Request, clients: int, requests: int, slow: int
) -> dict[str, Any]:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for _ in range(slow):
            tg.start_soon(slow_loop, served.url, mode, stop)
        await anyio.sleep(0.5)
        result = await load_round(served, mode, request, clients, requests)
        stop.set()
    return result


def merged(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round of each figure (rounds alternate servers, so load hits both)."""
    row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    return row | {"requests": sum(r["requests"] for r in rounds), "rounds": len(rounds)}


def measure(
    db: Path,
    qs: list[str],
    warm: list[str],
    *,
    clients: int = 16,
    requests: int = 20,
    rounds: int = 3,
    era: str = "2026-07-28",
    kinds: Sequence[str] = (TRIVIAL, "search_tools"),
    slow: int = 0,
    settle: float = 2.0,
    src: Path = ROOT / "src",
    fresh: Sequence[str] = (),
) -> dict[str, Any]:
    """toolcat serving ``db`` over HTTP beside the bare SDK server, in one run: the first
    and kept ``tools/list``; ``search_tools`` of ``qs`` (after ``warm``) beside
    ``Catalog.search`` in this process; ``rounds`` rounds of ``clients`` concurrent clients
    per request kind in ``kinds``, alternating the servers; ``slow`` > 0: the mix beside
    clients calling a 2 s tool (the fixtures' ``sleeps``). ``fresh``: queries none of the
    others are, for ``search_tools new`` (each asked once: enough for every round's
    requests and each client's first, untimed one)."""
    if NEW_SEARCH in kinds and len(fresh) < rounds * clients * (requests + 1):
        raise ValueError(f"{NEW_SEARCH} needs {rounds * clients * (requests + 1)} queries")
    with Catalog(db) as catalog:
        call = trivial_call(catalog)
    command = [sys.executable, "-m", "toolcat.cli", "--db", str(db), "serve", "--http"]
    toolcat = Served("toolcat", [*command, "--host", "127.0.0.1", "--mode", "bm25"], src)
    bare = Served("bare", [sys.executable, str(ROOT / "scripts" / "bare_mcp_server.py")], src)
    report: dict[str, Any] = {
        "era": era,
        "clients": clients,
        "requests_each": requests,
        "trivial_call": call.name + (" (answers an error)" if call.expect_error else ""),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "listening_s": {"toolcat": toolcat.listening_s, "bare": bare.listening_s},
    }
    try:
        report["tools/list"] = anyio.run(first_lists, toolcat, bare, era)
        with warmed_catalog(db, warm) as local:
            wall, cpu = anyio.run(latency, toolcat, bare, era, qs, warm, settle, call, local)
        report["latency"] = lat = {
            name: figures(wall[name]) | {"cpu_p50_ms": figures(cpu[name])["p50_ms"]}
            for name in wall
        }
        search, python, floor = (
            lat["toolcat search_tools"],
            lat["python search"],
            lat[f"bare {TRIVIAL}"],
        )
        report["search_tools_vs_python"] = {
            "wall_p50_minus_python_ms": round(search["p50_ms"] - python["p50_ms"], 3),
            "server_cpu_p50_minus_python_ms": round(search["cpu_p50_ms"] - python["cpu_p50_ms"], 3),
            "wall_p50_over_sdk_floor_minus_python_ms": round(
                search["p50_ms"] - floor["p50_ms"] - python["p50_ms"], 3
            ),
            "server_cpu_p50_over_sdk_floor_minus_python_ms": round(
                search["cpu_p50_ms"] - floor["cpu_p50_ms"] - python["cpu_p50_ms"], 3
            ),
        }
        ours = toolcat_requests(qs, call, fresh)
        taken: dict[str, list[dict[str, Any]]] = {}
        for _ in range(rounds):
            for kind in kinds:
                if kind in BARE:
                    taken.setdefault(f"bare {kind}", []).append(
                        anyio.run(load_round, bare, era, BARE[kind], clients, requests)
                    )
                taken.setdefault(f"toolcat {kind}", []).append(
                    anyio.run(load_round, toolcat, era, ours[kind], clients, requests)
                )
        throughput = {name: merged(rs) for name, rs in taken.items()}
        bare_call = throughput[f"bare {TRIVIAL}"]
        for row in throughput.values():
            # Capacity: what the bare server's trivial call costs it over what this costs.
            row["capacity_vs_bare_call"] = round(
                bare_call["server_cpu_ms_per_request"] / row["server_cpu_ms_per_request"], 3
            )
            row["rps_vs_bare_call"] = round(row["rps"] / bare_call["rps"], 3)
        report["throughput"] = throughput
        if slow:
            report["beside_slow"] = anyio.run(
                beside_slow, toolcat, era, ours["mix"], clients, requests, slow
            )
    finally:
        toolcat.stop()
        bare.stop()
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return report


def print_report(report: dict[str, Any], asked: int, rounds: int) -> None:
    """``measure``'s report as tables."""
    for name, row in report["tools/list"].items():
        kept = row["kept"]
        print(
            f"tools/list, {name} ({row['listed']} tools): first {row['first_ms']} ms "
            f"(server CPU {row['first_cpu_ms']} ms), kept p50 {kept['p50_ms']} ms "
            f"(server CPU {kept['cpu_p50_ms']} ms)"
        )
    print(f"\nlatency, one client, {asked} requests each  p50 ms   p99 ms  CPU p50 ms")
    for name, row in report["latency"].items():
        print(f"  {name:<34}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}{row['cpu_p50_ms']:>12.3f}")
    for name, value in report["search_tools_vs_python"].items():
        print(f"  search_tools: {name:<50}{value:>9.3f}")
    print(
        f"\nthroughput, {report['clients']} clients x {report['requests_each']} requests, "
        f"median of {rounds} rounds (trivial call: {report['trivial_call']})"
    )
    print(
        f"  {'':<28}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'srv CPU ms/req':>16}"
        f"{'capacity':>10}{'req/s':>7}  (vs the bare call)"
    )
    for name, row in report["throughput"].items():
        print(
            f"  {name:<28}{row['rps']:>8.1f}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
            f"{row['server_cpu_ms_per_request']:>16.3f}{row['capacity_vs_bare_call']:>10.3f}"
            f"{row['rps_vs_bare_call']:>7.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--db", type=Path, help="catalog file to build once and keep")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=40, help="per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--slow", type=int, default=2)
    parser.add_argument("--era", choices=["2026-07-28", "legacy"], default="2026-07-28")
    parser.add_argument("--kinds", default=f"{TRIVIAL},search_tools,tools/list,mix")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds = [TRIVIAL if k.strip() == "call add" else k.strip() for k in args.kinds.split(",")]
    rng = random.Random(SEED)
    all_queries = queries(rng, args.queries + 50)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "load.db"
        started = time.perf_counter()
        build(db, args.tools)
        built_s = time.perf_counter() - started
        report = {"tools": args.tools, "catalog_build_s": round(built_s, 1)} | measure(
            db,
            all_queries[50:],
            all_queries[:50],
            clients=max(1, min(args.clients, MAX_CLIENTS)),
            requests=max(3, min(args.requests, MAX_REQUESTS)),
            rounds=args.rounds,
            era=args.era,
            kinds=[k for k in kinds if k],
            slow=args.slow,
            settle=2 + args.tools / 10_000,
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.tools:,} tools + fixtures, {args.era}, HTTP loopback; load "
        f"{report['load_before']} -> {report['load_after']}"
    )
    print_report(report, args.queries, args.rounds)
    if "beside_slow" in report:
        row = report["beside_slow"]
        print(
            f"\nmix beside {args.slow} clients calling a 2 s tool: {row['rps']} req/s, "
            f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms"
        )


if __name__ == "__main__":
    main()
