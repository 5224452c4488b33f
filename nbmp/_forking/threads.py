"""Which threads are alive at a fork, and which of them are a hazard.

A thread is classified by its target's (else its class's) module: nbmp's quiesce through a
``ForkLock``; the kernel's and multiprocessing's helpers are idle or fork-aware; any other is a
user thread that may hold a lock across the fork. One whose target returned (``threading``
deleted ``_target``, the thread still listed a moment) is *finished*.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import List

__all__ = ["ThreadInfo", "python_threads", "native_threads", "user_threads", "alone"]

_KERNEL = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "traitlets", "comm", "debugpy", "_pydevd", "pydevd")
_LIBRARY = ("multiprocessing", "tqdm", "_pytest", "pytest_timeout", "concurrent.futures.process")


@dataclass(frozen=True)
class ThreadInfo:
    """One live thread: ``kind`` is forking, main, nbmp, kernel, library, finished, user or native."""

    name: str
    daemon: bool
    kind: str


def _origin(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    return getattr(target, "__module__", None) or type(thread).__module__ or ""


def _kind(thread: threading.Thread) -> str:
    if thread is threading.current_thread():
        return "forking"
    if thread is threading.main_thread():
        return "main"
    if "_target" not in vars(thread) and type(thread).run is threading.Thread.run:
        return "finished"  # Thread.run has returned and deleted its target: the thread is exiting
    origin = _origin(thread)
    for kind, prefixes in (("nbmp", ("nbmp",)), ("kernel", _KERNEL), ("library", _LIBRARY)):
        if any(origin == p or origin.startswith(p + ".") for p in prefixes):
            return kind
    return "user"


def alone() -> bool:
    """Whether the calling thread is the only live ``threading`` thread: no other can be in
    the middle of anything (a thread that ever ran Python code through ``logging`` or
    ``threading`` is registered there, a C thread too)."""
    return threading.active_count() == 1


def python_threads() -> List[ThreadInfo]:
    """Every live ``threading`` thread, classified."""
    return [ThreadInfo(t.name, t.daemon, _kind(t)) for t in threading.enumerate()]


def native_threads() -> List[ThreadInfo]:
    """OS threads that ``threading`` does not know (BLAS/OpenMP pools, zmq I/O), by OS name (Linux)."""
    known = {getattr(t, "native_id", None) for t in threading.enumerate()}
    found = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tids:
        if int(tid) in known:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # exited meanwhile
        found.append(ThreadInfo(name, True, "kernel" if name.startswith("ZMQbg") else "native"))
    return found


def user_threads() -> List[ThreadInfo]:
    """Live Python threads that belong to neither nbmp, the kernel nor a fork-aware library."""
    return [] if alone() else [t for t in python_threads() if t.kind == "user"]
