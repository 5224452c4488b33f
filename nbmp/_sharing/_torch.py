"""torch CPU tensors through nbmp's pickler, and sharing a tensor in place.

Installed the first time torch is imported; the rules are docs/sharing.md's ("torch"). A storage
torch will not swap is copied (a big one into a segment, a small one by ``Tensor.__reduce_ex__``,
never by the reducers ``torch.multiprocessing`` puts in the stdlib's table, which share through
torch's own fds and shm manager); a tensor torch shared itself crosses by torch's handle.
"""

from __future__ import annotations

import ctypes
import pickle
import resource
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .._backend import finalizers as _finalizers, pickling as _pickling
from . import _segments, _strategies

if TYPE_CHECKING:
    import torch

__all__ = ["install", "share_", "is_shared", "check_cpu", "torch_multiprocessing_name"]


def torch_multiprocessing_name(name: str) -> Any:
    """``nbmp.reductions`` and ``nbmp.init_reductions``: torch.multiprocessing's own, for code
    written against it (torch's reducers, which share through torch's own handles)."""
    try:
        from torch.multiprocessing import reductions
    except ImportError:
        raise AttributeError(f"nbmp.{name} is torch.multiprocessing's {name}, which needs torch: "
                             f"pip install torch (nbmp itself shares tensors without it)") from None
    return reductions if name == "reductions" else reductions.init_reductions


def check_cpu(t: "torch.Tensor") -> None:
    """Raise a ValueError that says what to do for a tensor that is not in CPU memory."""
    if t.device.type != "cpu":
        raise _pickling.Refusal(
            f"a {t.device.type.upper()} tensor ({t.device}) cannot be put in nbmp's shared memory, which "
            f"holds CPU memory only. Fix: send t.cpu() and move it back with .to('{t.device}') in the "
            f"receiver, or create it on the device inside the worker (start_method='spawn' for CUDA work).")


# Storages moved into a segment, by address: the entry (nbmp's second mapping and hold) goes when the storage dies.
_moved: Dict[int, Tuple[_segments.Mapped, Any]] = {}
_moved_by_seg: Dict[str, "weakref.ref[Any]"] = {}
_kept_fds = 0  # moved storages that keep a descriptor, which torch's own queues pass: at most a quarter of the file limit


def _forget(start: int, seg: str, kept: bool) -> None:
    global _kept_fds
    _moved.pop(start, None)
    _moved_by_seg.pop(seg, None)
    _kept_fds -= kept


def _storage_segment(t: "torch.Tensor") -> Optional[Tuple[_segments.Mapped, int]]:
    storage = t.untyped_storage()
    moved = _moved.get(storage.data_ptr())
    if moved is not None:
        return moved[0], 0
    mapped = _segments.find(storage.data_ptr())
    if mapped is None or storage.data_ptr() + storage.nbytes() > mapped.start + mapped.size:
        return None
    return mapped, storage.data_ptr() - mapped.start


def is_shared(t: "torch.Tensor") -> bool:
    return t.device.type == "cpu" and (_storage_segment(t) is not None or t.is_shared())


def _uint8_over(mm: Any, offset: int, nbytes: int) -> "torch.Tensor":
    import torch
    return torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes else torch.empty(0, dtype=torch.uint8)


def share_(t: "torch.Tensor") -> "torch.Tensor":
    """Move ``t``'s storage into a new nbmp segment, in place, like ``Tensor.share_memory_``:
    every tensor on that storage (views included) follows, and ``t.is_shared()`` is True."""
    import torch
    check_cpu(t)
    if _storage_segment(t) is not None or t.device.type != "cpu":
        return t
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:  # nothing to move; torch's share_memory_ of an empty tensor is a no-op too
        return t
    global _kept_fds
    by_torch: List[Any] = []
    keep = _kept_fds < resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4  # beyond: a storage torch's queues cannot pass
    buf = _segments.create(nbytes, lambda fd, size: by_torch.append(  # torch private: the storage its own rebuild_storage_fd makes
        torch.UntypedStorage._new_shared_fd_cpu(fd, size) if keep else torch.UntypedStorage.from_file(f"/proc/self/fd/{fd}", True, size)))  # type: ignore[attr-defined, unused-ignore]
    moved = by_torch[0]
    moved.copy_(storage)
    swap: Any = storage  # torch private, untyped (and torch may be absent where mypy runs)
    swap._swap_data_ptr_(moved)  # now the storage holds torch's mapping, `moved` the old memory
    mapped = _segments.find(ctypes.addressof(buf))
    if mapped is None:  # create() registers it: cannot happen
        raise RuntimeError("nbmp: a new shared-memory segment is missing from the registry")
    start = storage.data_ptr()
    _moved[start] = (mapped, buf)
    _moved_by_seg[mapped.seg] = weakref.ref(storage)
    _kept_fds += keep
    _finalizers.on_death(storage, _forget, start, mapped.seg, keep)
    return t


# -- The reducer -----------------------------------------------------------------------------------


def _reduce_tensor(t: "torch.Tensor") -> Any:
    import torch
    cls = type(t)
    if t.device.type == "meta":  # no data, only its shape: torch's own pickling, as torch.multiprocessing
        return t.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    check_cpu(t)
    if (cls is not torch.Tensor and cls is not torch.nn.Parameter) or t.layout != torch.strided \
            or t.is_quantized or t.is_nested:
        return t.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    if t.requires_grad and not t.is_leaf:
        raise RuntimeError(  # torch's type and words (torch.multiprocessing.reductions), with the fix
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not support "
            "crossing process boundaries. Fix: send t.detach() (and call requires_grad_() in the receiver).")
    found = _in_segment(t)
    if found is not None:
        mapped, offset = found
        handle = tuple(_segments.ticket_for(mapped))
        layout = (offset, t.untyped_storage().nbytes(), t.storage_offset(), tuple(t.size()), t.stride())
        return _rebuild_tensor, (handle, layout, t.dtype, cls, t.requires_grad)
    if t.is_shared():  # shared by torch: its storage goes by torch's handle (_reduce_storage)
        from torch.multiprocessing import reductions
        return reductions.reduce_tensor(t)
    if t.untyped_storage().nbytes() < _strategies.get_sharing_threshold():
        return _rebuild_small, (_contiguous_bytes(t).tobytes(), t.dtype, tuple(t.size()), cls, t.requires_grad)
    return _reduce_moved(t, cls)


def _in_segment(t: "torch.Tensor") -> Optional[Tuple[_segments.Mapped, int]]:
    """Where ``t``'s storage lies in an nbmp segment, once moved there if it was in plain memory
    (torch.multiprocessing's contract: what is sent moves to shared memory, in place). None:
    shared by torch, empty, only being probed, or a storage torch will not swap."""
    found = _storage_segment(t)
    if found is None and not t.is_shared() and not _pickling.probing() and t.untyped_storage().nbytes():
        try:
            share_(t)
        except RuntimeError:  # a storage torch will not swap (not resizable, not owned): it is copied
            return None
        found = _storage_segment(t)
    return found


def _contiguous_bytes(t: "torch.Tensor") -> Any:
    import torch
    data = t.detach().resolve_conj().resolve_neg().contiguous()
    return data.reshape(-1).view(torch.uint8).numpy()


def _rebuild_small(data: bytes, dtype: "torch.dtype", size: Tuple[int, ...], cls: type,
                   requires_grad: bool) -> "torch.Tensor":
    # A copy from bytes, not torch.load: nothing here runs a parallel kernel, which a
    # forked child of a parent that used OpenMP could hang in.
    import torch
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return _finish(flat.view(dtype).reshape(size), cls, requires_grad)


def _finish(t: "torch.Tensor", cls: type, requires_grad: bool) -> "torch.Tensor":
    import torch
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _reduce_moved(t: "torch.Tensor", cls: type) -> Any:
    flat = _contiguous_bytes(t)
    handle = tuple(_segments.create_moved(flat.nbytes, lambda fd, size: _segments.write_all(fd, size, flat),
                                          lambda buf: _segments.copy_into(buf, flat)))
    size = tuple(t.size())
    layout = (0, flat.nbytes, 0, size, _contiguous_strides(size))
    return _rebuild_tensor, (handle, layout, t.dtype, cls, t.requires_grad)


def _contiguous_strides(size: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _rebuild_tensor(handle: Tuple[Any, ...], layout: Tuple[int, int, int, Tuple[int, ...], Tuple[int, ...]],
                    dtype: "torch.dtype", cls: type, requires_grad: bool) -> "torch.Tensor":
    import torch
    offset, nbytes, storage_offset, size, stride = layout
    storage = _storage_at(handle, offset, nbytes)
    return _finish(torch.empty(0, dtype=dtype).set_(storage, storage_offset, size, stride), cls, requires_grad)


def _storage_at(handle: Tuple[Any, ...], offset: int, nbytes: int) -> Any:
    """The untyped storage a handle names: the very storage this process moved into that
    segment (torch's mapping of it), else ``nbytes`` of nbmp's mapping from ``offset``."""
    mm = _segments.attach(_segments.Handle._make(handle))
    ours = _moved_by_seg.get(handle[1])
    storage = ours() if ours is not None else None
    return storage if storage is not None else _uint8_over(mm, offset, nbytes).untyped_storage()


def _reduce_storage(storage: Any) -> Any:
    """A CPU storage is moved into a segment and crosses as a handle, as a tensor does (in the sender it
    comes back as the same storage); one torch shared goes by torch's handle, any other as a copy."""
    import torch
    untyped = storage if isinstance(storage, torch.UntypedStorage) else storage._untyped_storage
    if untyped.device.type == "cpu" and untyped.nbytes():
        found = _in_segment(torch.empty(0, dtype=torch.uint8).set_(untyped))  # a view of all of it
        if found is not None:
            mapped, offset = found
            dtype = None if untyped is storage else storage.dtype
            return _rebuild_storage, (tuple(_segments.ticket_for(mapped)), offset, untyped.nbytes(), dtype)
    if not untyped.is_shared():
        return storage.__reduce__()
    from torch.multiprocessing import reductions
    if untyped is storage:
        return reductions.reduce_storage(storage)
    if type(storage) is torch.storage.TypedStorage:
        return reductions.reduce_typed_storage(storage)
    return reductions.reduce_typed_storage_child(storage)


def _rebuild_storage(handle: Tuple[Any, ...], offset: int, nbytes: int, dtype: Optional["torch.dtype"]) -> Any:
    import torch
    untyped = _storage_at(handle, offset, nbytes)
    return untyped if dtype is None else torch.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def install() -> None:
    import torch
    _pickling.register_reducer(torch.Tensor, _reduce_tensor, subclasses=True)
    _pickling.register_reducer(torch.UntypedStorage, _reduce_storage, subclasses=True)
    _pickling.register_reducer(torch.storage.TypedStorage, _reduce_storage, subclasses=True)
