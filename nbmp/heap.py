"""``multiprocessing.heap``, mirrored: the standard heap (one per process, shared with the
standard module's ``Value``/``Array``, so not a copy).

Example::

    >>> from nbmp.heap import BufferWrapper
    >>> BufferWrapper(16).create_memoryview().nbytes
    16
"""

from multiprocessing.heap import Arena, BufferWrapper, Heap  # noqa: F401  (the mirror of the standard module)

__all__ = ["BufferWrapper"]


# nbmp defines nothing here: this module stands for the standard module itself, so that
# what a program reads, sets or patches on it (``mock.patch("nbmp.heap.<name>")``, a
# private name) is the standard module's. Importing it gives the standard module.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

# By name, not ``import multiprocessing.heap``: that reads the package's attribute, and a
# program may have put nbmp in the package's place.
_standard = _importlib.import_module("multiprocessing.heap")
_sys.modules[__name__] = _standard
