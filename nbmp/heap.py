"""``multiprocessing.heap``, mirrored: the standard heap (one per process, shared with the
standard module's ``Value``/``Array``, so not a copy).

Example::

    >>> from nbmp.heap import BufferWrapper
    >>> BufferWrapper(16).create_memoryview().nbytes
    16
"""

from multiprocessing.heap import Arena, BufferWrapper, Heap  # noqa: F401  (the mirror of the standard module)

__all__ = ["BufferWrapper"]
