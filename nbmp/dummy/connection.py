"""``multiprocessing.dummy.connection``, mirrored: the standard thread-backed one."""

from multiprocessing.dummy.connection import Client, Connection, Listener, Pipe  # noqa: F401  (the mirror of the standard module)

__all__ = ["Client", "Listener", "Pipe"]
