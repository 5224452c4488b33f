"""The garbage collector: a forked worker leaves the objects it inherited out of its
collections (``gc.freeze()`` at its start), as CPython's documentation advises for fork.
So does a worker that a fork server forked: it inherits the server's objects, the modules
the server preloaded (numpy's, torch's: hundreds of thousands of them).

A collection writes into every object it examines, copying the parent's pages (docs/fork_safety.md,
"Garbage collection"); freezing is O(1). In the worker ``gc.get_objects()`` sees only its own
objects, and dropped inherited cycles are not freed; ``register_fork_handler(after_in_child=gc.unfreeze)``
undoes it.
"""

from __future__ import annotations

import gc
import sys

from ._base import ForkHandler, Worker

# A free-threaded build (ABI flag "t", 3.13+) freezes by marking every object: the very
# writes this avoids. There the collector is left as it is.
_FREEZE_IS_O1 = "t" not in getattr(sys, "abiflags", "")


class GarbageCollector(ForkHandler):
    """In a child nbmp or a fork server forked: the inherited objects move to the collector's
    permanent generation. (Without it, a worker's first full collection
    examines, and so copies, every page of the objects it inherited.)"""

    def in_child(self, worker: Worker) -> None:
        if (worker.forked or worker.from_fork_server) and _FREEZE_IS_O1:
            gc.freeze()

    def in_fork_server(self) -> None:
        # The preloaded modules' objects, before any fork: a worker's collection that comes
        # before its first step (while it imports the main module) skips them too.
        if _FREEZE_IS_O1:
            gc.freeze()
