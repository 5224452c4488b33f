"""``multiprocessing.synchronize``, mirrored so that ``import nbmp`` covers it.

The standard classes: each takes the context it belongs to as ``ctx=`` (as the
standard module requires), so nothing here needs nbmp's default; ``nbmp.Lock()`` and
the other top-level factories pass nbmp's default context.
"""

from multiprocessing.synchronize import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    SEM_VALUE_MAX, Barrier, BoundedSemaphore, Condition, Event, Lock, RLock, SemLock, Semaphore,
)

__all__ = ["Lock", "RLock", "Semaphore", "BoundedSemaphore", "Condition", "Event"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from ._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.synchronize")
