"""``multiprocessing.sharedctypes``, mirrored: ``lock=True`` uses nbmp's default context.

What differs from the standard module: ``Value``, ``Array`` and ``synchronized`` make
their lock from nbmp's default context when ``ctx`` is not given (the standard ones use
the standard module's default context). The distinction matters for spawn and
forkserver: a lock made by a ``fork`` context cannot be sent to a spawned child (the
standard library refuses it), so after ``nbmp.set_start_method("spawn")`` a
``nbmp.sharedctypes.Value`` goes to ``nbmp.Process`` children as the standard pair does.
``RawValue``, ``RawArray`` and ``copy`` need no context and are the standard ones.
"""

from __future__ import annotations

from multiprocessing import sharedctypes
from multiprocessing.sharedctypes import (  # noqa: F401  (the mirror of the standard module)
    RawArray, RawValue, Synchronized, SynchronizedArray, SynchronizedBase, SynchronizedString, copy,
)
from typing import Any

__all__ = ["RawValue", "RawArray", "Value", "Array", "copy", "synchronized"]


def _ctx(ctx: Any) -> Any:
    from ._backend import default_context
    return ctx or default_context.get_context()


def Value(typecode_or_type: Any, *args: Any, lock: Any = True, ctx: Any = None) -> Any:
    """``multiprocessing.sharedctypes.Value``; its lock comes from nbmp's default context."""
    return sharedctypes.Value(typecode_or_type, *args, lock=lock, ctx=_ctx(ctx))


def Array(typecode_or_type: Any, size_or_initializer: Any, *, lock: Any = True, ctx: Any = None) -> Any:
    """``multiprocessing.sharedctypes.Array``; its lock comes from nbmp's default context."""
    return sharedctypes.Array(typecode_or_type, size_or_initializer, lock=lock, ctx=_ctx(ctx))


def synchronized(obj: Any, lock: Any = None, ctx: Any = None) -> Any:
    """``multiprocessing.sharedctypes.synchronized``; a new lock comes from nbmp's default context."""
    return sharedctypes.synchronized(obj, lock, _ctx(ctx))


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.sharedctypes")
