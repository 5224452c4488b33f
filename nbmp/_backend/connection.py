"""Connections that send with nbmp's pickler.

Differs from ``multiprocessing.connection.Connection`` in ``send``: the object is
pickled by :mod:`nbmp._backend.pickling` (cloudpickle + nbmp's reducers); and in
``recv``, which loads with plain pickle, but whole: an interrupt waits for the end of
the load (shared-memory tickets half taken would stay held, see ``loads_whole``).
"""

from __future__ import annotations

import select
from multiprocessing import connection, reduction
from typing import Any, Optional, Tuple

from . import pickling as _pickling, posix as _posix

__all__ = ["Connection", "Pipe", "Listener", "Client"]


class Connection(connection.Connection):
    """A :class:`multiprocessing.connection.Connection` whose ``send`` uses cloudpickle."""

    def send(self, obj: Any) -> None:
        """Send ``obj``, pickled by nbmp, to the other end.

        An object that carries shared-memory tickets (a shared array) is written whole
        once its bytes start going out (an interrupt meanwhile is raised after), or,
        interrupted before, gives its tickets back: nobody will load a message never sent."""
        if not self.writable:  # a closed end is refused by fileno() and send_bytes()
            raise OSError("connection is read-only")
        written = False
        with _pickling.collecting_single_use() as handed_out:
            try:
                data = _pickling.dumps_explained(obj, {"the object sent": obj}, "send it to another process")
                if not handed_out:
                    self.send_bytes(data)
                    return
                _posix.ready(self.fileno(), None, select.POLLOUT)  # waiting for room stays interruptible
                with _posix.interrupts_deferred():
                    self.send_bytes(data)
                    written = True
            except BaseException:
                if not written:
                    for release in handed_out:
                        release()
                raise

    def recv(self) -> Any:
        """Receive an object sent by the other end (waiting for one is interruptible); once a
        message begins to arrive, it is read and loaded whole, and an interrupt meanwhile is
        raised after: a message half read would leave the rest to be read as the next one,
        and one read but not loaded would keep the shared arrays it carries until the
        program ends."""
        if not self.readable:  # a closed end is refused by fileno()
            raise OSError("connection is write-only")
        _posix.ready(self.fileno(), None)
        with _posix.interrupts_deferred():
            return _pickling.loads_whole(self.recv_bytes())


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
