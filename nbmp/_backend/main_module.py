"""``__main__`` across processes: what a forked worker already has of it, and the one
namespace the ``__main__`` functions a worker receives share there (docs/dropin.md says why:
by value, a function's globals would travel at every call and miss what the initializer set).

Sender: :class:`MainObjects` lets the pickler send by reference what a group of forked workers
inherited. Receiver: :func:`make_function` rebuilds a by-value ``__main__`` function in this
process's ``__main__`` (only in a process the sender started), and :func:`deliver` binds the
globals it carries, except names this process rebound or its initializer set (its own state wins).
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
import sys
import weakref
from multiprocessing import process as _process
from types import CodeType, FrameType, FunctionType
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from cloudpickle import cloudpickle as _cloudpickle

from .._base.util import ISSUES

__all__ = ["MainObjects", "make_function", "set_function_state", "Initializer", "main_namespace"]


class MainObjects:
    """The ``__main__`` functions and classes every worker of a group inherited by fork: what was bound
    to the same object at every :meth:`record` (each fork, replacements too) and is still bound now
    (:meth:`holds`). Only weak references are kept: a redefined function is freed as usual."""

    __slots__ = ("_refs", "_key", "_codes", "__weakref__")

    def __init__(self) -> None:
        self._refs: Optional[Dict[str, "weakref.ref[Any]"]] = None  # None: no fork recorded yet
        self._key = (os.getpid(), next(_keys))
        # id -> code of the __main__ frames at the group's first fork (and nested), kept alive so no id is reused.
        self._codes: Dict[int, CodeType] = {}
        _groups[self._key] = self

    def __reduce__(self) -> Tuple[Any, ...]:
        # Sent to a worker: the same object there if it has it by fork, else one holding nothing.
        return _group, (self._key,)

    def record(self, codes_from: Optional[FrameType] = None) -> None:
        """Just before a worker's fork: what ``__main__`` binds now. At the group's first fork,
        also the code of the ``__main__`` frames from ``codes_from`` up (see :meth:`function_by_code`)."""
        bound = _main_definitions()
        if self._refs is None:
            self._refs = {name: weakref.ref(obj) for name, obj in bound.items()}
            if codes_from is not None:
                self._codes = _codes_of_main_frames(codes_from)
        else:
            self._refs = {name: ref for name, ref in self._refs.items() if bound.get(name) is ref()}

    def holds(self, obj: Any) -> bool:
        """Whether every worker of the group has ``obj`` (a function or class) as ``__main__.<its name>``."""
        if not self._refs:
            return False
        name = getattr(obj, "__qualname__", None)
        if not isinstance(name, str):
            return False
        ref = self._refs.get(name)
        return ref is not None and ref() is obj and main_namespace().get(name) is obj

    def function_by_code(self, func: FunctionType) -> Optional[Tuple[Any, ...]]:
        """A reduction of ``func`` (a lambda made after the first fork) that sends its code by reference,
        or None unless it loads as the by-value copy would: the workers have its code by fork, and it
        has no closure, attributes, keyword defaults, annotations or type parameters, plain defaults and docstring,
        and names no globals but unrebound builtins. It skips cloudpickle's walk (copy-on-write faults)."""
        code = func.__code__
        if self._codes.get(id(code)) is not code or os.getpid() != self._key[0]:
            return None
        namespace = main_namespace()
        if func.__globals__ is not namespace or func.__closure__ is not None or func.__kwdefaults__ \
                or func.__dict__ or func.__annotations__ or getattr(func, "__type_params__", None):
            return None
        defaults, doc = func.__defaults__, func.__doc__
        if defaults is not None and not all(value.__class__ in ATOMS for value in defaults) \
                or doc is not None and doc.__class__ is not str:
            return None
        if any(name in namespace or not hasattr(builtins, name) for name in _cloudpickle._extract_code_globals(code)):
            return None
        return _function_from_code, (self._key, id(code), func.__name__, func.__qualname__, defaults, doc)


# The types whose values every pickler writes alike (also pickling.plain's atoms).
ATOMS = frozenset({int, float, complex, bool, str, bytes, type(None)})


def _codes_of_main_frames(frame: Optional[FrameType]) -> Dict[int, CodeType]:
    """The code of every ``__main__`` frame from ``frame`` up, and every code those hold."""
    namespace = main_namespace()
    found: Dict[int, CodeType] = {}
    pending = []
    while frame is not None:
        if frame.f_globals is namespace:
            pending.append(frame.f_code)
        frame = frame.f_back
    while pending:
        code = pending.pop()
        if id(code) not in found:
            found[id(code)] = code
            pending.extend(const for const in code.co_consts if const.__class__ is CodeType)
    return found


def _function_from_code(key: Tuple[int, int], code_id: int, name: str, qualname: str, defaults: Any,
                        doc: Optional[str]) -> FunctionType:
    """In a worker of the group ``key``: the function :meth:`MainObjects.function_by_code` sent."""
    group = _groups.get(key)
    code = None if group is None else group._codes.get(code_id)
    if code is None:
        raise RuntimeError(f"nbmp: a function was sent by its code to a process that did not inherit it "
                           f"({qualname}); this is a bug in nbmp, please report it at {ISSUES}")
    func = FunctionType(code, main_namespace(), name, defaults)
    func.__qualname__, func.__doc__ = qualname, doc
    return func


_keys = itertools.count()
_groups: "weakref.WeakValueDictionary[Tuple[int, int], MainObjects]" = weakref.WeakValueDictionary()


def _group(key: Tuple[int, int]) -> MainObjects:
    """The MainObjects ``key`` names, in a process that inherited it by fork; else an empty one."""
    found = _groups.get(key)
    return MainObjects() if found is None else found


def main_namespace() -> Dict[str, Any]:
    """This process's ``__main__`` namespace (a notebook's user namespace in a kernel). In a child
    that re-ran the script (spawn, forkserver), the one its functions were defined in: the
    standard ``__mp_main__`` module holds a copy, and its functions, sent by reference, read the original."""
    namespace = getattr(sys.modules.get("__main__"), "__dict__", {})
    if namespace.get("__name__") == "__mp_main__":
        return next((f.__globals__ for f in namespace.values() if f.__class__ is FunctionType and f.__module__ == "__mp_main__"), namespace)
    return namespace


def _main_definitions() -> Dict[str, Any]:
    """``__main__``'s top-level functions and classes, by the name they were defined with."""
    found = {}
    for name, obj in list(main_namespace().items()):
        if (obj.__class__ is FunctionType or isinstance(obj, type)) and _defined_as(obj, name):
            found[name] = obj
    return found


def _defined_as(obj: Any, name: str) -> bool:
    return getattr(obj, "__module__", None) == "__main__" and getattr(obj, "__qualname__", None) == name


# -- the receiver's side --------------------------------------------------------------

# name -> what this process's parent last delivered under it: a weak reference where the
# value takes one (no data kept alive that the worker dropped), else the value in a 1-tuple.
_delivered: Dict[str, Any] = {}
_INITIALIZER_SET: Tuple[Any] = (object(),)  # in place of a delivery: the name is the worker's
_MISSING = object()


_starter: Optional[int] = None  # the pid that started this process by spawn or forkserver (see note_starter)


def note_starter(pid: Optional[int]) -> None:
    """Called by a spawned or forkserver child before it loads its process object: its starter,
    which ``multiprocessing.parent_process()`` tells only once the bootstrap runs."""
    global _starter
    _starter = pid


def _namespace_from(sender: int) -> Optional[Dict[str, Any]]:
    """This process's ``__main__`` namespace when ``sender`` started it; else None."""
    parent = _process.parent_process()
    started_by = _starter if parent is None else parent.pid
    return main_namespace() if started_by == sender else None


def make_function(sender: int, code: CodeType, base_globals: Dict[str, Any], name: Optional[str],
                  argdefs: Any, closure: Any) -> FunctionType:
    """cloudpickle's rebuild of a by-value function defined in ``sender``'s ``__main__``: in a
    process ``sender`` started, its globals are this process's ``__main__`` namespace."""
    namespace = _namespace_from(sender)
    if namespace is None:
        return _cloudpickle._make_function(code, base_globals, name, argdefs, closure)  # type: ignore[no-any-return]  # cloudpickle: untyped
    with _builtins_kept(namespace):  # cloudpickle binds its module's __builtins__ in the globals it is given
        return _cloudpickle._make_function(code, namespace, name, argdefs, closure)  # type: ignore[no-any-return]  # as above


def set_function_state(func: FunctionType, state: Tuple[Dict[str, Any], Dict[str, Any]]) -> None:
    """cloudpickle's state of a by-value function; the globals it carries are delivered into
    this process's ``__main__`` as :func:`deliver` says when the function lives there."""
    namespace = main_namespace()
    if func.__globals__ is not namespace:
        _cloudpickle._function_setstate(func, state)
        return
    attributes, slots = state
    deliver(namespace, slots["__globals__"])
    with _builtins_kept(namespace):
        _cloudpickle._function_setstate(func, (attributes, {**slots, "__globals__": {}}))


@contextlib.contextmanager
def _builtins_kept(namespace: Dict[str, Any]) -> Iterator[None]:
    """``namespace["__builtins__"]`` as it was before the block (``__main__``'s is the builtins module)."""
    kept = namespace.get("__builtins__", _MISSING)
    try:
        yield
    finally:
        if kept is not _MISSING:
            namespace["__builtins__"] = kept


def deliver(namespace: Dict[str, Any], carried: Dict[str, Any]) -> None:
    """Bind the parent's values ``carried`` in ``namespace``, but for a name this process
    rebound since the parent's last delivery of it (its own state)."""
    for name, value in carried.items():
        last = _delivered.get(name)
        if last is not None and namespace.get(name, _MISSING) is not _value(last):
            continue
        namespace[name] = value
        try:
            _delivered[name] = weakref.ref(value)
        except TypeError:
            _delivered[name] = (value,)


def _value(reference: Any) -> Any:
    return reference[0] if reference.__class__ is tuple else reference()


class Initializer:
    """A Pool's (or executor's) initializer, run so that the ``__main__`` names it binds
    stay the worker's: a task's copy of the parent's value does not replace them.
    """

    __slots__ = ("initializer",)

    def __init__(self, initializer: Callable[..., Any]) -> None:
        self.initializer = initializer

    def __call__(self, *args: Any) -> None:
        namespace = main_namespace()
        before = dict(namespace)
        try:
            self.initializer(*args)
        finally:
            for name, value in list(namespace.items()):
                if before.get(name, _MISSING) is not value:
                    _delivered[name] = _INITIALIZER_SET
