"""nbmp's own background threads, and every other live thread.

nbmp's threads (queue-feeder pickling, output relay, dashboard sampler) do their
work inside a :class:`nbmp._forking.ForkLock`; holding every ForkLock just before
the fork is their safe point. The parent releases them after the fork; the child
gets fresh, unheld ones (it has none of those threads; whoever needs one starts
it again). A live user thread is the hazard worth one warning.
"""

from __future__ import annotations

from typing import Optional, Protocol

from ..threads import alone, user_threads
from ._base import ForkHandler, Worker


class Locks(Protocol):
    """Every live ForkLock (the registry's ``_ForkLocks``), handed in by the registry."""

    def hold(self) -> None: ...

    def release(self) -> None: ...

    def reset(self) -> None: ...


class NbmpThreads(ForkHandler):
    """Quiesce nbmp's threads across the fork; name the user threads that may hold locks."""

    def __init__(self, locks: Locks) -> None:
        self.locks = locks

    def hazard(self) -> Optional[str]:
        threads = user_threads()
        if not threads:
            return None
        names = ", ".join(f"{t.name!r}{'' if t.daemon else ' (non-daemon)'}" for t in threads)
        return (f"forking while user threads are running: {names}. A lock one of them holds at the fork "
                f"stays locked forever in the worker (a deadlock). Stop them before starting workers, "
                f"or use start_method='spawn'.")

    held = False  # whether this fork's ForkLocks were held; a forked child inherits it

    def before(self) -> None:
        # Alone, the forking thread is the only one that could hold a ForkLock, and it is
        # forking: none is held, and the child needs no fresh ones (the parent saves ~20
        # page faults a round and each child ~20).
        self.held = not alone()
        if self.held:
            self.locks.hold()

    def after_in_parent(self) -> None:
        self.locks.release()
        self.held = False

    def in_child(self, worker: Worker) -> None:
        if worker.forked and self.held:
            self.locks.reset()
            self.held = False
