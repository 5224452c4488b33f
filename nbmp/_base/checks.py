"""Argument checks for the public API, in one place: ``TypeError`` for a wrong type, ``ValueError``
for a wrong value, each naming the argument, the value and what to write, raised before anything
starts (docs/reliability.md). The worker-count bound (:func:`get_max_workers`) lives here too, so
that a typo (``nprocs=10**6``) fails at once instead of forking until the machine stops.
"""

from __future__ import annotations

import operator
import os
import resource
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Tuple

__all__ = ["WrongTypeError", "check_int", "positive_int", "worker_count", "get_max_workers", "set_max_workers", "arguments", "keywords",
           "items", "shape"]


# -- Counts ----------------------------------------------------------------------------------------


class WrongTypeError(TypeError, ValueError):
    """A wrong type where the standard module raises ValueError (``Pool(maxtasksperchild="12")``):
    both, so code written for either rule keeps working."""


def _index(value: Any) -> Optional[int]:
    """``value`` as an int (numpy's ints too), or None where it is none: a bool, a float, a str, an array."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_int(value: Any, name: str, example: str, minimum: int = 1, none_means: str = "",
              wrong_type: type = TypeError) -> Optional[int]:
    """``value`` as an int of at least ``minimum`` (a bool, float or str is a wrong type); ``none_means``
    (what None stands for) allows None; ``wrong_type=WrongTypeError`` where the stdlib raises ValueError."""
    what = {1: "a positive int", 0: "a non-negative int"}.get(minimum, f"an int >= {minimum}")
    what, fix = (what + " or None", f"e.g. {example} (None: {none_means})") if none_means else (what, f"e.g. {example}")
    if value is None and none_means:
        return None
    if (number := _index(value)) is None:
        raise wrong_type(f"{name} must be {what}, not {value!r}; {fix}")
    if number < minimum:
        raise ValueError(f"{name} must be {what}, not {value!r}; {fix}")
    return number


def positive_int(value: Any, name: str, example: str, none_ok: bool = False, wrong_type: type = TypeError) -> int:
    """``value`` as an int >= 1 (``check_int``; with ``none_ok`` the caller has let None through)."""
    return check_int(value, name, example, none_means="the default" if none_ok else "", wrong_type=wrong_type)  # type: ignore[return-value]  # None only with none_means, which the caller has ruled out


# Workers one call may start, unless raised by set_max_workers or NBMP_MAX_WORKERS:
# four per CPU plus a fixed allowance (I/O-bound work, small machines), within what the
# process's limits on processes and open files can take.
_PER_CPU, _ALLOWANCE = 4, 32
_FDS_PER_WORKER = 10  # a spawn worker's pipes hold 8 of the parent's descriptors while it starts, its exit 1 or 2
_max_workers: Optional[int] = None


def _default_max_workers() -> int:
    bound = _PER_CPU * (os.cpu_count() or 1) + _ALLOWANCE
    try:
        open_now = len(os.listdir("/dev/fd"))  # the program's descriptors stay its own
    except OSError:  # no /dev/fd, or not one descriptor left to read it with
        open_now = 0
    for limit, per_worker, used in ((resource.RLIMIT_NOFILE, _FDS_PER_WORKER, open_now), (resource.RLIMIT_NPROC, 2, 0)):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            bound = min(bound, max(1, (soft - used) // per_worker))
    return bound


def get_max_workers() -> int:
    """Return the most workers one ``spawn``, ``Pool`` or ``parallel_map`` may start.

    The default is ``4 × cpu_count() + 32``, lowered to fit the process's limits
    (the descriptors ``RLIMIT_NOFILE`` leaves free / 10, ``RLIMIT_NPROC / 2``); ``NBMP_MAX_WORKERS`` or
    :func:`set_max_workers` replace it.

    Example::

        >>> nbmp.get_max_workers()      # on 2 CPUs
        40
    """
    if _max_workers is not None:
        return _max_workers
    env = os.environ.get("NBMP_MAX_WORKERS", "").strip()
    if env:
        try:
            return positive_int(int(env), "NBMP_MAX_WORKERS", "NBMP_MAX_WORKERS=256")
        except ValueError:
            raise ValueError(f"the environment variable NBMP_MAX_WORKERS must be a positive int, not {env!r}; "
                             f"e.g. NBMP_MAX_WORKERS=256, or unset it for the default") from None
    return _default_max_workers()


def set_max_workers(n: Optional[int]) -> None:
    """Allow one ``spawn``/``Pool``/``parallel_map`` call to start up to ``n`` workers;
    ``None`` restores the default (see :func:`get_max_workers`).

    Example::

        >>> nbmp.set_max_workers(500)           # I really want 500 workers
        >>> nbmp.Pool(500)                      # doctest: +SKIP
        >>> nbmp.set_max_workers(None)
    """
    global _max_workers
    _max_workers = None if n is None else positive_int(n, "nbmp.set_max_workers(n): n", "nbmp.set_max_workers(256), or None for the default")


def worker_count(value: Any, name: str, example: str, none_ok: bool = False) -> int:
    """``value`` as a number of workers: a positive int no larger than :func:`get_max_workers`."""
    number = positive_int(value, name, example, none_ok)
    limit = get_max_workers()
    if number > limit:
        raise ValueError(
            f"{name}={number} is more workers than nbmp starts in one call (at most {limit} here: "
            f"4 per CPU + 32, within the process's limits on open files and processes); each is a process "
            f"that forks. Use {name}={min(os.cpu_count() or 1, limit)} (the CPU count), or, to really start "
            f"{number}, raise those limits (ulimit -n, ulimit -u) or call nbmp.set_max_workers({number}) first "
            f"(or set NBMP_MAX_WORKERS={number}); see docs/reliability.md")
    return number


# -- Collections -----------------------------------------------------------------------------------


def arguments(value: Any, name: str, example: str) -> Tuple[Any, ...]:
    """Positional arguments: a tuple or list (not a str, not a single value)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a tuple of arguments, not {type(value).__name__} {value!r}; for one argument write {example}")
    return tuple(value)


def function(value: Any, name: str = "func", example: str = "pool.map(f, items)") -> None:
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {value!r}: pass the function itself, e.g. {example}")


def keywords(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of keyword arguments, not {type(value).__name__} {value!r}; "
                        f"e.g. {name}={{'key': value}}, or leave it out")
    return value


def items(value: Any, name: str, example: str) -> Any:
    """Something to iterate over (a list, range, generator...); a str is refused too (a
    map over its characters is never what was meant)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an iterable of items (a list, a range, a generator...), "
                        f"not {type(value).__name__} {value!r}; e.g. {example}")
    return value


# -- Arrays ----------------------------------------------------------------------------------------


def shape(value: Any, call: str) -> Tuple[int, ...]:
    """An array shape: an int or a sequence of ints, each >= 0 (numpy's rules, nbmp's words)."""
    example = f"nbmp.{call}((3, 4)) or nbmp.{call}(10)"
    dims = value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else (value,)
    checked = []
    for dim in dims:
        if (number := _index(dim)) is None:
            raise TypeError(f"nbmp.{call}: shape must be an int or a tuple of ints, not {value!r} "
                            f"({type(dim).__name__} {dim!r} is not an int); e.g. {example}")
        if number < 0:
            raise ValueError(f"nbmp.{call}: shape must not have negative dimensions, got {value!r}; e.g. {example}")
        checked.append(number)
    return tuple(checked)


# -- Synchronisation and shared ctypes objects -----------------------------------------------------


def _sem_value_max() -> int:
    """The most a semaphore counts (a Queue's maxsize is one): beyond it the stdlib raises OverflowError."""
    from multiprocessing import synchronize
    return int(getattr(synchronize, "SEM_VALUE_MAX"))


def queue_size(value: Any, call: str) -> int:
    """A queue's ``maxsize``: an int (0 or less: unbounded, the stdlib's meaning), at most what a
    semaphore can count (the stdlib's OverflowError otherwise)."""
    if (size := _index(value)) is None:
        raise TypeError(f"{call}(maxsize=...) must be an int (0 for unbounded), not {type(value).__name__} "
                        f"{value!r}; e.g. nbmp.{call}(maxsize=100)")
    if size > _sem_value_max():
        raise ValueError(f"{call}(maxsize=...) must be at most {_sem_value_max()} (what a semaphore can "
                         f"count), not {size}; for an unbounded queue write nbmp.{call}()")
    return size


def ctype(value: Any, call: str, example: str) -> None:
    """A shared ctypes object's type: one of the ``array`` module's type codes or a ctypes type."""
    import ctypes
    from multiprocessing.sharedctypes import typecode_to_type  # type: ignore[attr-defined]
    if isinstance(value, str):
        if value not in typecode_to_type:
            # A TypeError, as the standard module's from 3.15 ("bad typecode"; a KeyError before).
            raise TypeError(f"nbmp.{call}: bad typecode {value!r}; use one of "
                             f"{''.join(sorted(typecode_to_type))!r} (e.g. 'i' int, 'd' double) or a ctypes "
                             f"type such as ctypes.c_double; e.g. {example}")
        return
    simple = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)
    if not (isinstance(value, type) and issubclass(value, simple)):
        raise TypeError(f"nbmp.{call}: the type must be a type code such as 'i' or 'd', or a ctypes type, "
                        f"not {type(value).__name__} {value!r}; e.g. {example}")


def array_size(value: Any, call: str, typecode_or_type: Any = "b") -> None:
    """An Array's ``size_or_initializer``: an int >= 0 or a sequence of values; a length whose
    bytes (of ``typecode_or_type``'s, already checked by ``ctype``) no address space can hold is a ValueError."""
    example = f"nbmp.{call}('d', 10) or nbmp.{call}('i', [1, 2, 3])"
    if (size := _index(value)) is None:
        if not isinstance(value, Iterable):  # a bool is not Iterable either; bytes and str are, as the standard module takes them
            raise TypeError(f"nbmp.{call}: size_or_initializer must be a length or a sequence of values, not "
                            f"{type(value).__name__} {value!r}; e.g. {example}")
        return
    if size < 0:
        raise ValueError(f"nbmp.{call}: the length must be >= 0, not {size}; e.g. {example}")
    import ctypes
    from multiprocessing.sharedctypes import typecode_to_type  # type: ignore[attr-defined]
    itemsize = ctypes.sizeof(typecode_to_type.get(typecode_or_type, ctypes.c_byte) if isinstance(typecode_or_type, str) else typecode_or_type)
    if size * itemsize > sys.maxsize:
        raise ValueError(f"nbmp.{call}: a length of {size} items of {itemsize} bytes is more memory than a process "
                         f"can address ({sys.maxsize} bytes); pass a smaller length, e.g. {example}")


def counter(value: Any, call: str, name: str) -> int:
    """A semaphore's initial value: an int >= 0."""
    example = f"nbmp.{call}({name}=2)"
    if (number := _index(value)) is None:
        raise TypeError(f"nbmp.{call}: {name} must be an int >= 0, not {type(value).__name__} {value!r}; e.g. {example}")
    if not 0 <= number <= _sem_value_max():
        raise ValueError(f"nbmp.{call}: {name} must be an int from 0 to {_sem_value_max()}, not {number}; e.g. {example}")
    return number


# -- Managers --------------------------------------------------------------------------------------


def manager(call: str, address: Any, authkey: Any, serializer: Any, serializers: Iterable[str]) -> None:
    """A manager's ``address`` (None, ``(host, port)`` or a socket path), ``authkey`` (None or
    bytes: the standard manager turns an int into that many zero bytes) and ``serializer``
    (a name of ``serializers``), checked before its server starts."""
    example = f"nbmp.managers.{call}(address=('localhost', 50000), authkey=b'secret')"
    host_port = isinstance(address, tuple) and len(address) == 2 and isinstance(address[0], str) \
        and isinstance(address[1], int) and not isinstance(address[1], bool)
    if not (address is None or host_port or isinstance(address, (str, bytes))):
        raise TypeError(f"{call}: address must be None (a new local address), a (host, port) tuple or a socket "
                        f"path, not {type(address).__name__} {address!r}; e.g. {example}")
    if authkey is not None and not isinstance(authkey, (bytes, bytearray)):
        raise TypeError(f"{call}: authkey must be bytes or None (the process's own key), not "
                        f"{type(authkey).__name__} {authkey!r}; e.g. {example}")
    names = sorted(serializers)
    if not isinstance(serializer, str) or serializer not in names:
        raise ValueError(f"{call}: unknown serializer {serializer!r}; use one of {names} ('nbmp', the default, "
                         f"pickles with cloudpickle; 'pickle' is the standard pickler)")
