"""nbmp's pickler: cloudpickle plus the stdlib's multiprocessing reducers plus nbmp's own.

What differs from ``multiprocessing.reduction.ForkingPickler``: ``__main__`` (notebook cell) and
local functions and classes go by value through cloudpickle, except to receivers that inherited
them by fork (:class:`sending_to`); framework reducers (numpy, torch) are installed the first time
the framework is in ``sys.modules``, never by importing it; a failure names the object and where
it sits. Only the sender needs this pickler: its output loads with plain ``pickle.loads`` wherever
cloudpickle (and, for a ``__main__`` function, nbmp) imports.
"""

from __future__ import annotations

import contextlib
import copyreg
import importlib
import io
import os
import pickle
import sys
import threading
from collections import ChainMap
from types import CodeType, FunctionType
from multiprocessing import reduction
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import cloudpickle

from .._base.exceptions import NbmpError
from . import interrupts as _interrupts, main_module as _main_module

__all__ = ["PicklingError", "Pickled", "dumps", "dumps_plain", "plain", "loads", "loads_whole", "dumps_reusable", "check_picklable", "probing", "note_single_use",
           "collecting_single_use", "sending_to", "receivers_inherited", "register_reducer", "register_framework_reducers", "refused_by_pickler",
           "add_location_note", "Refusal"]

Reducer = Callable[[Any], Tuple[Any, ...]]

loads = pickle.loads


class Pickled:
    """An object nbmp pickled already, handed to a channel that pickles with the standard pickler
    (the executor's call queue): it travels as its bytes, and loading it loads the object."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> Any:
        return loads, (self.data,)


class PicklingError(NbmpError, pickle.PicklingError, TypeError):
    """An object could not be pickled; the message names it and where it sits.

    Subclasses both :class:`pickle.PicklingError` and :class:`TypeError`, so code
    that catches either of the standard errors keeps working.
    """


class Refusal(ValueError):
    """Raised by one of nbmp's reducers that will not pickle an object (a CUDA tensor):
    reported as :class:`PicklingError`, like the pickler's own refusals."""


# -- The reducer table -----------------------------------------------------------------------------

_reducers: Dict[type, Reducer] = {}
_pending_frameworks: Dict[str, Callable[[], None]] = {}
# Reducers that also apply to subclasses, and the per-type answer cached from them
# (None: no such reducer), so that the pickler's hot path is one dict lookup.
_subclass_reducers: Dict[type, Reducer] = {}
_by_type: Dict[type, Optional[Reducer]] = {}


def register_reducer(cls: type, reducer: Reducer, subclasses: bool = False) -> None:
    """Make nbmp's pickler reduce instances of exactly ``cls`` with ``reducer``; with ``subclasses=True``
    of subclasses too, and it may return ``NotImplemented`` to leave an object to ordinary pickling."""
    if subclasses:
        _subclass_reducers[cls] = reducer
        _by_type.clear()
    else:
        _reducers[cls] = reducer


def _subclass_reducer(cls: type) -> Optional[Reducer]:
    found = next((_subclass_reducers[base] for base in cls.__mro__ if base in _subclass_reducers), None)
    _by_type[cls] = found
    return found


def register_framework_reducers(module_name: str, install: Callable[[], None]) -> None:
    """Call ``install()`` (it registers reducers) at the first pickling after ``module_name`` is imported."""
    _pending_frameworks[module_name] = install


_modules_seen = 0  # len(sys.modules) at the last look: nothing new imported, nothing to install


def _install_pending_frameworks() -> None:
    global _modules_seen
    if len(sys.modules) == _modules_seen:
        return
    _modules_seen = len(sys.modules)
    for name in [n for n in _pending_frameworks if n in sys.modules]:
        _pending_frameworks.pop(name)()


# -- The pickler -----------------------------------------------------------------------------------


# Functions and classes of nbmp and of multiprocessing, found by reference once: nobody
# registers those modules to go by value, nor rebinds their names.
_STABLE = ("nbmp.", "multiprocessing.")
_known: Set[Any] = set()


def _by_reference(obj: Any) -> bool:
    """Whether cloudpickle sends the function or class ``obj`` by reference: true for a
    top-level name of an imported module (not ``__main__``) while no module is registered
    to go by value. A subset of cloudpickle's own test, decided without it: what it leaves
    out (a method's qualified name, a registered module) is left to cloudpickle."""
    plain = obj.__class__ is FunctionType or obj.__class__ is type  # hashed by identity
    if plain and obj in _known:
        return True
    module_name, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module_name.__class__ is not str or name.__class__ is not str or module_name == "__main__" \
            or "." in name or "<" in name:
        return False
    module = sys.modules.get(module_name)
    if module is None or getattr(module, name, None) is not obj or cloudpickle.list_registry_pickle_by_value():
        return False
    if plain and module_name.startswith(_STABLE):
        _known.add(obj)  # every handle's rebuilder, a Pool's mapstar: decided once
    return True


_extra_reducers: Dict[type, Reducer] = reduction.ForkingPickler._extra_reducers  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
_cloud_reducers: Dict[type, Reducer] = cloudpickle.Pickler._dispatch_table
_copyreg_reducers: Dict[type, Reducer] = copyreg.dispatch_table  # type: ignore[assignment]  # the values are reducers


class Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle ships no type hints: its Pickler is Any
    """cloudpickle's pickler with multiprocessing's and nbmp's reducers."""

    # reducer_override reads every table (nbmp's, multiprocessing's, cloudpickle's, copyreg's, in that
    # order): the C pickler would look each type up in a ChainMap, raising and catching KeyError per miss.
    dispatch_table: Dict[type, Reducer] = {}

    def reducer_override(self, obj: Any) -> Any:
        # Called for every object but the builtin atoms and containers: keep it a few dict lookups.
        cls = type(obj)
        try:
            reducer = _by_type[cls]
        except KeyError:
            reducer = _subclass_reducer(cls)
        if reducer is not None:
            reduced = reducer(obj)
            if reduced is not NotImplemented:
                return reduced
        if cls is FunctionType or isinstance(obj, type):
            if _by_reference(obj):  # an importable function or class: at C speed, as cloudpickle would
                return NotImplemented
            inherited = getattr(_state, "inherited", None)
            if inherited is not None and inherited.holds(obj):  # the receivers have it: as the standard pickler
                return NotImplemented
            if inherited is not None and cls is FunctionType:
                reduced = inherited.function_by_code(obj)  # a lambda whose code the receivers have
                if reduced is not None:
                    return reduced
            return _hidden_standard_name(obj) or super().reducer_override(obj)  # else cloudpickle sends it by value
        reducer = _reducers.get(cls) or _extra_reducers.get(cls) or _cloud_reducers.get(cls) or _copyreg_reducers.get(cls)
        return NotImplemented if reducer is None else reducer(obj)

    def _dynamic_function_reduce(self, func: FunctionType) -> Tuple[Any, ...]:
        # cloudpickle's by-value reduction; a function of __main__ is rebuilt by nbmp, which in a
        # process this one started gives it that process's __main__ namespace (see main_module).
        reduced = super()._dynamic_function_reduce(func)
        if func.__globals__ is not _main_module.main_namespace():
            return reduced  # type: ignore[no-any-return]  # cloudpickle: untyped
        _, newargs, state = reduced[:3]
        return _main_module.make_function, (os.getpid(), *newargs), state, None, None, _main_module.set_function_state


def _hidden_standard_name(obj: Any) -> Optional[Tuple[Any, ...]]:
    """A by-reference reduction of a standard multiprocessing function or class whose module a program
    replaced by nbmp's mirror (``sys.modules["multiprocessing.sharedctypes"] = nbmp.sharedctypes``),
    else None; by value it would fail (its module's globals hold weak references)."""
    module_name, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not (isinstance(module_name, str) and module_name.startswith("multiprocessing.") and isinstance(name, str)):
        return None
    standard = getattr(sys.modules.get(module_name), "__dict__", {}).get("_standard")  # an nbmp mirror's
    if standard is None or "." in name or getattr(standard, name, None) is not obj:
        return None
    return _standard_name, (module_name, name)


def _standard_name(module_name: str, name: str) -> Any:
    """``name`` of the standard module ``module_name``, also where an nbmp mirror stands in its place."""
    module = importlib.import_module(module_name)
    return getattr(vars(module).get("_standard", module), name)


# -- Code objects keep the file they came from -----------------------------------------------------

_cloud_code_reduce: Reducer = _cloud_reducers[CodeType]
_FILENAME = 10  # co_filename's place among CodeType's constructor arguments (3.8 and later)


def _code_reduce(code: CodeType) -> Tuple[Any, ...]:
    """cloudpickle's reduction of a code object, keeping the file name that cloudpickle 3.1.3 replaces
    by ``"<dynamic-code>"`` for repeatable bytes: a worker's traceback finds a cell's source lines by
    it (:mod:`nbmp._backend.cells`), and nbmp's pickles are messages, not stored artefacts."""
    rebuild, args = _cloud_code_reduce(code)
    if rebuild is CodeType and args[_FILENAME] != code.co_filename:
        args = (*args[:_FILENAME], code.co_filename, *args[_FILENAME + 1:])
    return rebuild, args


register_reducer(CodeType, _code_reduce)


class _PlainPickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle ships no type hints
    """Plain cloudpickle (no multiprocessing or nbmp reducers: values, not handles), with
    code objects that keep their file name."""

    dispatch_table = ChainMap({CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table)


def dumps_plain(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of the code it sends by value kept
    (for a host that shares no memory with this one: every array goes by value)."""
    with io.BytesIO() as buf:
        _PlainPickler(buf, cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buf.getvalue()


_ATOMS = _main_module.ATOMS


def plain(obj: Any, depth: int = 2) -> bool:
    """Whether ``obj`` is a number, string, bytes, None, or a short tuple or list of those,
    nested at most ``depth`` deep (a Pool's result message, ``(job, i, (True, [3], ...))``): no
    reducer, no by-value code and no ``__main__`` object can be in it, so ``pickle`` alone
    sends it as nbmp's pickler would."""
    cls = type(obj)
    if cls in _ATOMS:
        return True
    if (cls is not tuple and cls is not list) or len(obj) > 16 or depth <= 0:
        return False
    return all(type(x) in _ATOMS or plain(x, depth - 1) for x in obj)


def dumps_plain_value(obj: Any) -> bytes:
    """:func:`dumps` of a value :func:`plain` accepts (``("ok", 3)``, a Pool's result message),
    or another that ``pickle`` alone sends as nbmp's pickler would (a Pool's map task whose
    function is already reduced: ``nbmp._pool.sending.plain_task_bytes``)."""
    return pickle.dumps(obj, cloudpickle.DEFAULT_PROTOCOL)


def dumps(obj: Any, protocol: Optional[int] = None) -> bytes:
    """Pickle ``obj`` with nbmp's pickler; see the module docstring."""
    if plain(obj):  # no reducer or by-value code applies: skip the Pickler
        return pickle.dumps(obj, cloudpickle.DEFAULT_PROTOCOL if protocol is None else protocol)
    if _pending_frameworks:
        _install_pending_frameworks()
    # The single-use parts go straight into the caller's collection (see collecting_single_use),
    # or into one of our own: an unpicklable part or an interrupt means no bytes, so nobody
    # will load them, and they are given back here.
    outer = getattr(_state, "releases", None)
    handed_out: List[Callable[[], None]] = [] if outer is None else outer
    mark = len(handed_out)
    _state.releases = handed_out
    try:
        with io.BytesIO() as buf:
            pickler = Pickler(buf, protocol)
            try:
                pickler.dump(obj)
            except BaseException:
                pickler.clear_memo()  # a kept traceback keeps the pickler: not what its reducers made
                raise
            return buf.getvalue()
    except BaseException:
        for release in handed_out[mark:]:
            release()
        del handed_out[mark:]
        raise
    finally:
        _state.releases = outer


@_interrupts.step
def loads_whole(data: Any) -> Any:
    """``pickle.loads(data)`` with a main-thread interrupt held until the load ends: one in the middle
    would leave the pickle's other shared-memory tickets untaken, their segments kept until the root exits."""
    return pickle.loads(data)


def dumps_explained(obj: Any, roots: Mapping[str, Any], action: str) -> bytes:
    """:func:`dumps`, raising a :class:`PicklingError` that locates the culprit among ``roots`` (the parts
    a user would recognise: ``{"target": ..., "args": ...}``); ``action`` says why pickling was needed."""
    try:
        return dumps(obj)
    except PicklingError:
        raise  # explained already, by a part that pickles itself this way (a Pool's function)
    except Exception as exc:
        if refused_by_pickler(exc):
            raise unpicklable(exc, roots, action) from exc
        add_location_note(exc, roots, action)  # user code raised: its own type reaches the caller
        raise


def dumps_reusable(obj: Any, roots: Mapping[str, Any], action: str) -> Tuple[bytes, bool]:
    """:func:`dumps_explained`, and whether the bytes may be loaded more than once
    (False when a reducer put a single-use part in them: see :func:`note_single_use`)."""
    before = getattr(_state, "single_use", 0)
    data = dumps_explained(obj, roots, action)
    return data, getattr(_state, "single_use", 0) == before


def check_picklable(obj: Any, roots: Mapping[str, Any], action: str) -> None:
    """Raise what :func:`dumps_explained` would, and keep nothing: for checks made before
    any process starts. The pickle is thrown away, so reducers see :func:`probing`."""
    with _probing():
        dumps_explained(obj, roots, action)


_state = threading.local()  # per thread: probing depth, single-use parts handed out, the receivers' inherited objects


def probing() -> bool:
    """Whether this thread pickles only to check, so reducers must hand out no resource (a shared-memory
    reference) that a load would take."""
    return getattr(_state, "depth", 0) > 0


def note_single_use(release: Optional[Callable[[], None]] = None) -> None:
    """Called by a reducer that puts in the pickle a part only one load may take (a shared-memory ticket);
    ``release`` gives it back if the bytes are never loaded (see :func:`collecting_single_use`)."""
    _state.single_use = getattr(_state, "single_use", 0) + 1
    collected = getattr(_state, "releases", None)
    if collected is not None and release is not None:
        collected.append(release)


class collecting_single_use:
    """Collect the ``release`` callables of the single-use parts pickled in this thread inside the block,
    to call if the bytes will never be loaded. A class, not a generator: it is on every ``Queue.put``'s path."""

    __slots__ = ("previous", "found")

    def __enter__(self) -> List[Callable[[], None]]:
        self.previous: Optional[List[Callable[[], None]]] = getattr(_state, "releases", None)
        self.found: List[Callable[[], None]] = []
        _state.releases = self.found
        return self.found

    def __exit__(self, *exc: Any) -> None:
        _state.releases = self.previous
        if self.previous is not None:  # an enclosing block collects them too
            self.previous.extend(self.found)


def receivers_inherited() -> Any:
    """The ``MainObjects`` the current :class:`sending_to` block pickles for, or None."""
    return getattr(_state, "inherited", None)


class sending_to:
    """Pickle, inside the block, the ``__main__`` objects that ``inherited`` (a ``MainObjects``) holds by
    reference, for receivers that inherited them by fork. A class, not a generator: it is on every Pool task's path."""

    __slots__ = ("inherited", "previous")

    def __init__(self, inherited: Any) -> None:
        self.inherited = inherited

    def __enter__(self) -> None:
        self.previous = getattr(_state, "inherited", None)
        _state.inherited = self.inherited

    def __exit__(self, *exc: Any) -> None:
        _state.inherited = self.previous


@contextlib.contextmanager
def _probing() -> Iterator[None]:
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


# -- Locating what could not be pickled ------------------------------------------------------------


def unpicklable(exc: BaseException, roots: Mapping[str, Any], action: str) -> PicklingError:
    """Build the error for ``exc``: which of ``roots`` (and where inside) failed."""
    path, culprit = _locate(roots)
    where = f"{path} ({type(culprit).__module__}.{type(culprit).__qualname__} object)" if path else "the object"
    reason = str(exc).rstrip(". ")
    if "Fix:" in reason:  # the error already says what to do (e.g. a CUDA tensor)
        return PicklingError(f"cannot pickle {where} to {action}: {reason}.")
    if "SemLock" in reason:  # a lock's own method (lock.acquire): the lock crosses as its bare semaphore
        return PicklingError(f"cannot pickle {where} to {action}: {reason}.\n{_LOCK_FIX}")
    fix = "pass it another way (create it inside the worker, or send what is needed to rebuild it)"
    if "start method" in action:  # only a spawn or forkserver start pickles what fork lets workers inherit
        fix += (", or use the 'fork' start method (nbmp's default), under which workers inherit their target "
                "and arguments without pickling")
    return PicklingError(f"cannot pickle {where} to {action}: {reason}.\nFix: {fix}.")


_LOCK_FIX = ("Fix: hand the lock to the workers as they start (initializer=f, initargs=(lock,) of a Pool or "
             "ProcessPoolExecutor, args= of a Process), or use a manager's: nbmp.Manager().Lock().")


def refused_by_pickler(exc: BaseException) -> bool:
    """Whether ``exc`` is the pickler refusing an object (``cannot pickle 'X' object``, a local
    object, cloudpickle's refusals) rather than an error raised by the object's own code."""
    if isinstance(exc, (pickle.PicklingError, TypeError, Refusal)):
        return True
    return isinstance(exc, AttributeError) and "pickle" in str(exc).lower()


def add_location_note(exc: BaseException, roots: Mapping[str, Any], action: str) -> None:
    """Add to ``exc`` (Python 3.11+) a note naming where, in ``roots``, pickling raised it."""
    if not hasattr(exc, "add_note"):
        return
    path, culprit = _locate(roots)
    where = f"{path} ({type(culprit).__module__}.{type(culprit).__qualname__} object)" if path else "the object"
    note = f"nbmp: raised while pickling {where} to {action}."
    if "fork context" in str(exc):  # the stdlib's refusal of a fork-made lock under spawn/forkserver
        note += ("\nFix: make the lock (or Value, Array, Queue) from the same start method: nbmp.sharedctypes / "
                 "nbmp.Lock() after nbmp.set_start_method(...), or ctx=nbmp.get_context(method).")
    elif "through inheritance" in str(exc):  # the stdlib's refusal of a lock sent to a running process
        note += f"\n{_LOCK_FIX}"
    exc.add_note(note)


def _locate(roots: Mapping[str, Any]) -> Tuple[str, Any]:
    for name, value in roots.items():
        if not _picklable(value):
            return _deepest(name, value, depth=6)
    return "", None


def _deepest(path: str, obj: Any, depth: int) -> Tuple[str, Any]:
    if depth:
        for sub_path, child in _children(path, obj):
            if not _picklable(child):
                return _deepest(sub_path, child, depth - 1)
    return path, obj


def _children(path: str, obj: Any) -> Iterator[Tuple[str, Any]]:
    if isinstance(obj, (list, tuple)):
        yield from ((f"{path}[{i}]", item) for i, item in enumerate(obj))
    elif isinstance(obj, dict):
        yield from ((f"{path}[{key!r}]", value) for key, value in obj.items())
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        yield from ((f"{path}.{key}", value) for key, value in vars(obj).items())
    if isinstance(code := getattr(obj, "__code__", None), CodeType):  # a function, or a method bound to one
        defaults, kwdefaults = getattr(obj, "__defaults__", None) or (), getattr(obj, "__kwdefaults__", None) or {}
        named = [*zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount], defaults), *kwdefaults.items()]
        yield from ((f"{path}<default {name}>", value) for name, value in named)
        yield from ((f"{path}<closure {name}>", cell.cell_contents) for name, cell in zip(code.co_freevars, getattr(obj, "__closure__", None) or ()))


def _picklable(obj: Any) -> bool:
    try:
        with _probing():
            dumps(obj)
    except Exception:  # a refusal, or anything else a __reduce__ may raise: the culprit either way
        return False
    return True

