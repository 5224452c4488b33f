"""``multiprocessing.shared_memory``, mirrored so that ``import nbmp`` covers it.

Example::

    >>> from nbmp.shared_memory import ShareableList
    >>> sl = ShareableList([1, 2, 3]); sl[0]
    1
    >>> sl.shm.close(); sl.shm.unlink()
"""

from multiprocessing.shared_memory import ShareableList, SharedMemory

__all__ = ["SharedMemory", "ShareableList"]
