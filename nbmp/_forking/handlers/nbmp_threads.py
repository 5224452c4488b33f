"""nbmp's own background threads, and every other live thread.

nbmp's threads work inside :class:`nbmp._forking.ForkLock` s, held across the fork and fresh in the
child; a live user thread is the hazard worth one warning.
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
        # Alone, the forking thread holds no ForkLock while it forks: the child needs no fresh ones.
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
