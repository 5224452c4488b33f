"""``multiprocessing.reduction``, mirrored: ``ForkingPickler`` is nbmp's pickler.

What differs from the standard module: ``ForkingPickler`` (and ``dump``) pickle with
cloudpickle plus multiprocessing's and nbmp's reducers, and ``register`` adds a reducer
to nbmp's table only -- the standard ``ForkingPickler`` is untouched. Reducers
registered on the standard one are seen here too. The handle-passing helpers
(``send_handle``, ``DupFd``, ``sendfds``, ...) are the standard ones.

Example::

    >>> from nbmp.reduction import ForkingPickler
    >>> ForkingPickler.loads(ForkingPickler.dumps(lambda: 1))()
    1
"""

from __future__ import annotations

import io
import pickle
# Not ACKNOWLEDGE: 3.14 removed it (the fds are always acknowledged); where it exists it reads through below.
from multiprocessing.reduction import (  # noqa: F401  (the mirror of the standard module)
    HAVE_SEND_HANDLE, AbstractReducer, DupFd, recv_handle, recvfds, send_handle, sendfds,
)
from typing import Any, Callable, Optional

from ._backend import pickling as _pickling

__all__ = ["send_handle", "recv_handle", "ForkingPickler", "register", "dump", "DupFd", "sendfds", "recvfds"]


class ForkingPickler(_pickling.Pickler):
    """The standard ``ForkingPickler``'s API over nbmp's pickler (cloudpickle)."""

    loads = staticmethod(pickle.loads)

    @classmethod
    def register(cls, type: type, reduce: Callable[[Any], Any]) -> None:
        """Register ``reduce`` for ``type`` with nbmp's pickler (not the standard one)."""
        _pickling.register_reducer(type, reduce)

    @classmethod
    def dumps(cls, obj: Any, protocol: Optional[int] = None) -> memoryview:
        """Pickle ``obj``; a memoryview, as the standard ``ForkingPickler.dumps`` returns."""
        return memoryview(_pickling.dumps(obj, protocol))


register = ForkingPickler.register


def dump(obj: Any, file: io.IOBase, protocol: Optional[int] = None) -> None:
    """``multiprocessing.reduction.dump`` with nbmp's pickler."""
    file.write(_pickling.dumps(obj, protocol))


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.reduction")
