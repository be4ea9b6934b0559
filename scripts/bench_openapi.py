"""Benchmark the OpenAPI import: registering the TMDB document, and calls forwarded to a local
API beside the same request made directly with httpx.

- register: ``Catalog.register_openapi`` of ``tmdb_oas.json`` (54 operations) into a fresh
  catalog, median of ``--runs``;
- first call: in a fresh process, the first ``Catalog.call`` of an imported GET operation
  (httpx import, client, connection) beside the first ``httpx.Client().get`` of the same URL in
  another fresh process, median of ``--runs`` processes each;
- warm call: p50 of ``--calls`` calls of each (and of the forwarder alone, without the
  runtime's validation and worker thread), interleaved in one process, against the test API
  (``tests/fixtures/openapi_app.py``) served by uvicorn in a child process on loopback.

    python scripts/bench_openapi.py [--shared ../shared] [--runs 5] [--calls 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.fixtures.openapi_app import DOCUMENT  # noqa: E402
from tests.helpers import free_port  # noqa: E402

from toolcat import Catalog  # noqa: E402

FIRST_TOOLCAT = """
import sys, time, json
sys.path.insert(0, {src!r})
from toolcat import Catalog
catalog = Catalog({db!r})
catalog.get("text")
start = time.perf_counter()
result = catalog.call("text")
print(json.dumps(time.perf_counter() - start))
assert result.data == "just text", result
"""
FIRST_HTTPX = """
import time, json
start = time.perf_counter()
import httpx
response = httpx.Client().get({url!r})
print(json.dumps(time.perf_counter() - start))
assert response.text == "just text"
"""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def fresh(code: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return float(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parents[1] / "shared")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import httpx

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmdb = args.shared / "openapi" / "tmdb_oas.json"
        times = []
        for i in range(args.runs):
            with Catalog(Path(tmp) / f"tmdb{i}.db") as catalog:
                start = time.perf_counter()
                catalog.register_openapi(tmdb, toolkit="tmdb")
                times.append(time.perf_counter() - start)
        figures["register_tmdb_ms"] = round(statistics.median(times) * 1000, 1)
        figures["register_tmdb_per_op_ms"] = round(figures["register_tmdb_ms"] / 54, 2)

        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.fixtures.openapi_app:app",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{base}/api/text", timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            db = str(Path(tmp) / "api.db")
            with Catalog(db) as catalog:
                catalog.register_openapi(DOCUMENT, toolkit="pets", base_url=f"{base}/api")
            first_ours = [
                fresh(FIRST_TOOLCAT.format(src=str(ROOT / "src"), db=db)) for _ in range(args.runs)
            ]
            first_plain = [
                fresh(FIRST_HTTPX.format(url=f"{base}/api/text")) for _ in range(args.runs)
            ]
            figures["first_call_ms"] = round(statistics.median(first_ours) * 1000, 2)
            figures["first_httpx_ms"] = round(statistics.median(first_plain) * 1000, 2)
            figures["first_ratio"] = round(figures["first_call_ms"] / figures["first_httpx_ms"], 2)

            ours: list[float] = []
            plain: list[float] = []
            forwarder: list[float] = []
            with Catalog(db) as catalog, httpx.Client() as client:
                catalog.call("text")
                client.get(f"{base}/api/text")
                forward = catalog.load("text")  # the implementation alone, no runtime
                for _ in range(args.calls):  # interleaved: both see the same server state
                    start = time.perf_counter()
                    assert catalog.call("text").data == "just text"
                    ours.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    assert client.get(f"{base}/api/text").text == "just text"
                    plain.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    forward()
                    forwarder.append(time.perf_counter() - start)
            figures["warm_call_p50_ms"] = round(percentile(ours, 0.5) * 1000, 3)
            figures["warm_httpx_p50_ms"] = round(percentile(plain, 0.5) * 1000, 3)
            figures["warm_forwarder_p50_ms"] = round(percentile(forwarder, 0.5) * 1000, 3)
            figures["warm_ratio"] = round(
                figures["warm_call_p50_ms"] / figures["warm_httpx_p50_ms"], 2
            )
            figures["warm_overhead_p50_ms"] = round(
                figures["warm_call_p50_ms"] - figures["warm_httpx_p50_ms"], 3
            )
        finally:
            server.terminate()
            server.wait(10)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:<26} {value}")


if __name__ == "__main__":
    main()
