"""``multiprocessing.synchronize``, mirrored so that ``import nbmp`` covers it.

The standard classes: each takes the context it belongs to as ``ctx=`` (as the
standard module requires), so nothing here needs nbmp's default; ``nbmp.Lock()`` and
the other top-level factories pass nbmp's default context.

Example::

    >>> import nbmp
    >>> from nbmp.synchronize import Lock
    >>> with Lock(ctx=nbmp.get_context()): pass
"""

from multiprocessing.synchronize import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    SEM_VALUE_MAX, Barrier, BoundedSemaphore, Condition, Event, Lock, RLock, SemLock, Semaphore,
)

__all__ = ["Lock", "RLock", "Semaphore", "BoundedSemaphore", "Condition", "Event"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
import multiprocessing.synchronize as _standard  # noqa: E402

from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(_standard, __name__)
