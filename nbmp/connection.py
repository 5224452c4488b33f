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

from multiprocessing import connection
from multiprocessing.connection import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    BUFSIZE, answer_challenge, arbitrary_address, deliver_challenge, wait,
)
from typing import Any, Optional

from ._backend.connection import Connection, Pipe, _upgrade

__all__ = ["Client", "Listener", "Pipe", "wait"]


class Listener(connection.Listener):
    """``multiprocessing.connection.Listener`` whose accepted connections send with cloudpickle."""

    def accept(self) -> Connection:
        """Accept a connection: an nbmp :class:`Connection`."""
        return _upgrade(super().accept())


def Client(address: Any, family: Optional[str] = None, authkey: Optional[bytes] = None) -> Connection:
    """``multiprocessing.connection.Client``, returning an nbmp :class:`Connection`."""
    return _upgrade(connection.Client(address, family, authkey))


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.connection")
