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


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.synchronize.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.synchronize``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.synchronize")
_sys.modules[__name__] = _standard
