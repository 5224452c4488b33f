"""``logging``: a thread that is inside a handler's ``emit`` at the fork holds the
handler's stream mid-write (the stream's internal buffer lock is not reset after a
fork), and the child's first log call through that handler blocks forever.

logging resets its locks in a child, not the streams: nbmp holds every handler's lock across its
forks while another thread is alive.
"""

from __future__ import annotations

import sys
import threading
from typing import List

from ..threads import alone
from ._base import ForkHandler, Worker


class Logging(ForkHandler):
    """Every logging handler at a safe point (between two records) across the fork."""

    modules = ("logging",)
    HOLD_TIMEOUT = 5.0  # a handler blocked longer than this (a stuck network handler) is skipped

    def __init__(self) -> None:
        self._held: List[threading.RLock] = []

    def before(self) -> None:
        if alone():
            return  # no other thread can be mid-emit (holding the locks costs the parent ~70 page faults a round)
        for ref in list(sys.modules["logging"]._handlerList):
            lock = getattr(ref(), "lock", None)
            if lock is not None and lock.acquire(timeout=self.HOLD_TIMEOUT):
                self._held.append(lock)

    def after_in_parent(self) -> None:
        while self._held:
            self._held.pop().release()

    def in_child(self, worker: Worker) -> None:
        self._held = []  # logging has re-created these locks in the child
