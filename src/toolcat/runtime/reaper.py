"""Finding and killing every process a tool started, however it detached itself.

A process group is not enough: a tool that double-forks and calls ``setsid()`` leaves its
grandchild in a session of its own, reparented away from the worker, holding whatever the
worker held (the caller's stderr). On Linux the worker makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``), so every orphan among its descendants is reparented to
it instead of to init; they all stay in its tree, and ``kill_tree`` finds them in ``/proc``.
Elsewhere only the worker's process group is killed (docs/calling.md, "What a timeout kills").
A tool can clear that flag, though: where the system allows, the worker also runs in a PID
namespace of its own (``containment``), which nothing leaves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS_S = 2.0  # how long kill_tree keeps sweeping for processes forked meanwhile


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; whether that worked."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _living_parents() -> dict[int, int]:
    """pid -> parent pid of every process alive (not a zombie) that ``/proc`` shows."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # the name may hold spaces and ')'
        if len(fields) >= 2 and fields[0] not in (b"Z", b"X"):
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Living descendants of ``pid`` (Linux; empty elsewhere)."""
    if not os.path.isdir("/proc/self"):
        return []
    children: dict[int, list[int]] = {}
    for child, parent in _living_parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    stack = list(children.get(pid, ()))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, ()))
    return found


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def kill_tree(pid: int) -> None:
    """SIGKILL every living descendant of ``pid`` (not ``pid`` itself).

    Each sweep stops them first (a stopped process cannot fork past the sweep), then kills
    them; sweeps repeat until none is left or ``KILL_ROUNDS_S`` passed.
    """
    deadline = time.monotonic() + KILL_ROUNDS_S
    while True:
        found = descendants(pid)
        if not found or time.monotonic() > deadline:
            return
        _signal_all(found, signal.SIGSTOP)
        _signal_all(found, signal.SIGKILL)
        time.sleep(0.005)  # let the kernel turn them into zombies before the next sweep
