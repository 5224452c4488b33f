"""``multiprocessing.dummy``, mirrored: the thread-backed API, which pickles nothing, so
it is the standard one.
"""

from multiprocessing.dummy import (  # noqa: F401  (the mirror of the standard module)
    Array, Barrier, BoundedSemaphore, Condition, DummyProcess, Event, JoinableQueue, Lock, Manager, Namespace,
    Pipe, Pool, Process, Queue, RLock, Semaphore, Value, active_children, current_process, freeze_support,
    shutdown,
)

from . import connection  # noqa: F401  (as the standard package does)

__all__ = ["Process", "current_process", "active_children", "freeze_support", "Lock", "RLock", "Semaphore",
           "BoundedSemaphore", "Condition", "Event", "Barrier", "Queue", "Manager", "Pipe", "Pool", "JoinableQueue"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from .._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.dummy")
