"""Keeping every process a tool starts where a timeout can kill it: a PID namespace per worker.

A subreaper (``reaper``) is not enough on its own: a tool can clear
``PR_SET_CHILD_SUBREAPER`` on its worker and double-fork, and the grandchild is reparented
out of the worker's tree, to init, where no sweep of that tree finds it. A PID namespace has no
way out: every process a tool starts is in it, a process cannot move to an ancestor
namespace, and when the namespace's init dies the kernel kills every process left in it.

In namespace mode a worker is three processes::

    parent -> outer (the pid the parent started; the parent's namespace)
               -> init (pid 1 in the new namespace) -> worker (pid 2) -> the tools' processes

``outer`` waits for ``init`` and exits as the worker did (its code, or its signal); ``init``
reaps orphans until the worker exits and then exits, which kills what is left. Killing the
outer's tree (``processes.Worker.kill``) kills ``init``, so the whole namespace; ``init`` also
dies with ``outer`` (``PR_SET_PDEATHSIG``). Only ``CAP_SYS_ADMIN`` may create a PID namespace;
an unprivileged user gets one inside a user namespace of its own (its uid and gid mapped to
themselves) where the system allows that. Where neither works the worker stays a subreaper,
which a tool can escape as above; ``probe`` says which is in force.

Inside a namespace ``os.getpid()`` is the namespace's pid (2 for the worker) while ``/proc``
is still the host's: ``/proc/self`` is right, ``/proc/{os.getpid()}`` is another process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from typing import NoReturn

from . import reaper

PID_NAMESPACE = "pid-namespace"  # nothing a tool starts outlives its worker
SUBREAPER = "subreaper"  # detached processes are caught unless a tool clears the flag
PROCESS_GROUP = "process-group"  # not Linux: only the worker's process group is killed
MEANING = {  # for ``toolcat status``
    PID_NAMESPACE: "a timeout kills every process a process-isolated tool started",
    SUBREAPER: "a timeout kills what a tool started, detached or not, unless the tool clears "
    "PR_SET_CHILD_SUBREAPER on its worker and double-forks (no PID namespace here)",
    PROCESS_GROUP: "a timeout kills the worker's process group only",
}
# The worker's command line (after the interpreter) with the namespace turned off: for
# measuring what the namespace costs and for testing the fallback; never used by toolcat.
WORKER_WITHOUT_NAMESPACE = (
    "-c",
    "import toolcat.runtime.containment as c; c._enter_pid_namespace = lambda: False; "
    "from toolcat.runtime.worker import main; main()",
)

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1


def _unshare(flags: int) -> bool:
    """``unshare(2)``; whether it worked (it changes nothing when it fails)."""
    if not sys.platform.startswith("linux"):
        return False
    if sys.version_info >= (3, 12):
        try:
            os.unshare(flags)
        except OSError:
            return False
        return True
    import ctypes

    try:
        return bool(ctypes.CDLL(None, use_errno=True).unshare(flags) == 0)
    except (OSError, AttributeError):
        return False


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _enter_pid_namespace() -> bool:
    """Make this process's next child the init of a new PID namespace; whether that worked."""
    if _unshare(CLONE_NEWPID):
        return True
    uid, gid = os.geteuid(), os.getegid()  # before: in a new user namespace they read 65534
    if not _unshare(CLONE_NEWUSER | CLONE_NEWPID):
        return False
    try:
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/setgroups", "deny")  # the kernel's condition for writing gid_map
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as e:  # cannot be undone; a worker without its own uid must not run tools
        os.write(2, f"toolcat worker: cannot map uid {uid} into its namespace: {e}\n".encode())
        os._exit(70)
    return True


def contain() -> str:
    """Put this (new, single-threaded) worker where every process it starts can be killed,
    before any tool runs; which containment is in force.

    In namespace mode this forks twice, and only the worker, pid 2 of the namespace, returns.
    """
    if not _enter_pid_namespace():
        return SUBREAPER if reaper.become_subreaper() else PROCESS_GROUP
    status_read, status_write = os.pipe()
    init = os.fork()
    if init:
        os.close(status_write)
        _outer(init, status_read)
    os.close(status_read)
    _die_with_parent()
    worker = os.fork()
    if worker:
        _init(worker, status_write)
    os.close(status_write)
    return PID_NAMESPACE


def _leave_the_protocol() -> None:
    """Let go of the protocol pipes (fds 0 and 1): the parent sees the end of the worker's
    output when the worker exits, whoever else is still alive."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _init(worker: int, status_write: int) -> NoReturn:
    """Pid 1 of the namespace: reap orphans until the worker exits, pass its wait status to
    ``outer``, exit (the kernel then kills everything left in the namespace)."""
    _leave_the_protocol()
    # Pid 1 gets no signal from inside its namespace that it has no handler for: a tool
    # cannot end it by mistake (Python's own SIGINT handler would let it).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            os.write(status_write, status.to_bytes(4, "little"))
            os._exit(0)


def _outer(init: int, status_read: int) -> NoReturn:
    """Wait for ``init``; exit with the worker's code, or die of its signal."""
    _leave_the_protocol()
    os.waitpid(init, 0)
    data = os.read(status_read, 4)
    status = int.from_bytes(data, "little") if len(data) == 4 else int(signal.SIGKILL)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else int(signal.SIGKILL)
    with contextlib.suppress(OSError, ValueError):  # a number no signal has: exit below
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker's crash, not ours to dump
        if number != signal.SIGKILL:  # whose handler cannot be set
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(128 + number)


@functools.cache
def probe() -> str:
    """Which containment a worker started now gets (asks a fresh process, ~0.1 s: only
    `toolcat status` calls it)."""
    import subprocess

    from ..definitions.importpath import child_environment

    try:
        done = subprocess.run(
            [sys.executable, "-m", "toolcat.runtime.containment"],
            env=child_environment(os.environ),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return PROCESS_GROUP
    answer = done.stdout.strip()
    return answer if answer in (PID_NAMESPACE, SUBREAPER) else PROCESS_GROUP


if __name__ == "__main__":  # the probe: try what a worker does, without forking a namespace
    if _enter_pid_namespace():
        print(PID_NAMESPACE)
    else:
        print(SUBREAPER if reaper.become_subreaper() else PROCESS_GROUP)
