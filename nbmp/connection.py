"""``multiprocessing.connection``, mirrored: connections send with nbmp's pickler.

What differs from the standard module: ``Pipe``, ``Listener.accept`` and ``Client``
return :class:`nbmp._connection.Connection` objects, whose ``send`` pickles with
cloudpickle (a lambda or a cell-defined object can be sent). Receiving is standard, so
either end may talk to a standard connection. ``wait`` and the authentication helpers
are the standard ones.

Example::

    >>> from nbmp.connection import Listener, Client
    >>> with Listener(("localhost", 0)) as listener:
    ...     with Client(listener.address) as c, listener.accept() as s:
    ...         c.send(lambda: 42); s.recv()()
    42
"""

from __future__ import annotations

from multiprocessing.connection import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    BUFSIZE, answer_challenge, arbitrary_address, deliver_challenge, wait,
)

from ._backend.connection import Client, Connection, Listener, Pipe  # noqa: F401  (Connection: the class they return)

__all__ = ["Client", "Listener", "Pipe", "wait"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.connection")
