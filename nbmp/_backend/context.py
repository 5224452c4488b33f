"""nbmp's contexts: fork first, and every object they hand out pickles with cloudpickle.

The contexts hand out nbmp's ``Process``, queues, ``Pipe``, ``Pool`` and ``Manager``; the
default starts with ``"fork"`` wherever the platform has it, chosen here, not inherited (the
stdlib's is ``"spawn"`` on macOS and ``"forkserver"`` on Linux from 3.14), and is nbmp's own:
``nbmp.set_start_method`` never changes the standard module's.
"""

from __future__ import annotations

from multiprocessing import context, process
from typing import Any, Callable, Dict, Iterable, Optional

from .. import _base, _forking
from . import process as _process

__all__ = ["BaseContext", "ForkContext", "SpawnContext", "ForkServerContext", "DefaultContext", "Process",
           "default_context", "register_factory", "register_plugin", "plugin", "workers_context"]

# ``Pool``, ``Manager`` and ``cluster=`` come from upper layers, which register here (``import nbmp``
# registers stand-ins that import them on first use), so this layer never imports upward.
_factories: Dict[str, Callable[..., Any]] = {}
_plugins: Dict[str, Any] = {}


def register_factory(name: str, factory: Callable[..., Any]) -> None:
    """Make ``factory`` what contexts build for ``name`` (``"Pool"`` or ``"SyncManager"``)."""
    _factories[name] = factory


def register_plugin(name: str, plugin: Any) -> None:
    """Make ``plugin`` what :func:`plugin` returns for ``name`` (``"cluster"``: the backend
    ``spawn``, ``Pool`` and ``parallel_map`` hand a call given ``cluster=`` to)."""
    _plugins[name] = plugin


def plugin(name: str) -> Any:
    """The plugin registered for ``name``; None if none is."""
    return _plugins.get(name)


class BaseContext(context.BaseContext):
    """The stdlib's ``BaseContext``, handing out nbmp's objects."""

    _name: str  # each concrete context's start method; typeshed omits it

    def Pipe(self, duplex: bool = True) -> Any:
        """Return two connected nbmp Connections (cloudpickle on ``send``)."""
        from .connection import Pipe
        return Pipe(duplex)

    def Queue(self, maxsize: int = 0) -> Any:
        """Return an nbmp Queue (cloudpickle on ``put``)."""
        from .queues import Queue
        return Queue(_base.checks.queue_size(maxsize, "Queue"), ctx=self.get_context())

    def JoinableQueue(self, maxsize: int = 0) -> Any:
        """Return an nbmp JoinableQueue (cloudpickle on ``put``)."""
        from .queues import JoinableQueue
        return JoinableQueue(_base.checks.queue_size(maxsize, "JoinableQueue"), ctx=self.get_context())

    def Value(self, typecode_or_type: Any, *args: Any, lock: Any = True) -> Any:
        """Return a synchronized shared object (the stdlib's), after checking the type code."""
        _base.checks.ctype(typecode_or_type, "Value", "nbmp.Value('i', 0)")
        return super().Value(typecode_or_type, *args, lock=lock)

    def RawValue(self, typecode_or_type: Any, *args: Any) -> Any:
        """Return a shared object without a lock (the stdlib's), after checking the type code."""
        _base.checks.ctype(typecode_or_type, "RawValue", "nbmp.RawValue('d', 0.0)")
        return super().RawValue(typecode_or_type, *args)

    def Array(self, typecode_or_type: Any, size_or_initializer: Any, *, lock: Any = True) -> Any:
        """Return a synchronized shared array (the stdlib's), after checking its arguments."""
        _base.checks.ctype(typecode_or_type, "Array", "nbmp.Array('d', 10)")
        _base.checks.array_size(size_or_initializer, "Array", typecode_or_type)
        return super().Array(typecode_or_type, size_or_initializer, lock=lock)

    def RawArray(self, typecode_or_type: Any, size_or_initializer: Any) -> Any:
        """Return a shared array without a lock (the stdlib's), after checking its arguments."""
        _base.checks.ctype(typecode_or_type, "RawArray", "nbmp.RawArray('d', 10)")
        _base.checks.array_size(size_or_initializer, "RawArray", typecode_or_type)
        return super().RawArray(typecode_or_type, size_or_initializer)

    def Semaphore(self, value: int = 1) -> Any:
        """Return a Semaphore (the stdlib's), after checking ``value``."""
        return super().Semaphore(_base.checks.counter(value, "Semaphore", "value"))

    def BoundedSemaphore(self, value: int = 1) -> Any:
        """Return a BoundedSemaphore (the stdlib's), after checking ``value``."""
        return super().BoundedSemaphore(_base.checks.counter(value, "BoundedSemaphore", "value"))

    def Barrier(self, parties: int, action: Any = None, timeout: Any = None) -> Any:
        """Return a Barrier (the stdlib's), after checking ``parties`` and ``action``."""
        _base.checks.positive_int(parties, "parties", "nbmp.Barrier(4)")
        if action is not None and not callable(action):
            raise TypeError(f"action must be a callable or None, not {type(action).__name__} {action!r}")
        return super().Barrier(parties, action, timeout)

    def SimpleQueue(self) -> Any:
        """Return an nbmp SimpleQueue (cloudpickle on ``put``)."""
        from .queues import SimpleQueue
        return SimpleQueue(ctx=self.get_context())

    def Pool(self, processes: Optional[int] = None, initializer: Optional[Callable[..., Any]] = None,
             initargs: Iterable[Any] = (), maxtasksperchild: Optional[int] = None, *, cluster: Any = None) -> Any:
        """Return an nbmp Pool: tasks, results and the initializer travel by cloudpickle.
        ``cluster``: a ``distributed.Client`` or scheduler address runs the Pool on Dask (docs/cluster.md)."""
        return _factories["Pool"](processes, initializer, initargs, maxtasksperchild, context=self.get_context(), cluster=cluster)

    def Manager(self) -> Any:
        """Return a started :class:`nbmp.managers.SyncManager`."""
        manager = _factories["SyncManager"](ctx=self.get_context())
        manager.start()
        return manager

    def get_context(self, method: Optional[str] = None) -> "BaseContext":  # type: ignore[override]  # nbmp's contexts, not the stdlib's per-Literal ones
        """Return the nbmp context for ``method`` ('fork', 'spawn' or 'forkserver')."""
        if method is None:
            return self
        if not isinstance(method, str):
            raise TypeError(f"the start method must be a str, not {type(method).__name__} {method!r}; "
                            f"use one of {sorted(_concrete_contexts)}, e.g. nbmp.get_context('spawn')")
        ctx = _concrete_contexts.get(method)
        if ctx is None:
            raise ValueError(
                f"unknown start method {method!r}; use one of {sorted(_concrete_contexts)}"
                " (nbmp's default is 'fork')")
        return ctx


class ForkContext(BaseContext):
    _name = "fork"
    Process = _process.ForkProcess


class SpawnContext(BaseContext):
    _name = "spawn"
    Process = _process.SpawnProcess


class ForkServerContext(BaseContext):
    _name = "forkserver"
    Process = _process.ForkServerProcess


class Process(_process._NbmpProcess):
    """``nbmp.Process``: started by the method nbmp's default context names (fork first). Its name
    is the standard class's: processes are ``Process-N`` (logging's ``%(processName)s``) and reprs ``<Process ...>``.

    Example::

        >>> p = nbmp.Process(target=lambda: print("hi")); p.start(); p.join()
        hi
    """

    _start_method = None

    @staticmethod
    def _Popen(process_obj: process.BaseProcess) -> Any:
        return default_context.get_context().Process._Popen(process_obj)  # type: ignore[attr-defined]  # a concrete context: it has Process

    @staticmethod
    def _after_fork() -> None:
        default_context.get_context().Process._after_fork()  # type: ignore[attr-defined]  # a concrete context: it has Process


class DefaultContext(context.DefaultContext, BaseContext):
    """nbmp's default context: the stdlib's semantics, nbmp's contexts, fork first."""

    Process = Process  # type: ignore[assignment]  # nbmp's process classes subclass BaseProcess, not the stdlib's Process

    def set_start_method(self, method: Optional[str], force: bool = False) -> None:
        """Set nbmp's default start method (once, like the stdlib; ``force=True`` to change it)."""
        current = self.get_start_method(allow_none=True)
        if current is not None and not force:
            fixed = (f"context has already been set: nbmp's start method is {current!r} (set by an earlier "
                     f"set_start_method or by the first object made with the default method), and "
                     f"set_start_method may be called once")
            if method == current:  # a re-run cell: nothing would change
                raise RuntimeError(f"{fixed}. It is already {current!r}: drop this call, or write "
                                   f"nbmp.set_start_method({method!r}, force=True) in a cell that is run again")
            raise RuntimeError(
                f"{fixed}. To change it write nbmp.set_start_method({method!r}, force=True), or leave the default "
                f"alone and use a context for the objects that need another method: ctx = nbmp.get_context({method!r}); "
                f"ctx.Pool(...), or nbmp.spawn(..., start_method={method!r})")
        if method is not None:
            self.get_context(method)  # an unknown method: a clear error, nothing changed
        super().set_start_method(method, force=force)

    def get_all_start_methods(self) -> list[str]:
        """Return the start methods this platform supports, nbmp's default first."""
        return list(_concrete_contexts)


_concrete_contexts: Dict[str, BaseContext] = {}
_concrete_contexts["fork"] = ForkContext()
_concrete_contexts["spawn"] = SpawnContext()
_concrete_contexts["forkserver"] = ForkServerContext()


default_context = DefaultContext(_concrete_contexts["fork"])
_process.default_context = default_context


class _WorkersContext:
    """An nbmp context whose processes are workers: they ignore SIGINT from their first
    instruction and die with the process that started them (``_forking.Launch``). Everything
    but ``Process`` is the wrapped context's."""

    def __init__(self, ctx: BaseContext) -> None:
        self._ctx = ctx

    def Process(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802  (the context's name)
        # Each concrete context sets ``Process``; typeshed types it on the stdlib's subclasses only.
        started = self._ctx.Process(*args, **kwargs)  # type: ignore[attr-defined]
        started.launch = _forking.Launch(worker=True)
        return started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def __repr__(self) -> str:
        return f"<workers of {self._ctx!r}>"


def workers_context(ctx: Any) -> Any:
    """What a manager starts its server from, and an executor its workers: ``ctx`` (default: nbmp's), its
    processes workers if it is an nbmp context; a standard context starts standard processes."""
    ctx = ctx or default_context.get_context()
    return _WorkersContext(ctx) if isinstance(ctx, BaseContext) else ctx
