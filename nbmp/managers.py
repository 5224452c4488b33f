"""``multiprocessing.managers`` with nbmp's default context.

Mirrors the standard module. What differs (docs/dropin.md): the managers' server starts from
nbmp's default context (fork first) as one of nbmp's workers (it ignores SIGINT and dies with its
starter), and proxies talk over nbmp's connections (serializer ``"nbmp"``, the default; ``"pickle"``
gives the standard one back), so lambdas, cell-defined classes and shared arrays cross them.

Example::

    >>> from nbmp.managers import BaseManager
    >>> class Counter:                       # defined in a cell
    ...     def __init__(self): self.n = 0
    ...     def incr(self): self.n += 1; return self.n
    >>> class MyManager(BaseManager): pass
    >>> MyManager.register("Counter", Counter)
    >>> with MyManager() as m:
    ...     m.Counter().incr()
    1
"""

from __future__ import annotations

from multiprocessing import managers
from multiprocessing.managers import (  # type: ignore[attr-defined]  # typeshed omits most of these runtime names  # noqa: F401  (the mirror of the standard module)
    AcquirerProxy, Array, ArrayProxy, AutoProxy, BarrierProxy, BaseListProxy, BaseProxy,
    ConditionProxy, DictProxy, EventProxy, IteratorProxy, ListProxy, MakeProxyType,
    Namespace, NamespaceProxy, PoolProxy, RemoteError, Server, Token, Value, ValueProxy,
    dispatch,
)

from ._backend import register_factory
from ._backend.managing import Server as _Server, SharedMemoryServer as _SharedMemoryServer, StartsFromNbmp
from ._pool import Pool as _Pool

__all__ = ["BaseManager", "SyncManager", "BaseProxy", "Token", "SharedMemoryManager",
           "NamespaceProxy", "ListProxy", "DictProxy", "ValueProxy", "AutoProxy", "MakeProxyType",
           "Namespace", "RemoteError"]


class BaseManager(StartsFromNbmp, managers.BaseManager):
    """``multiprocessing.managers.BaseManager`` started from nbmp's context."""

    _Server = _Server


class SyncManager(StartsFromNbmp, managers.SyncManager):
    """``multiprocessing.managers.SyncManager`` started from nbmp's context."""

    _Server = _Server


class SharedMemoryManager(StartsFromNbmp, managers.SharedMemoryManager):
    """``multiprocessing.managers.SharedMemoryManager`` started from nbmp's context."""

    _Server = _SharedMemoryServer


# A manager's Pool is nbmp's: started in the manager's process from nbmp's context, it pickles
# with cloudpickle. The standard one there would use the standard context, whose process
# classes cannot be pickled by name where a program has put nbmp in multiprocessing's place.
SyncManager.register("Pool", _Pool, PoolProxy)
register_factory("SyncManager", SyncManager)  # what ctx.Manager() starts


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.managers")
