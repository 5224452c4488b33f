"""``multiprocessing.shared_memory``, mirrored so that ``import nbmp`` covers it.

Example::

    >>> from nbmp.shared_memory import ShareableList
    >>> sl = ShareableList([1, 2, 3]); sl[0]
    1
    >>> sl.shm.close(); sl.shm.unlink()
"""

from multiprocessing.shared_memory import ShareableList, SharedMemory

__all__ = ["SharedMemory", "ShareableList"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
import multiprocessing.shared_memory as _standard  # noqa: E402

from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(_standard, __name__)
