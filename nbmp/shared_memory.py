"""``multiprocessing.shared_memory``, mirrored so that ``import nbmp`` covers it.

Example::

    >>> from nbmp.shared_memory import ShareableList
    >>> sl = ShareableList([1, 2, 3]); sl[0]
    1
    >>> sl.shm.close(); sl.shm.unlink()
"""

from multiprocessing.shared_memory import ShareableList, SharedMemory

__all__ = ["SharedMemory", "ShareableList"]


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.shared_memory.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.shared_memory``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.shared_memory")
_sys.modules[__name__] = _standard
