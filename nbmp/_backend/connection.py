"""Connections that send with nbmp's pickler.

Differs from ``multiprocessing.connection.Connection`` in ``send``: the object is
pickled by :mod:`nbmp._backend.pickling` (cloudpickle + nbmp's reducers); and in
``recv``, which loads with plain pickle, but whole: an interrupt waits for the end of
the load (shared-memory tickets half taken would stay held, see ``loads_whole``).
"""

from __future__ import annotations

from multiprocessing import connection, reduction
from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import pickling as _pickling

__all__ = ["Connection", "Pipe", "Listener", "Client"]


class Connection(connection.Connection):
    """A :class:`multiprocessing.connection.Connection` whose ``send`` uses cloudpickle."""

    if TYPE_CHECKING:  # the stdlib's private methods that send() uses (typeshed omits them)
        def _check_closed(self) -> None: ...
        def _check_writable(self) -> None: ...
        def _send_bytes(self, buf: bytes) -> None: ...
        def _check_readable(self) -> None: ...
        def _recv_bytes(self, maxsize: Any = None) -> Any: ...

    def send(self, obj: Any) -> None:
        """Send ``obj``, pickled by nbmp, to the other end."""
        self._check_closed()
        self._check_writable()
        self._send_bytes(_pickling.dumps_explained(obj, {"the object sent": obj}, "send it to another process"))

    def recv(self) -> Any:
        """Receive an object sent by the other end (waiting for one); loaded whole."""
        self._check_closed()
        self._check_readable()
        view = self._recv_bytes().getbuffer()
        try:
            return _pickling.loads_whole(view)
        finally:
            # Let the buffer go now: if the load raised, the traceback's frames keep the view,
            # and a garbage cycle through them made the BytesIO's finalizer fail to close it
            # ("BufferError: Existing exports of data", printed as an ignored exception).
            view.release()


def Pipe(duplex: bool = True) -> Tuple[Connection, Connection]:
    """Return a pair of connected :class:`Connection` objects, like ``multiprocessing.Pipe``.

    Example::

        >>> a, b = nbmp.Pipe()
        >>> a.send(lambda x: x + 1); b.recv()(1)
        2
    """
    ends = connection.Pipe(duplex)
    return tuple(_upgrade(end) for end in ends)  # type: ignore[return-value]  # tuple() of a generator is tuple[Connection, ...]; here, two


class Listener(connection.Listener):
    """``multiprocessing.connection.Listener`` whose accepted connections send with cloudpickle."""

    def accept(self) -> Connection:
        """Accept a connection: an nbmp :class:`Connection`."""
        return _upgrade(super().accept())


def Client(address: Any, family: Optional[str] = None, authkey: Optional[bytes] = None) -> Connection:
    """``multiprocessing.connection.Client``, returning an nbmp :class:`Connection`."""
    return _upgrade(connection.Client(address, family, authkey))


def _upgrade(end: connection.Connection) -> Connection:
    # Connection adds no state to the stdlib class, so retyping the stdlib's
    # object is exact and keeps its handle (no dup, no second pipe).
    end.__class__ = Connection
    return end  # type: ignore[return-value]  # retyped by the __class__ assignment above


def _reduce_connection(conn: Connection) -> Tuple[Any, ...]:
    _, args = connection.reduce_connection(conn)  # type: ignore[attr-defined]  # typeshed omits this runtime name
    return _rebuild_connection, args


def _rebuild_connection(df: Any, readable: bool, writable: bool) -> Connection:
    return Connection(df.detach(), readable, writable)


# Registering nbmp's own type with the stdlib's ForkingPickler changes nothing for
# stdlib objects; it lets an nbmp Connection travel through any channel.
reduction.register(Connection, _reduce_connection)
