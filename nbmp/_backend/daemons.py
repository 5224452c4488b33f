"""nbmp's helper threads, finished before the interpreter is.

The Pool's helper threads may drop a queue's last reference, whose named-semaphore cleanup a
daemon thread stopped at exit leaves half done (the resource tracker then warns of a leak). So
they are joined (``EXIT_GRACE`` seconds in all) at the end of multiprocessing's exit function,
after it has stopped the Pools' workers, which is what they wait for.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from multiprocessing import util
from typing import Any, Callable, List

__all__ = ["start", "EXIT_GRACE"]

EXIT_GRACE = 5.0  # seconds the interpreter's exit waits for the helper threads, all of them

_lock = threading.Lock()
# Weakly: a thread alive is held by threading itself, and an ended one must not be kept
# (CPython's test suite counts Thread objects still referenced after a test as dangling).
_threads: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_joined_at_exit_in: List[int] = []  # the pid whose exit function joins them (a child has its own)


def start(target: Callable[..., Any], *args: Any, name: str) -> threading.Thread:
    """Start a daemon thread that the interpreter's exit waits for (see the module's docstring)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with _lock:
        if _joined_at_exit_in != [os.getpid()]:
            _threads.clear()  # a forked child's copies of its parent's threads, which it does not run
            _joined_at_exit_in[:] = [os.getpid()]
            # Priority below every Finalize the stdlib registers (a Queue's join is -5), so
            # it runs last: after the Pools' terminates and the daemonic children's joins.
            util.Finalize(None, _join_all, exitpriority=-100)
        _threads.add(thread)
    try:
        thread.start()
    except BaseException:  # e.g. no new threads while the interpreter exits
        with _lock:
            _threads.discard(thread)
        raise
    return thread


def _join_all() -> None:
    deadline = time.monotonic() + EXIT_GRACE
    me = threading.current_thread()
    while True:  # again: a thread joined may have started another (a terminate's reader)
        with _lock:
            alive = [t for t in _threads if t.ident is not None and t.is_alive() and t is not me]
        if not alive or time.monotonic() >= deadline:
            return
        for thread in alive:
            thread.join(max(0.0, deadline - time.monotonic()))
