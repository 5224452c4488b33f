"""numpy arrays through nbmp's pickler: handles for shared ones, one copy for big unshared ones.

Installed by :func:`install` the first time numpy is imported (never imported
here to register). The reducer applies to ``ndarray`` and to subclasses that
pickle like it (``np.matrix``, user subclasses without their own ``__reduce__``);
others (masked arrays, ``np.memmap``), object arrays and small arrays go by
ordinary pickling.
"""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING, Any, Dict, Literal, Optional, Tuple

from .._backend import pickling as _pickling
from . import _client, _segments, _strategies

if TYPE_CHECKING:
    import numpy as np

__all__ = ["install", "zeros", "data_address", "span", "check_dtype", "check_shareable", "same_kind"]

def data_address(arr: "np.ndarray") -> int:
    return arr.__array_interface__["data"][0]  # type: ignore[no-any-return]  # numpy types __array_interface__ as dict[str, Any]


def span(shape: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> Tuple[int, int]:
    """(lowest, highest+1) byte offsets an array's elements cover, from its first element."""
    if 0 in shape:
        return 0, 0
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return low, high + itemsize


def check_dtype(dtype: Any, call: str) -> "np.dtype":
    """``dtype`` as a numpy dtype that can live in shared memory, or a clear error."""
    import numpy as np
    try:
        dt: "np.dtype[Any]" = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"nbmp.{call}: dtype {dtype!r} is not a numpy dtype ({exc}); e.g. nbmp.{call}((3, 4), dtype='float32')") from None
    if dt.hasobject:
        raise TypeError(f"nbmp.{call}: dtype {dt} holds Python objects, which cannot live in shared memory; "
                        f"use a numeric, bool, bytes or structured dtype")
    return dt


def check_shareable(arr: "np.ndarray") -> None:
    """Refuse the ndarray subclasses a shared copy would change: their data is more
    than the buffer (a masked array's mask) or lives elsewhere (a memmap's file)."""
    import numpy as np
    cls = type(arr)
    if cls is np.ndarray or _rebuildable(cls):
        return
    name = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(arr, np.ma.MaskedArray):
        raise TypeError(f"nbmp.share cannot share a masked array ({name}): its copy would lose the mask. "
                        f"Share the data and the mask, e.g. data = nbmp.share(x.data); "
                        f"mask = nbmp.share(np.ma.getmaskarray(x)); np.ma.array(data, mask=mask), "
                        f"or share x.filled(fill_value) if the mask is not needed")
    if isinstance(arr, np.memmap):
        raise TypeError(f"nbmp.share cannot share a memmap ({name}): the copy would no longer write to its "
                        f"file. To share a copy of its values write nbmp.share(np.asarray(x)); to share the "
                        f"file itself, open it with np.memmap in each worker")
    raise TypeError(f"nbmp.share cannot share a {name}: that ndarray subclass pickles its own way, so a "
                    f"shared copy would not keep what it holds besides the buffer. Share its values with "
                    f"nbmp.share(np.asarray(x)) and rebuild the {cls.__qualname__} around them")


def same_kind(copy: "np.ndarray", arr: "np.ndarray") -> "np.ndarray":
    """``copy`` (a plain shared array) as ``arr``'s class, with its attributes (see check_shareable)."""
    import numpy as np
    if type(arr) is np.ndarray:
        return copy
    result = copy.view(type(arr))
    state = getattr(arr, "__dict__", None)
    if state:
        result.__dict__.update(state)
    return result


def zeros(shape: Any, dtype: Any, zero: bool = True) -> "np.ndarray":
    """A C-ordered array in a segment held by this process: zeros, or (``zero=False``, for a
    copy about to overwrite it) whatever a reused segment held."""
    import numpy as np
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects, which cannot live in shared memory; "
                        f"use a numeric, bool, bytes or structured dtype")
    count = int(np.prod(shape, dtype=np.int64))
    return np.ndarray(shape, dt, buffer=_segments.create(count * dt.itemsize, zero=zero))  # type: ignore[arg-type, no-any-return, unused-ignore]  # numpy's stubs: ndarray() is Any under Python 3.10, and numpy < 2.5 rejects a ctypes array as buffer=


# -- The reducer -----------------------------------------------------------------------------------


def _rebuildable(cls: type) -> bool:
    import numpy as np
    return cls is np.ndarray or (
        not issubclass(cls, np.memmap)
        and cls.__reduce_ex__ is np.ndarray.__reduce_ex__ and cls.__reduce__ is np.ndarray.__reduce__)


_kinds: Dict[type, Any] = {}  # per ndarray class: None (np.ndarray), the class itself, or False (not rebuildable)


def _kind(cls: type) -> Any:
    import numpy as np
    if len(_kinds) >= 64:  # subclasses redefined cell after cell: keep none of them alive for long
        _kinds.clear()
    kind = _kinds[cls] = None if cls is np.ndarray else cls if _rebuildable(cls) else False
    return kind


def _reduce_ndarray(arr: "np.ndarray") -> Any:
    cls = type(arr)
    try:
        kind = _kinds[cls]
    except KeyError:
        kind = _kind(cls)
    if kind is False or arr.dtype.hasobject:
        return NotImplemented
    # Only plain tuples, numbers and strings besides the function: each other object (a
    # NamedTuple, a dtype, a class) costs the pickler a lookup of its own on the hot path.
    state = getattr(arr, "__dict__", None) or None
    dtype = arr.dtype.str if arr.dtype.isbuiltin == 1 else arr.dtype
    address = data_address(arr)
    mapped = _segments.find(address)
    if mapped is not None:
        offset = address - mapped.start
        low, high = (0, arr.nbytes) if arr.flags.c_contiguous else span(arr.shape, arr.strides, arr.itemsize)
        if offset + low >= 0 and offset + high <= mapped.size:
            handle = tuple(_segments.ticket_for(mapped))
            return _rebuild_ndarray, (handle, dtype, arr.shape, arr.strides, offset, kind, state, not arr.flags.writeable)
    if arr.nbytes < _strategies.get_sharing_threshold():
        return NotImplemented
    strides = arr.strides if (arr.flags.c_contiguous or arr.flags.f_contiguous) else None
    try:
        handle = tuple(_segments.create_moved(arr.nbytes, lambda fd, size: _fill(fd, size, arr), lambda buf: _fill_mapped(buf, arr)))
    except _client.NoSocket:  # a sandbox: by value, as the standard pickler sends it
        return NotImplemented
    return _rebuild_ndarray, (handle, dtype, arr.shape, strides, 0, kind, state, not arr.flags.writeable)


def _fill(fd: int, size: int, arr: "np.ndarray") -> None:
    """Copy ``arr``'s data into the new segment file ``fd``: the one copy of a move."""
    import numpy as np
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        _segments.write_all(fd, size, (arr if arr.flags.c_contiguous else arr.T).reshape(-1).view(np.uint8))
        return
    os.ftruncate(fd, size)  # strided: gather the elements straight into the mapping
    with mmap.mmap(fd, size) as mm:
        np.copyto(np.ndarray(arr.shape, arr.dtype, buffer=mm), arr)  # no view of the mapping outlives it


def _fill_mapped(buf: Any, arr: "np.ndarray") -> None:
    """Copy ``arr`` into a reused segment's mapping, laid out as the receiver will read it."""
    import numpy as np
    order: Literal["C", "F"] = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    np.copyto(np.ndarray(arr.shape, arr.dtype, buffer=buf, order=order), arr)


def _rebuild_ndarray(handle: Tuple[Any, ...], dtype: Any, shape: Tuple[int, ...],
                     strides: Optional[Tuple[int, ...]], offset: int, cls: Optional[type],
                     state: Optional[Dict[str, Any]], read_only: bool = False) -> "np.ndarray":
    import numpy as np
    buf = _segments.attach(_segments.Handle._make(handle))
    arr: np.ndarray = np.ndarray(shape, dtype, buffer=buf, offset=offset, strides=strides)  # type: ignore[arg-type, unused-ignore]  # numpy < 2.5 stubs reject a ctypes array as buffer=
    arr.flags.writeable = not read_only  # sent read-only, it stays so (as a small array pickled in-band does)
    if cls is not None:
        arr = arr.view(cls)
        if state:
            arr.__dict__.update(state)
    return arr


def install() -> None:
    import numpy as np
    _pickling.register_reducer(np.ndarray, _reduce_ndarray, subclasses=True)
