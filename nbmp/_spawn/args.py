"""Checking ``spawn``'s arguments before any process starts: each bad value gets a
``TypeError``/``ValueError`` that names it, the accepted values and the fix."""

from __future__ import annotations

import os
from collections.abc import Sequence
from multiprocessing import context
from typing import Any, Dict, Tuple

from .._backend import pickling as _pickling
from .._backend import default_context
from .._base.util import check_int
from .output import check_output_mode

__all__ = ["check_arguments"]


def check_arguments(fn: Any, args: Any, nprocs: Any, start_method: Any, output: Any, grace_period: Any,
                     sinks: Any) -> Tuple[Any, Tuple[Any, ...], int]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r} ({type(fn).__name__}); it is called as fn(i, *args), "
                        f"e.g. nbmp.spawn(lambda i: i * i, nprocs=4)")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"args must be a tuple of the arguments after i, got {args!r}; "
                        f"for one argument write args=(x,)")
    nprocs = _check_nprocs(nprocs)
    check_output_mode(output)
    if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or not grace_period >= 0:
        raise ValueError(f"grace_period must be a number of seconds >= 0, got {grace_period!r}")
    for sink in sinks:
        if not callable(getattr(sink, "handle", None)):
            raise TypeError(f"every sink needs a handle(event) method; {sink!r} has none")
    ctx = default_context.get_context(start_method)
    args = tuple(args)
    if ctx.get_start_method() != "fork":
        _check_picklable(fn, args, ctx.get_start_method())
    return ctx, args, nprocs


def _check_nprocs(nprocs: Any) -> int:
    example = f"nprocs={os.cpu_count() or 1}, the number of worker processes"
    return check_int(nprocs, "nprocs", example)  # type: ignore[return-value]


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
