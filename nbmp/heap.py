"""``multiprocessing.heap``, mirrored: the standard heap (one per process, shared with the
standard module's ``Value``/``Array``, so not a copy).

Example::

    >>> from nbmp.heap import BufferWrapper
    >>> BufferWrapper(16).create_memoryview().nbytes
    16
"""

from multiprocessing.heap import Arena, BufferWrapper, Heap  # noqa: F401  (the mirror of the standard module)

__all__ = ["BufferWrapper"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
import multiprocessing.heap as _standard  # noqa: E402

from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(_standard, __name__)
