"""A worker's exception on its way to the parent: the one path for ``spawn`` and the Pool.

In the worker, :class:`CapturedException` keeps the exception (or a ``RemoteTaskError`` if it
would not survive the trip), its frames as plain tuples without nbmp's, and its chain as text. In
the parent the frames become a ``__traceback__`` again and are rendered with source lines looked up
there (cells labelled ``Cell In[5], line 3``). The Pool gets the exception with a standard
``multiprocessing.pool.RemoteTraceback`` as ``__cause__`` (``as_exception=True``); ``spawn`` a
:class:`Remote` record to build torch's message from.
"""

from __future__ import annotations

import linecache
import pickle
import sys
import traceback
import types
from dataclasses import dataclass
from multiprocessing.pool import RemoteTraceback  # type: ignore[attr-defined]  # typeshed omits this runtime name
from typing import Any, List, Optional, Sequence, Tuple

from .._base.exceptions import RemoteTaskError, in_nbmp
from . import pickling as _pickling
from .cells import label_cells

__all__ = ["CapturedException", "Remote"]

Frame = Tuple[str, int, str, str]  # filename, line number, function, source line


@dataclass(frozen=True)
class Remote:
    """Parent side: a worker's exception and its traceback as text (``Traceback ...`` to the
    exception's last line, chained exceptions first)."""

    exc: BaseException
    exc_type: str
    message: str
    text: str


class CapturedException:
    """Worker side: ``exc`` reduced to what rebuilds it in the parent (see the module docstring).

    ``skip``: files whose frames are the worker's machinery, not the user's code;
    ``header``: a line put before the traceback (the Pool's ``Pool worker 0 (pid 12) raised:``).
    """

    def __init__(self, exc: BaseException, *, skip: Sequence[str] = (), header: str = "",
                 as_exception: bool = True) -> None:
        self.exc_type = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
        self.message = str(exc)
        self.pickled = _survivor(exc, self.exc_type)
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename not in skip]
        while frames and in_nbmp(frames[0].filename):  # what called the user's code (%%nbmp's cell program)
            frames.pop(0)
        self.frames: List[Frame] = [(f.filename, f.lineno or 0, f.name, f.line or "") for f in frames]
        self.tail = "".join(traceback.format_exception_only(type(exc), exc))
        self.chain = _format_chain(exc)
        self.header = header
        self.as_exception = as_exception

    def __reduce__(self) -> Tuple[Any, ...]:
        parts = (self.pickled, self.exc_type, self.message, self.frames, self.tail, self.chain)
        return (_rebuild_exception, (self.header, *parts)) if self.as_exception else (_rebuild_remote, parts)


def _survivor(exc: BaseException, exc_type: str) -> bytes:
    """``exc`` pickled, if it survives the round trip; else a RemoteTaskError that says so."""
    try:
        data = _pickling.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return _pickling.dumps(RemoteTaskError(f"{exc_type}: {exc} (the exception could not be pickled back "
                                               f"to the parent)", exc_type=exc_type))


def _format_chain(exc: BaseException) -> str:
    inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if inner is None:
        return ""
    link = ("The above exception was the direct cause of the following exception:"
            if exc.__cause__ is not None else
            "During handling of the above exception, another exception occurred:")
    return "".join(traceback.format_exception(type(inner), inner, inner.__traceback__)) + f"\n{link}\n\n"


def _load(pickled: bytes, exc_type: str, message: str) -> BaseException:
    try:
        exc = pickle.loads(pickled)
    except Exception as err:  # e.g. the exception's module is not importable in the parent
        return RemoteTaskError(f"{exc_type}: {message} (the exception could not be unpickled in the parent: "
                               f"{type(err).__name__}: {err})", exc_type=exc_type)
    return exc if isinstance(exc, BaseException) else RemoteTaskError(f"{exc_type}: {message}", exc_type=exc_type)


def _worker_frames(frames: List[Frame]) -> Optional[types.TracebackType]:
    """A traceback whose frames stand for the worker's: each is a stub compiled under the worker
    frame's file and function name that raises at its line (jinja2 and tblib do the same)."""
    tb = None
    for filename, lineno, name, _ in reversed(frames):
        stub = compile("\n" * (lineno - 1) + "raise _Stub", filename, "exec").replace(co_name=name)
        if sys.version_info >= (3, 11):  # IPython names a frame by its qualified name
            stub = stub.replace(co_qualname=name)
        try:
            exec(stub, {"_Stub": _Stub})
        except _Stub as stopped:
            frame = stopped.__traceback__.tb_next.tb_frame  # type: ignore[union-attr]  # the stub's own frame
        # tb_lasti -1: no column range, so no carets under a line the stub does not hold
        tb = types.TracebackType(tb, frame, -1, lineno)
    return tb


class _Stub(Exception):
    pass


def _render(frames: List[Frame], tail: str, chain: str) -> str:
    lines = [chain, "Traceback (most recent call last):\n" if frames else  # raised as the function was called, or in C
             "(no frame of the task's own code ran: its function is built in, or was called with the wrong arguments)\n"]
    for filename, lineno, name, line in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {name}\n')
        line = line or linecache.getline(filename, lineno).strip()
        if line:
            lines.append(f"    {line}\n")
    lines.append(tail)
    return label_cells("".join(lines))


def _rebuild_remote(pickled: bytes, exc_type: str, message: str, frames: List[Frame], tail: str,
                    chain: str) -> Remote:
    exc = _load(pickled, exc_type, message).with_traceback(_worker_frames(frames))
    return Remote(exc, exc_type, message, _render(frames, tail, chain))


def _rebuild_exception(header: str, pickled: bytes, exc_type: str, message: str, frames: List[Frame], tail: str,
                       chain: str) -> BaseException:
    exc = _load(pickled, exc_type, message).with_traceback(_worker_frames(frames))
    exc.__cause__ = RemoteTraceback('\n"""\n' + header + _render(frames, tail, chain) + '"""')
    return exc
