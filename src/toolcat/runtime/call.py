"""The call path after a tool is resolved: policy, arguments, import, run, result."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ToolcatError, ToolDeniedError
from ..models import RegisteredTool, ToolEvent, ToolResult, canonical_json
from ..policy.rules import Policy
from ..policy.trust import root_problem
from . import remote, tracing
from .arguments import Validator, compile_validator
from .events import EventLog
from .executor import Executor, ToolFailed, WorkerError, timeout_error
from .loader import imported, load
from .results import (
    DEFAULT_MAX_RESULT_BYTES,
    NotSerialisableError,
    bound_results,
    reset_results,
    to_jsonable,
    truncate,
)
from .settings import (  # noqa: F401  (re-exported)
    DEFAULT_TIMEOUT,
    ISOLATIONS,
    MAX_TIMEOUT,
    Isolation,
    Mode,
    check_isolation,
    check_timeout,
)
from .threads import ThreadRunner

RESULT_CODES = {
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "TOOL_DENIED",
    "IMPORT_FAILED",
    "TOOL_ERROR",
    "TIMEOUT",
}


def error_result(error: BaseException, started: float) -> ToolResult:
    """A failed ``ToolResult`` for ``error``: toolcat errors keep their code, the rest are
    the tool's own failures (``TOOL_ERROR``, with the exception type)."""
    if isinstance(error, ToolFailed):
        error = error.error
    if isinstance(error, WorkerError):
        code = error.code if error.code in RESULT_CODES else "TOOL_ERROR"
        return make_result(started, error=str(error), error_code=code)
    if isinstance(error, ToolcatError):
        code = error.code if error.code in RESULT_CODES else "TOOL_ERROR"
        if error.code in ("AMBIGUOUS_NAME", "UNKNOWN_TOOLKIT"):
            code = "UNKNOWN_TOOL"
        message = str(error)
    elif isinstance(error, NotSerialisableError):
        code, message = "TOOL_ERROR", str(error)
    else:
        code, message = "TOOL_ERROR", f"{type(error).__name__}: {error}"[:10_000]
    return make_result(started, error=message, error_code=code)


async def on_thread(
    threads: ThreadRunner, started: float, fn: Callable[..., ToolResult], /, *args: Any, **kw: Any
) -> ToolResult:
    """``fn(*args, **kw)``, a call's ``ToolResult``, from a runtime thread, awaited; a closed
    runtime's refusal is the call's failed result, as ``call`` answers it."""
    try:
        future = threads.submit(fn, *args, **kw)
    except RuntimeError as e:
        return error_result(e, started)
    return await asyncio.wrap_future(future)


def _traced(span: Any, result: ToolResult) -> ToolResult:
    """``result``, its failure marked on the call's span (``tracing.tool_span``)."""
    if not result.success:
        tracing.failed(span, result.error_code or "TOOL_ERROR")
    return result


def _failed(error: BaseException, started: float, log: EventLog) -> ToolResult:
    result = error_result(error, started)
    result.events = log.close()
    return result


def _jsonable(value: Any, max_bytes: int) -> tuple[Any, bool]:
    """The tool's value as JSON, cut to ``max_bytes``. Converting it runs the tool's own
    code (a ``model_dump``, a dataclass's fields): whatever that raises is the tool's
    failure, as ``_invoke`` makes it for the call itself, never the caller's (a
    ``CancelledError`` would cancel the caller's task). A ``KeyboardInterrupt`` on the main
    thread is the user's Ctrl-C and goes on."""
    try:
        return truncate(to_jsonable(value), max_bytes)
    except BaseException as e:
        if (
            isinstance(e, KeyboardInterrupt)
            and threading.current_thread() is threading.main_thread()
        ):
            raise
        raise ToolFailed(e) from e


async def _closed(log: EventLog) -> list[ToolEvent]:
    """``log.close()`` on this loop, once no thread holds the log (a tool's thread holds it
    while it reports: an artifact being written). Not on a tool thread: with none free
    (stuck tools) the call would wait for one, and the runtime may be closed by now. What
    the log passes on reaches the loop before this returns: a ``Delivery`` delivers it
    before the result."""
    while not log.lock.acquire(blocking=False):
        await asyncio.sleep(0.005)
    try:
        events = log.close()
    finally:
        log.lock.release()
    await asyncio.sleep(0)  # the events ``close`` put on this loop's queue go first
    return events


_MRO = type.__dict__["__mro__"]


def _plain_sync(found: Any) -> bool:
    """Whether ``found`` is a sync function or a pydantic model class, told without running
    any of the tool's own code (``inspect.iscoroutinefunction`` reads ``__name__`` and
    ``__code__`` through a callable object's ``__getattr__``: on the caller's loop)."""
    if type(found) is types.FunctionType:
        return not inspect.iscoroutinefunction(found)
    from pydantic import BaseModel

    # a class's MRO read as ``type`` reads it, past any metaclass of the tool's; compared
    # by identity (``in`` would call the metaclass's own ``__eq__``)
    return issubclass(type(found), type) and any(c is BaseModel for c in _MRO.__get__(found))


async def _within(awaitable: Awaitable[ToolResult], seconds: float) -> ToolResult:
    """``awaitable``'s result, or ``asyncio.TimeoutError`` after ``seconds``."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):  # no task of its own, unlike wait_for
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def make_result(
    started: float,
    *,
    data: Any = None,
    error: str | None = None,
    error_code: str | None = None,
    truncated: bool = False,
    events: list[ToolEvent] | None = None,
) -> ToolResult:
    """A ``ToolResult`` timed from ``started`` (a ``time.perf_counter()`` reading)."""
    return ToolResult.model_construct(
        success=error is None,
        data=data,
        error=error,
        error_code=error_code,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        truncated=truncated,
        events=events or [],
    )


def as_callable(obj: Any) -> Any:
    """A pydantic model class with ``__call__`` is a tool: build it, then call it."""
    from pydantic import BaseModel

    if isinstance(obj, type) and issubclass(obj, BaseModel):

        def call_model(**arguments: Any) -> Any:
            instance: Any = obj(**arguments)
            return instance()

        call_model.__name__ = obj.__name__
        call_model.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=inspect.Parameter.empty if field.is_required() else field.default,
                )
                for name, field in obj.model_fields.items()
            ]
        )
        return call_model
    return obj


class Runtime:
    """Calls resolved tools; keeps compiled validators and the executor."""

    def __init__(
        self,
        policy: Policy,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        isolation: Isolation = "thread",
        trust_any_module: bool = False,
    ) -> None:
        self.policy = policy
        self.trust_any_module = trust_any_module
        self.default_timeout = check_timeout(default_timeout, "default_timeout")
        self.max_result_bytes = max_result_bytes
        self.isolation = check_isolation(isolation)
        self.executor = Executor()
        self._validators: dict[str, Validator] = {}
        self._lock = threading.Lock()

    def validator(self, tool: RegisteredTool) -> Validator:
        key = canonical_json(tool.parameters)
        found = self._validators.get(key)
        if found is None:
            found = compile_validator(tool.parameters)
            with self._lock:
                self._validators[key] = found
        return found

    def mode(self, tool: RegisteredTool) -> Mode:
        """How ``tool`` runs. Tools of MCP servers and OpenAPI operations always run here:
        their work is in another process (the server, the API) already."""
        spec = tool.implementation
        if spec and remote.forwarder(spec) is not None:
            return "thread"
        if isinstance(self.isolation, str):
            return self.isolation
        return self.isolation.get(tool.toolkit, self.isolation.get("*", "thread"))

    def load(self, tool: RegisteredTool) -> Any:
        """The tool's callable, imported on first use (refused if the policy denies it, or
        if it lies outside its toolkit's import root unless this runtime trusts any module)."""
        denied = self.policy.rule_veto(tool)
        if denied:
            raise ToolDeniedError(denied)
        return self._import(tool)

    def _import(self, tool: RegisteredTool) -> Any:
        """The callable, checked against the toolkit's import root (``toolcat.policy.trust``)."""
        if self.trust_any_module:
            return as_callable(load(tool.implementation, tool.id))
        problem = remote.refusal(tool.implementation or "", tool.kind)
        if problem:  # refused before anything is resolved or sent
            raise ToolDeniedError(f"tool {tool.id!r} refused: {problem}")
        return as_callable(load(tool.implementation, tool.id, root=tool.module))

    def call(
        self,
        tool: RegisteredTool,
        arguments: dict[str, Any] | None,
        *,
        timeout: float | None,
        validator: Validator | None = None,
        started: float | None = None,
        on_event: Callable[[ToolEvent], Any] | None = None,
    ) -> ToolResult:
        """Call ``tool``; every failure becomes a ``ToolResult`` with its error code. The
        call is an ``execute_tool`` span when OpenTelemetry is loaded (runtime/tracing.py)."""
        with tracing.tool_span(tool.id) as span:
            return _traced(
                span,
                self._call(
                    tool,
                    arguments,
                    timeout=timeout,
                    validator=validator,
                    started=started,
                    on_event=on_event,
                ),
            )

    async def acall(
        self,
        tool: RegisteredTool,
        arguments: dict[str, Any] | None,
        *,
        timeout: float | None,
        validator: Validator | None = None,
        started: float | None = None,
        on_event: Callable[[ToolEvent], Any] | None = None,
    ) -> ToolResult:
        """``call`` awaited on the caller's event loop, which it never blocks.

        A sync Python tool already imported, run in this process with no concurrency limit,
        goes straight to a tool thread and this loop keeps its timeout. Any other call runs
        ``call`` on a runtime thread, which hands the tool to a second one and waits there:
        a thread hop more (~100 µs of CPU, a third of a trivial call's)."""
        started = time.perf_counter() if started is None else started
        if not self._runs_direct(tool):
            return await on_thread(
                self.executor.threads,
                started,
                self.call,
                tool,
                arguments,
                timeout=timeout,
                validator=validator,
                started=started,
                on_event=on_event,
            )
        with tracing.tool_span(tool.id) as span:
            return _traced(
                span,
                await self._direct(
                    tool,
                    arguments,
                    timeout=timeout,
                    validator=validator,
                    started=started,
                    on_event=on_event,
                ),
            )

    def _runs_direct(self, tool: RegisteredTool) -> bool:
        """Whether ``acall`` may run ``tool`` straight on a tool thread: routing only, from
        what is in memory (the policy, the import checks and the arguments are judged there,
        as on every path)."""
        if tool.max_concurrency is not None or self.mode(tool) != "thread":
            return False
        spec = tool.implementation
        found = imported(spec) if spec and remote.forwarder(spec) is None else None
        return found is not None and _plain_sync(found)

    async def _direct(
        self,
        tool: RegisteredTool,
        arguments: dict[str, Any] | None,
        *,
        timeout: float | None,
        validator: Validator | None,
        started: float,
        on_event: Callable[[ToolEvent], Any] | None,
    ) -> ToolResult:
        log = EventLog(on_event, started)
        try:
            limit = self._limit(tool, timeout)
        except ToolcatError as e:
            return _failed(e, started, log)
        deadline = time.monotonic() + limit
        try:
            future = self.executor.threads.submit(
                self._run_here, tool, arguments, validator, log, started, limit, deadline
            )
        except RuntimeError as e:  # the runtime was closed
            return _failed(e, started, log)
        try:
            return await _within(asyncio.wrap_future(future), limit)
        except asyncio.TimeoutError:  # the caller's wait ends; a sync tool cannot be stopped
            failed = error_result(timeout_error(tool.id, limit, stopped=False), started)
            failed.events = await _closed(log)
            return failed

    def _run_here(
        self,
        tool: RegisteredTool,
        arguments: dict[str, Any] | None,
        validator: Validator | None,
        log: EventLog,
        started: float,
        limit: float,
        deadline: float,
    ) -> ToolResult:
        """``_call``'s in-process path on the tool thread itself (``acall``)."""
        max_bytes = tool.max_result_bytes or self.max_result_bytes
        bound = bound_results(max_bytes)
        try:
            kwargs = self._admitted(tool, arguments, validator)
            value = self.executor.run_here(
                self._import(tool),
                kwargs,
                tool_id=tool.id,
                timeout=limit,
                deadline=deadline,
                sink=log,
            )
            data, truncated = _jsonable(value, max_bytes)
        except (Exception, SystemExit) as e:  # the tool's own failures come as ToolFailed
            return _failed(e, started, log)
        finally:
            reset_results(bound)
        return make_result(started, data=data, truncated=truncated, events=log.close())

    def _limit(self, tool: RegisteredTool, timeout: float | None) -> float:
        return check_timeout(
            timeout if timeout is not None else (tool.timeout or self.default_timeout)
        )

    def _admitted(
        self, tool: RegisteredTool, arguments: dict[str, Any] | None, validator: Validator | None
    ) -> dict[str, Any]:
        """The call's keyword arguments, once the policy's rules, the schema and the guards
        let it through.

        Raises:
            ToolDeniedError: A rule or a guard refuses it.
            InvalidArgumentsError: ``arguments`` do not match the tool's schema.
        """
        denied = self.policy.rule_veto(tool)
        if denied:
            raise ToolDeniedError(denied)
        kwargs = (validator or self.validator(tool))(arguments if arguments is not None else {})
        denied = self.policy.guard_veto(tool, kwargs)
        if denied:
            raise ToolDeniedError(denied)
        return kwargs

    def _call(
        self,
        tool: RegisteredTool,
        arguments: dict[str, Any] | None,
        *,
        timeout: float | None,
        validator: Validator | None,
        started: float | None,
        on_event: Callable[[ToolEvent], Any] | None,
    ) -> ToolResult:
        started = time.perf_counter() if started is None else started
        log = EventLog(on_event, started)
        try:
            limit = self._limit(tool, timeout)
            kwargs = self._admitted(tool, arguments, validator)
            max_bytes = tool.max_result_bytes or self.max_result_bytes
            if self.mode(tool) == "process":
                if not tool.implementation:
                    load(tool.implementation, tool.id)  # raises the usual IMPORT_FAILED
                problem = (
                    None
                    if self.trust_any_module
                    else root_problem(tool.implementation, tool.module)
                )
                if problem:  # refused before a worker is started or anything imported
                    raise ToolDeniedError(f"tool {tool.id!r} refused: {problem}")
                reply = self.executor.run_in_process(
                    f"{tool.toolkit}@{tool.version}",
                    {
                        "implementation": tool.implementation,
                        "tool_id": tool.id,
                        "arguments": kwargs,
                        "max_result_bytes": max_bytes,
                        # the worker checks attribute paths and origins after its import
                        "trusted": self.trust_any_module,
                        "root": tool.module,
                    },
                    tool_id=tool.id,
                    timeout=limit,
                    max_concurrency=tool.max_concurrency,
                    sink=log,
                )
                data, truncated = reply.get("ok"), bool(reply.get("truncated"))
            else:
                func = self._import(tool)
                bound = bound_results(max_bytes)  # the tool's thread copies this context
                try:
                    value = self.executor.run(
                        func,
                        kwargs,
                        tool_id=tool.id,
                        timeout=limit,
                        max_concurrency=tool.max_concurrency,
                        sink=log,
                    )
                finally:
                    reset_results(bound)
                data, truncated = _jsonable(value, max_bytes)
        except (Exception, SystemExit) as e:  # the tool's own failures come as ToolFailed
            return _failed(e, started, log)
        return make_result(started, data=data, truncated=truncated, events=log.close())

    def close(self) -> None:
        self.executor.close()
