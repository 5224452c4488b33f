"""Checking ``spawn``'s arguments before any process starts: each bad value gets a
``TypeError``/``ValueError`` that names it, the accepted values and the fix."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from multiprocessing import context
from types import FunctionType
from typing import Any, Dict, Tuple

from .._backend import pickling as _pickling
from .._backend import default_context
from .._base import checks as _checks
from .._base.exceptions import UncallableTargetError
from .output import check_output_mode

__all__ = ["check_arguments", "check_grace_period"]


def check_grace_period(grace_period: Any) -> float:
    """``grace_period`` as seconds (a number >= 0), or a TypeError/ValueError that says what to pass."""
    if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)):
        raise TypeError(f"grace_period must be a number of seconds, not {type(grace_period).__name__} "
                        f"{grace_period!r}; e.g. grace_period=3.0")
    if not grace_period >= 0:
        raise ValueError(f"grace_period must be a number of seconds >= 0, got {grace_period!r}; e.g. grace_period=3.0")
    return float(grace_period)


def check_arguments(fn: Any, args: Any, nprocs: Any, start_method: Any, output: Any, grace_period: Any,
                     sinks: Any) -> Tuple[Any, Tuple[Any, ...], int]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r} ({type(fn).__name__}); it is called as fn(i, *args), "
                        f"e.g. nbmp.spawn(lambda i: i * i, nprocs=4)")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"args must be a tuple of the arguments after i, got {args!r}; for one argument write args=(x,)")
    nprocs = _checks.worker_count(nprocs, "nprocs", "nprocs=4")
    _check_signature(fn, len(args))
    check_output_mode(output)
    check_grace_period(grace_period)
    if isinstance(sinks, (str, bytes)) or not isinstance(sinks, (Sequence, set, frozenset)):
        raise TypeError(f"sinks must be a list of objects with a handle(event) method, not "
                        f"{type(sinks).__name__} {sinks!r}; e.g. sinks=[my_sink]")
    if start_method is not None and not isinstance(start_method, str):
        raise TypeError(f"start_method must be None or a str, not {type(start_method).__name__} {start_method!r}; e.g. start_method='spawn'")
    for sink in sinks:
        if not callable(getattr(sink, "handle", None)):
            raise TypeError(f"every sink needs a handle(event) method; {sink!r} has none")
    ctx = default_context.get_context(start_method)
    args = tuple(args)
    if ctx.get_start_method() != "fork":
        _check_picklable(fn, args, ctx.get_start_method())
    return ctx, args, nprocs


def _takes(fn: Any, count: int) -> bool:
    """Whether ``fn`` is a plain Python function that takes ``count`` positional arguments, read
    from its code object (``inspect.signature`` is a hundred times slower, on the way to every
    spawn's first fork). False also where only ``inspect`` can tell (other callables, a function that
    declares another signature through ``__wrapped__`` or ``__signature__``)."""
    if type(fn) is not FunctionType or "__wrapped__" in fn.__dict__ or "__signature__" in fn.__dict__:
        return False
    code = fn.__code__
    if code.co_kwonlyargcount > len(fn.__kwdefaults__ or ()):
        return False  # a keyword-only parameter without a default
    required = code.co_argcount - len(fn.__defaults__ or ())
    return required <= count and (count <= code.co_argcount or bool(code.co_flags & inspect.CO_VARARGS))


def _check_signature(fn: Any, nargs: int) -> None:
    """Check that ``fn(i, *args)`` can be called, before any worker starts (a worker
    would only fail after every worker had started). A callable whose signature cannot
    be read (some builtins and C extensions) is let through."""
    if _takes(fn, 1 + nargs):
        return
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0, *range(nargs))
    except TypeError as exc:
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        params = ["i"] + [f"a{k}" for k in range(nargs)]
        call = f"fn({', '.join(params)})" if nargs else "fn(i)"
        what = "i = the worker's index" + (f", then the {nargs} item(s) of args" if nargs else "")
        raise UncallableTargetError(f"fn is called as {call} in each worker ({what}), but {name}{signature} "
                        f"cannot be called that way: {exc}. "
                        f"Give fn a first parameter for the index, e.g. "
                        f"nbmp.spawn(lambda {', '.join(params)}: ...{', args=(...)' if nargs else ''}), or pass "
                        f"its other parameters in args=(...)") from None


class _ProbePopen:
    """Stands in for the spawning Popen while checking that fn and args pickle, so
    that objects which only pickle while a child is being spawned (queues, locks,
    connections) pass the check as they will pass the real start."""

    @staticmethod
    def duplicate_for_child(fd: int) -> int:
        return fd

    @staticmethod
    def DupFd(fd: int) -> int:
        return fd


def _check_picklable(fn: Any, args: Tuple[Any, ...], method: str) -> None:
    roots: Dict[str, Any] = {"fn": fn, **{f"args[{k}]": arg for k, arg in enumerate(args)}}
    previous = context.get_spawning_popen()
    context.set_spawning_popen(_ProbePopen())  # type: ignore[arg-type]  # a stand-in with the Popen methods that reducers call
    try:
        _pickling.check_picklable((fn, args), roots, f"start workers with the {method!r} start method")
    finally:
        context.set_spawning_popen(previous)
