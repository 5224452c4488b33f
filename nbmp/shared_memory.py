"""``multiprocessing.shared_memory``, mirrored so that ``import nbmp`` covers it.
"""

from multiprocessing.shared_memory import ShareableList, SharedMemory

__all__ = ["SharedMemory", "ShareableList"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from ._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.shared_memory")
