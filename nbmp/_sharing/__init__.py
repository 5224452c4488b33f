"""Shared memory for numpy arrays and torch CPU tensors: the public functions.

How it works: docs/sharing.md. Modules: ``_strategies`` (settings), ``_space`` (room checks),
``_client``/``_janitor`` (lifetime), ``_registry`` (what this process maps), ``_segments`` (make,
send, receive), ``_pocket`` (tickets kept), ``_pool`` (freed segments reused), ``_numpy``/``_torch``
(reducers), ``_ledger`` (accounting).
"""

from __future__ import annotations

import sys
from typing import Any

from .._backend import pickling as _pickling
from .._base import checks as _checks
from . import _numpy, _pool, _strategies, _torch
from ._ledger import ShmUsage, shm_usage
from ._space import SharedMemoryFullError
from ._strategies import (get_all_sharing_strategies, get_sharing_pool, get_sharing_strategy, get_sharing_threshold,
                          set_sharing_strategy, set_sharing_threshold)

__all__ = ["zeros", "empty", "share", "is_shared", "shm_usage", "ShmUsage", "SharedMemoryFullError",
           "get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy",
           "get_sharing_threshold", "set_sharing_threshold", "get_sharing_pool", "set_sharing_pool"]

_pickling.register_framework_reducers("numpy", _numpy.install)
_pickling.register_framework_reducers("torch", _torch.install)


def set_sharing_pool(max_bytes: Any = None, idle: Any = None) -> None:
    _strategies.set_sharing_pool(max_bytes, idle)
    _pool.trim()  # a smaller pool gives back its oldest segments now


set_sharing_pool.__doc__ = _strategies.set_sharing_pool.__doc__


def zeros(shape: Any, dtype: Any = float) -> Any:
    """Return a numpy array of zeros in shared memory (a plain ``np.ndarray``).

    Sent to another nbmp process (Queue, Pipe, Pool, Process args), it and its
    views travel as handles: no copy, and writes on either side are seen by both.

    Example::

        >>> a = nbmp.zeros((4096, 4096), dtype="float32")
        >>> nbmp.is_shared(a[10:20])
        True
    """
    return _numpy.zeros(_checks.shape(shape, "zeros"), _numpy.check_dtype(dtype, "zeros"))


def empty(shape: Any, dtype: Any = float) -> Any:
    """Return a numpy array in shared memory; like :func:`zeros` (tmpfs pages start zeroed).

    Example::

        >>> b = nbmp.empty((1000, 3), dtype="int64")
    """
    return _numpy.zeros(_checks.shape(shape, "empty"), _numpy.check_dtype(dtype, "empty"))


def share(x: Any) -> Any:
    """Put ``x`` in shared memory: an ndarray -> a shared copy; a torch tensor -> moved in place.

    An array or tensor already in nbmp's shared memory is returned as it is. An
    ndarray subclass keeps its class and attributes (``np.matrix``, plain subclasses);
    one whose data is more than its buffer (a masked array's mask, a memmap's file)
    is refused with a ``TypeError`` that says what to share instead.

    Example::

        >>> a = nbmp.share(np.arange(10))
        >>> nbmp.is_shared(a)
        True
    """
    if _is_tensor(x):
        return _torch.share_(x)
    np = sys.modules.get("numpy")
    if np is None or not isinstance(x, np.ndarray):
        raise TypeError(f"nbmp.share takes a numpy array or a torch tensor, not {type(x).__qualname__}; "
                        f"for other data use nbmp.zeros(shape, dtype) and fill it")
    _numpy.check_shareable(x)
    if is_shared(x):
        return x
    copy = _numpy.zeros(x.shape, x.dtype, zero=False)
    np.copyto(copy, x)
    return _numpy.same_kind(copy, x)


def is_shared(x: Any) -> bool:
    """Whether ``x`` (an array or tensor, or a view of one) lies in shared memory.

    Example::

        >>> nbmp.is_shared(nbmp.zeros(3)), nbmp.is_shared(np.zeros(3))
        (True, False)
    """
    if _is_tensor(x):
        return _torch.is_shared(x)
    np = sys.modules.get("numpy")
    if np is None or not isinstance(x, np.ndarray):
        return False
    from . import _segments
    return _segments.find(_numpy.data_address(x)) is not None


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)
