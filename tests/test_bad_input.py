"""Bad input fails fast: before any process, thread or shared-memory janitor starts, with a
TypeError (wrong type) or ValueError (wrong value) whose message names the argument, the
value given and what to write instead (docs/reliability.md). Worker counts are bounded."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import multiprocessing.util
import os
import subprocess
import threading
import types
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import nbmp
from conftest import child_pids
from helpers import run_main
from nbmp._sharing import _client


class StartedSomething(BaseException):
    """Raised by the guard below: the call started something before rejecting its input."""


def _refuse(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StartedSomething(f"the call started {what} before rejecting its input")
    return refuse


@contextlib.contextmanager
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make starting a process, a thread or a janitor connection raise StartedSomething."""
    children = child_pids()
    with monkeypatch.context() as m:
        m.setattr(os, "fork", _refuse("a process (os.fork)"))
        m.setattr(multiprocessing.util, "spawnv_passfds", _refuse("a process (spawn)"))
        m.setattr(subprocess.Popen, "__init__", _refuse("a subprocess (the janitor?)"))
        m.setattr(threading.Thread, "start", _refuse("a thread"))
        m.setattr(_client, "_connection", _refuse("talking to the shared-memory janitor"))
        yield
    assert child_pids() - children == set()


def _f(x: Any = None) -> Any:
    return x


def _rank(i: int) -> int:
    return i


@pytest.fixture
def a_file(tmp_path: Any) -> str:
    path = tmp_path / "not-a-dir"
    path.write_text("")
    return str(path)


# (id, call, expected exception, phrases the message must contain)
BAD = [
    # 1. worker counts: bounded, and the message says how to ask for more
    ("spawn-nprocs-huge", lambda: nbmp.spawn(_rank, nprocs=10**6), ValueError,
     ["nprocs=1000000", "nbmp.set_max_workers(1000000)"]),
    ("pool-huge", lambda: nbmp.Pool(10**6), ValueError, ["processes=1000000", "nbmp.set_max_workers"]),
    ("context-pool-huge", lambda: nbmp.get_context("spawn").Pool(10**6), ValueError, ["processes=1000000"]),
    ("parallel-map-workers-huge", lambda: nbmp.parallel_map(_f, [1, 2], workers=10**6), ValueError,
     ["workers=1000000", "NBMP_MAX_WORKERS"]),
    ("set-max-workers-zero", lambda: nbmp.set_max_workers(0), ValueError, ["n must be a positive int", "0"]),
    ("set-max-workers-str", lambda: nbmp.set_max_workers("8"), TypeError, ["'8'", "set_max_workers(256)"]),
    ("pool-processes-zero", lambda: nbmp.Pool(0), ValueError, ["processes", "0", "nbmp.Pool(4)"]),
    ("pool-processes-float", lambda: nbmp.Pool(2.5), TypeError, ["processes", "2.5"]),
    # 2. silent data loss
    ("share-masked", lambda: nbmp.share(np.ma.array([1, 2], mask=[0, 1])), TypeError,
     ["masked array", "mask", "nbmp.share(x.data)"]),
    ("share-memmap", None, TypeError, ["memmap", "np.asarray(x)"]),
    ("share-list", lambda: nbmp.share([1, 2]), TypeError, ["numpy array or a torch tensor", "list"]),
    # shapes and dtypes
    ("zeros-negative", lambda: nbmp.zeros(-1), ValueError, ["nbmp.zeros", "-1", "negative"]),
    ("zeros-float", lambda: nbmp.zeros(3.5), TypeError, ["nbmp.zeros", "3.5", "nbmp.zeros((3, 4))"]),
    ("zeros-negative-dim", lambda: nbmp.zeros((2, -3)), ValueError, ["(2, -3)", "negative"]),
    ("empty-negative", lambda: nbmp.empty(-5), ValueError, ["nbmp.empty", "-5"]),
    ("zeros-str", lambda: nbmp.zeros("abc"), TypeError, ["'abc'", "shape"]),
    ("zeros-none", lambda: nbmp.zeros(None), TypeError, ["None", "shape"]),
    ("zeros-bool", lambda: nbmp.zeros(True), TypeError, ["True", "shape"]),
    ("zeros-float-array", lambda: nbmp.zeros((2, np.array(2.5))), TypeError, ["nbmp.zeros", "array(2.5)", "is not an int"]),
    ("zeros-bad-dtype", lambda: nbmp.zeros(3, dtype="bogus"), TypeError, ["dtype 'bogus'", "dtype='float32'"]),
    ("zeros-object-dtype", lambda: nbmp.zeros(3, dtype=object), TypeError, ["Python objects"]),
    # Pool
    ("pool-initargs-int", lambda: nbmp.Pool(2, initializer=_f, initargs=5), TypeError,
     ["initargs", "5", "initargs=(x,)"]),
    ("pool-initializer", lambda: nbmp.Pool(2, initializer=5), TypeError, ["initializer", "5"]),
    ("pool-maxtasks", lambda: nbmp.Pool(2, maxtasksperchild=0), ValueError, ["maxtasksperchild", "0"]),
    # a wrong type that the standard Pool answers with ValueError: both, for the drop-in
    ("pool-maxtasks-str", lambda: nbmp.Pool(2, maxtasksperchild="12"), (TypeError, ValueError),
     ["maxtasksperchild", "'12'"]),
    ("parallel-map-int", lambda: nbmp.parallel_map(_f, 5), TypeError, ["iterable", "int 5", "range(10)"]),
    ("parallel-map-str", lambda: nbmp.parallel_map(_f, "abc"), TypeError, ["iterable", "'abc'"]),
    ("parallel-map-progress", lambda: nbmp.parallel_map(_f, [1], progress="yes"), TypeError,
     ["progress", "'yes'", "progress=True"]),
    ("parallel-map-func", lambda: nbmp.parallel_map(5, [1]), TypeError,
     ["fn must be callable", "5", "nbmp.parallel_map(f, items)"]),
    ("parallel-map-chunksize", lambda: nbmp.parallel_map(_f, [1], chunksize=0), ValueError, ["chunksize", "0"]),
    ("parallel-map-method", lambda: nbmp.parallel_map(_f, [1], start_method="threads"), ValueError,
     ["unknown start method 'threads'"]),
    # spawn
    ("spawn-lambda-no-rank", lambda: nbmp.spawn(lambda: 1, nprocs=2), TypeError,
     ["fn(i)", "worker's index", "lambda i"]),
    ("spawn-args-mismatch", lambda: nbmp.spawn(lambda i, a, b: 1, args=(1,), nprocs=2), TypeError,
     ["fn(i, a0)", "missing a required argument: 'b'"]),
    ("spawn-sinks-int", lambda: nbmp.spawn(_rank, nprocs=1, sinks=5), TypeError, ["sinks", "5", "sinks=[my_sink]"]),
    ("spawn-grace-str", lambda: nbmp.spawn(_rank, nprocs=1, grace_period="x"), TypeError,
     ["grace_period", "'x'", "grace_period=3.0"]),
    ("spawn-method-int", lambda: nbmp.spawn(_rank, nprocs=1, start_method=5), TypeError, ["start_method", "5"]),
    ("spawn-dashboard", lambda: nbmp.spawn(_rank, nprocs=1, dashboard="loud"), ValueError, ["dashboard='loud'"]),
    ("set-dashboard", lambda: nbmp.set_dashboard("loud"), ValueError,
     ["nbmp.set_dashboard('loud') is not", "nbmp.set_dashboard('text')", "nbmp.set_dashboard(False)"]),
    ("spawn-nprocs-zero", lambda: nbmp.spawn(_rank, nprocs=0), ValueError, ["nprocs", "0"]),
    # sharing settings
    ("strategy-dir-is-file", None, ValueError, ["is a file, not a directory", "directory='/dev/shm'"]),
    ("strategy-dir-missing", lambda: nbmp.set_sharing_strategy("file_system", directory="/no/such/dir"), ValueError,
     ["'/no/such/dir'", "does not exist"]),
    ("strategy-int", lambda: nbmp.set_sharing_strategy(5), TypeError, ["5", "'file_descriptor'"]),
    ("strategy-unknown", lambda: nbmp.set_sharing_strategy("shm"), ValueError, ["'shm'", "file_system"]),
    ("threshold-str", lambda: nbmp.set_sharing_threshold("1M"), TypeError, ["'1M'", "set_sharing_threshold("]),
    ("threshold-negative", lambda: nbmp.set_sharing_threshold(-1), ValueError, ["-1"]),
    # the drop-in's objects
    ("queue-maxsize", lambda: nbmp.Queue(maxsize="x"), TypeError, ["maxsize", "'x'", "nbmp.Queue(maxsize=100)"]),
    ("joinable-maxsize", lambda: nbmp.JoinableQueue(maxsize=1.5), TypeError, ["maxsize", "1.5"]),
    ("queue-maxsize-array", lambda: nbmp.Queue(maxsize=np.array(1.5)), TypeError, ["maxsize", "array(1.5)"]),
    ("queue-maxsize-bool", lambda: nbmp.Queue(maxsize=True), TypeError, ["maxsize", "True"]),
    ("array-bogus", lambda: nbmp.Array("bogus", 3), TypeError, ["bad typecode 'bogus'", "nbmp.Array('d', 10)"]),
    ("array-int-type", lambda: nbmp.Array(5, 3), TypeError, ["ctypes type", "5"]),
    ("array-negative", lambda: nbmp.Array("i", -3), ValueError, ["-3", ">= 0"]),
    ("array-size-float", lambda: nbmp.RawArray("i", 2.5), TypeError, ["2.5", "size_or_initializer"]),
    ("value-bogus", lambda: nbmp.Value("bogus"), TypeError, ["bad typecode 'bogus'"]),
    ("rawvalue-bogus", lambda: nbmp.RawValue(ctypes), TypeError, ["module"]),
    ("semaphore-negative", lambda: nbmp.Semaphore(-1), ValueError, ["value", "-1"]),
    ("bsemaphore-str", lambda: nbmp.BoundedSemaphore("2"), TypeError, ["value", "'2'"]),
    ("barrier-zero", lambda: nbmp.Barrier(0), ValueError, ["parties", "0"]),
    ("get-context-int", lambda: nbmp.get_context(5), TypeError, ["start method", "5", "get_context('spawn')"]),
    ("get-context-unknown", lambda: nbmp.get_context("threads"), ValueError, ["'threads'"]),
    ("process-target", lambda: nbmp.Process(target=5), TypeError, ["target", "5"]),
    ("process-args", lambda: nbmp.Process(target=_f, args=5), TypeError, ["args", "5", "args=(x,)"]),
    ("process-kwargs", lambda: nbmp.Process(target=_f, kwargs=[1]), TypeError, ["kwargs", "[1]"]),
    ("manager-serializer", lambda: nbmp.managers.SyncManager(serializer="json"), ValueError,
     ["unknown serializer 'json'", "'nbmp'", "'pickle'"]),
    ("manager-authkey-int", lambda: nbmp.managers.BaseManager(authkey=42), TypeError,  # the standard: 42 zero bytes
     ["authkey must be bytes", "int 42", "authkey=b'secret'"]),
    ("manager-authkey-str", lambda: nbmp.managers.SharedMemoryManager(authkey="secret"), TypeError,
     ["authkey must be bytes", "'secret'"]),
    ("manager-address-int", lambda: nbmp.managers.SyncManager(address=5), TypeError,
     ["address must be None", "int 5", "('localhost', 50000)"]),
    # fork safety settings
    ("seed-str", lambda: nbmp.seed("1"), TypeError, ["'1'", "nbmp.seed(1234)"]),
    ("worker-threads-zero", lambda: nbmp.set_worker_threads(0), ValueError, ["set_worker_threads", "0"]),
    ("fork-handler", lambda: nbmp.register_fork_handler(before=5), TypeError, ["before", "5"]),
]


def _special(case: str, a_file: str, tmp_path: Any) -> Callable[[], Any]:
    if case == "strategy-dir-is-file":
        return lambda: nbmp.set_sharing_strategy("file_system", directory=a_file)
    path = tmp_path / "data.bin"
    np.zeros(4).tofile(path)
    mm = np.memmap(path, dtype="float64", mode="r+", shape=(4,))
    return lambda: nbmp.share(mm)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case, call, error, phrases", BAD, ids=[b[0] for b in BAD])
def test_bad_input_fails_fast_with_a_message_that_says_what_to_do(case, call, error, phrases, monkeypatch,
                                                                  a_file, tmp_path):
    strategy = nbmp.get_sharing_strategy()
    call = call or _special(case, a_file, tmp_path)
    with nothing_starts(monkeypatch):
        with pytest.raises(error) as info:
            call()
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in the message: {message}"
    assert nbmp.get_sharing_strategy() == strategy  # nothing changed


def test_set_start_method_twice_says_what_to_do():
    out = run_main("""
        import nbmp
        nbmp.set_start_method("spawn")
        try:
            nbmp.set_start_method("forkserver")
        except RuntimeError as e:
            print(e)
        print(nbmp.get_start_method())
    """)
    assert "force=True" in out and "nbmp.get_context('forkserver')" in out and "'spawn'" in out
    assert out.strip().endswith("spawn")


# --------------------------------------------------------------------------
# The bound on worker counts, and how to raise it
# --------------------------------------------------------------------------


def test_the_default_bound_is_a_multiple_of_the_cpus_within_the_limits():
    import resource
    limit = nbmp.get_max_workers()
    assert 1 <= limit <= 4 * (os.cpu_count() or 1) + 32
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY:
        assert limit <= soft // 10


LOW_FILE_LIMIT = """
import os, resource, nbmp
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]  # the program's own files
n = nbmp.get_max_workers()
print(n, nbmp.spawn(lambda i: i, nprocs=n) == list(range(n)))
"""


def test_as_many_workers_as_the_bound_allows_start_under_a_low_file_limit():
    # Each spawn worker holds the parent's descriptors while it starts: the bound leaves them room.
    count, ran = run_main(LOW_FILE_LIMIT).split()
    assert int(count) >= 1 and ran == "True"


@pytest.mark.timeout(120)
def test_set_max_workers_and_the_environment_change_the_bound(monkeypatch):
    try:
        nbmp.set_max_workers(2)
        assert nbmp.get_max_workers() == 2
        with pytest.raises(ValueError, match=r"nprocs=3 .*at most 2"):
            nbmp.spawn(_rank, nprocs=3)
        assert nbmp.spawn(_rank, nprocs=2) == [0, 1]
        nbmp.set_max_workers(None)
        monkeypatch.setenv("NBMP_MAX_WORKERS", "3")
        assert nbmp.get_max_workers() == 3
        with pytest.raises(ValueError, match=r"processes=4 .*at most 3"):
            nbmp.Pool(4)
        monkeypatch.setenv("NBMP_MAX_WORKERS", "lots")
        with pytest.raises(ValueError, match="NBMP_MAX_WORKERS must be a positive int, not 'lots'"):
            nbmp.get_max_workers()
        monkeypatch.delenv("NBMP_MAX_WORKERS")
        nbmp.set_max_workers(4 * (os.cpu_count() or 1) + 40)  # above the default: allowed when asked for
        assert nbmp.get_max_workers() == 4 * (os.cpu_count() or 1) + 40
    finally:
        nbmp.set_max_workers(None)


@pytest.mark.timeout(120)
def test_parallel_map_starts_at_most_one_worker_per_item(monkeypatch):
    started = []
    real_init = nbmp._pool.Pool.__init__

    def recording_init(self, processes=None, *args, **kwargs):
        started.append(processes)
        real_init(self, processes, *args, **kwargs)

    monkeypatch.setattr(nbmp._pool.Pool, "__init__", recording_init)
    assert nbmp.parallel_map(_f, [1, 2], workers=8) == [1, 2]
    assert nbmp.parallel_map(_f, iter([3]), workers=4) == [3]
    assert nbmp.parallel_map(_f, []) == []
    assert started == [2, 1]


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_share_keeps_ndarray_subclasses_that_it_can():
    class Tagged(np.ndarray):
        pass

    x = np.arange(4).view(Tagged)
    x.tag = "kept"
    shared = nbmp.share(x)
    assert type(shared) is Tagged and shared.tag == "kept" and nbmp.is_shared(shared)
    assert (shared == np.arange(4)).all()
    m = nbmp.share(np.matrix([[1, 2], [3, 4]]))
    assert type(m) is np.matrix and nbmp.is_shared(m) and (m == [[1, 2], [3, 4]]).all()
    del shared, m


def test_a_target_that_cannot_take_the_index_is_also_torchs_process_raised_exception(monkeypatch):
    # torch.multiprocessing raises ProcessRaisedException for this mistake (from its first
    # worker); PyTorch's own test_multiprocessing_spawn expects that type.
    with nothing_starts(monkeypatch):
        with pytest.raises(nbmp.ProcessRaisedException) as caught:
            nbmp.spawn(lambda: 1, nprocs=2)
    assert isinstance(caught.value, TypeError) and caught.value.error_index == 0
    assert "fn is called as fn(i)" in str(caught.value)


def _decorated(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)
    return wrapper


SIGNATURES = [lambda: 0, lambda i: 0, lambda i, j: 0, lambda i, j=1: 0, lambda i, *a: 0, lambda *a: 0,
              lambda i, /, j: 0, lambda i, /: 0, lambda i, *, k: 0, lambda i, *, k=1: 0,
              lambda i, j=1, *a, k=2, **kw: 0, lambda **kw: 0, _decorated(lambda i, j: 0), functools.partial(_f),
              print]


@pytest.mark.parametrize("fn", SIGNATURES)
def test_spawns_quick_signature_check_never_lets_through_what_inspect_refuses(fn):
    # spawn reads a plain function's code object instead of calling inspect.signature (a tenth
    # of a millisecond before the first fork); anything it cannot tell goes to inspect.
    from nbmp._spawn.args import _takes
    for count in range(4):
        try:
            inspect.signature(fn).bind(*range(count))
            takes = True
        except TypeError:
            takes = False
        except ValueError:  # no signature to read (a builtin): spawn lets it through
            takes = None
        quick = _takes(fn, count)
        assert not quick or takes, (count, quick, takes)
        if type(fn) is types.FunctionType and "__wrapped__" not in fn.__dict__:
            assert quick == takes, (count, quick, takes)  # a plain function: the quick answer is the answer
