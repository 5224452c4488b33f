"""``multiprocessing.heap``, mirrored: the standard heap (one per process, shared with the
standard module's ``Value``/``Array``, so not a copy).
"""

from multiprocessing.heap import Arena, BufferWrapper, Heap  # noqa: F401  (the mirror of the standard module)

__all__ = ["BufferWrapper"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from ._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.heap")
