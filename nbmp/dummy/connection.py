"""``multiprocessing.dummy.connection``, mirrored: the standard thread-backed one."""

from multiprocessing.dummy.connection import Client, Connection, Listener, Pipe  # noqa: F401  (the mirror of the standard module)

__all__ = ["Client", "Listener", "Pipe"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
import multiprocessing.dummy.connection as _standard  # noqa: E402

from .._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(_standard, __name__)
