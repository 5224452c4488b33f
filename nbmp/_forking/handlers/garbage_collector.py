"""The garbage collector: a worker forked by nbmp or a fork server leaves the objects it inherited out of
its collections (``gc.freeze()`` at its first step, O(1)), as CPython's documentation advises for fork: a
collection writes into every object it examines, copying the parent's pages (docs/fork_safety.md)."""

from __future__ import annotations

import gc
import sys

from ._base import ForkHandler, Worker

# A free-threaded build (ABI flag "t", 3.13+) freezes by marking every object: the very
# writes this avoids. There the collector is left as it is.
_FREEZE_IS_O1 = "t" not in getattr(sys, "abiflags", "")


class GarbageCollector(ForkHandler):
    """In a child nbmp or a fork server forked: the inherited objects move to the permanent generation."""

    def in_child(self, worker: Worker) -> None:
        if (worker.forked or worker.from_fork_server) and _FREEZE_IS_O1:
            gc.freeze()

    def in_fork_server(self) -> None:
        # The preloaded modules' objects, before any fork: a worker's collection that comes
        # before its first step (while it imports the main module) skips them too.
        if _FREEZE_IS_O1:
            gc.freeze()
