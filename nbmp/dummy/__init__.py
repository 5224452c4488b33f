"""``multiprocessing.dummy``, mirrored: the thread-backed API, which pickles nothing, so
it is the standard one.

Example::

    >>> from nbmp.dummy import Pool
    >>> with Pool(2) as pool:
    ...     pool.map(lambda x: x + 1, [1, 2])
    [2, 3]
"""

from multiprocessing.dummy import (  # noqa: F401  (the mirror of the standard module)
    Array, Barrier, BoundedSemaphore, Condition, DummyProcess, Event, JoinableQueue, Lock, Manager, Namespace,
    Pipe, Pool, Process, Queue, RLock, Semaphore, Value, active_children, current_process, freeze_support,
    shutdown,
)

from . import connection  # noqa: F401  (as the standard package does)

__all__ = ["Process", "current_process", "active_children", "freeze_support", "Lock", "RLock", "Semaphore",
           "BoundedSemaphore", "Condition", "Event", "Barrier", "Queue", "Manager", "Pipe", "Pool", "JoinableQueue"]


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.dummy.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.dummy``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.dummy")
_sys.modules[__name__] = _standard
