"""``multiprocessing.dummy.connection``, mirrored: the standard thread-backed one."""

from multiprocessing.dummy.connection import Client, Connection, Listener, Pipe  # noqa: F401  (the mirror of the standard module)

__all__ = ["Client", "Listener", "Pipe"]


# nbmp defines nothing here: the standard module itself (see stand_for).
from .._base.util import stand_for as _stand_for  # noqa: E402

_stand_for(__name__, "multiprocessing.dummy.connection")
