"""A worker process for process isolation (``python -m toolcat.runtime.worker``).

The parent writes one request per line on the worker's stdin (JSON: ``implementation``,
``tool_id``, ``arguments``, ``max_result_bytes``) and reads JSON lines back on its stdout:
``{"event": {...}}`` for each report that passes the call's ``events.Gate``, then ``{"ok": data,
"truncated": bool}`` or ``{"error": message, "code": code}``. The worker imports each
implementation on its first call and keeps it, so later calls pay only the pipe.

Before anything else the worker contains what its tools will start (``containment``): in a
PID namespace of its own where the system allows, else as their subreaper (``reaper``). When
it is asked to exit, what they started dies with it; at a timeout the parent kills them all.

The protocol uses private copies of the standard streams: file descriptor 1 is pointed at
stderr and 0 at /dev/null before any tool runs, so a tool's ``print()`` (or a C library
writing to fd 1) can never corrupt the protocol — or, through it, an MCP server's stdout.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import threading
from typing import Any, BinaryIO


def _private_streams() -> tuple[BinaryIO, BinaryIO]:
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a tool's stdout goes to stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


def main() -> None:
    from . import containment, reaper

    contained = containment.contain()  # forks, in namespace mode: only the worker gets here
    protocol_in, protocol_out = _private_streams()
    from ..definitions.importpath import adopt_parent_path

    adopt_parent_path()
    # Imported after the streams are safe: nothing below may print on the protocol.
    from ..errors import ToolcatError
    from . import events
    from .call import as_callable
    from .loader import load
    from .results import NotSerialisableError, to_jsonable, truncate

    lock = threading.Lock()
    loop: asyncio.AbstractEventLoop | None = None

    def send(message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with lock:
            protocol_out.write(line)
            protocol_out.flush()

    for line in protocol_in:
        request = json.loads(line)
        # bounded before the pipe; a large text artifact crosses it as base64
        gate = events.Gate(lambda event: send({"event": events.piped(event)}))
        events.set_process_sink(gate)
        try:
            if request.get("trusted", False):
                found = load(request["implementation"], request["tool_id"])
            else:
                found = load(request["implementation"], request["tool_id"], root=request["root"])
            func = as_callable(found)
            value = func(**request["arguments"])
            if inspect.isawaitable(value):
                if loop is None:
                    loop = asyncio.new_event_loop()
                value = loop.run_until_complete(_await(value))
            data, truncated = truncate(to_jsonable(value), request["max_result_bytes"])
            reply: dict[str, Any] = {"ok": data, "truncated": truncated}
        except ToolcatError as e:
            reply = {"error": str(e), "code": e.code}
        except NotSerialisableError as e:
            reply = {"error": str(e), "code": "TOOL_ERROR"}
        except BaseException as e:  # any failure of the tool, KeyboardInterrupt included
            reply = {"error": f"{type(e).__name__}: {e}"[:10_000], "code": "TOOL_ERROR"}
        gate.end()
        send(reply)
    if contained != containment.PID_NAMESPACE:  # there, the namespace ends with us
        reaper.kill_tree(os.getpid())  # asked to exit: nothing a tool started outlives us


async def _await(awaitable: Any) -> Any:
    return await awaitable


if __name__ == "__main__":
    main()
