"""Property-based fuzzing of the public API's arguments (hypothesis, derandomized: a failure
reproduces). Every call either works or raises TypeError/ValueError, in well under a second
and before any process, thread or janitor starts; and nothing accepted is silently changed
(an accepted worker count is that count, an accepted shape numpy's shape, a shared copy equal
to its original, of the same class). NBMP_FUZZ_EXAMPLES=N runs N examples per property."""

from __future__ import annotations

import ctypes
import numbers
import os
import time
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbmp
from test_bad_input import StartedSomething, nothing_starts

FUZZ = settings(max_examples=int(os.environ.get("NBMP_FUZZ_EXAMPLES", "40")), derandomize=True, database=None,
                deadline=None, suppress_health_check=list(HealthCheck))
BOUND = 3.0  # seconds: < 1 s on a quiet machine; this one is shared

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-3, 8), st.floats(),
    st.text(max_size=6), st.binary(max_size=3), st.lists(st.integers(-3, 5), max_size=3),
    st.integers(2**31 - 2, 2**31 + 1), st.tuples(st.integers(-3, 5), st.integers(-3, 5)), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from([object(), print, np.int64(3), np.float32(1.5), 1j, Ellipsis, range(3), "fork", "spawn",
                     "file_system", "file_descriptor", ctypes.c_int, "i", "d"]),
)


def _rank(i: int) -> int:
    return i


def _outcome(call: Callable[[], Any]) -> str:
    """'accepted' (it returned, or went on to start something) or 'rejected' (TypeError,
    ValueError or SharedMemoryFullError with a message); anything else, a slow answer or a start fails the test."""
    started = time.monotonic()
    try:
        with nothing_starts(pytest.MonkeyPatch):
            call()
        outcome = "accepted"
    except StartedSomething:
        outcome = "accepted"
    except (TypeError, ValueError, nbmp.SharedMemoryFullError) as error:  # the last: documented (sharing.md)
        assert str(error), f"{type(error).__name__} without a message"
        outcome = "rejected"
    took = time.monotonic() - started
    assert took < BOUND, f"the call took {took:.2f} s to answer"
    return outcome


def _count_ok(value: Any, none_ok: bool = False) -> bool:
    if value is None:
        return none_ok
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and 1 <= value <= nbmp.get_max_workers()


@FUZZ
@given(nprocs=ANYTHING)
def test_spawn_nprocs(nprocs):
    assert (_outcome(lambda: nbmp.spawn(_rank, nprocs=nprocs)) == "accepted") == _count_ok(nprocs), nprocs


@FUZZ
@given(processes=ANYTHING)
def test_pool_processes(processes):
    assert (_outcome(lambda: nbmp.Pool(processes)) == "accepted") == _count_ok(processes, none_ok=True), processes


@FUZZ
@given(workers=ANYTHING)
def test_parallel_map_workers(workers):
    accepted = _outcome(lambda: nbmp.parallel_map(_rank, [1, 2], workers=workers)) == "accepted"
    assert accepted == _count_ok(workers, none_ok=True), workers


@FUZZ
@given(args=ANYTHING, start_method=ANYTHING, grace_period=ANYTHING)
def test_spawn_other_arguments(args, start_method, grace_period):
    _outcome(lambda: nbmp.spawn(lambda i, *a: i, args=args, nprocs=1, start_method=start_method,
                                grace_period=grace_period))


@FUZZ
@given(initargs=ANYTHING, maxtasksperchild=ANYTHING)
def test_pool_other_arguments(initargs, maxtasksperchild):
    _outcome(lambda: nbmp.Pool(1, initializer=_rank, initargs=initargs, maxtasksperchild=maxtasksperchild))


SHAPES = st.one_of(ANYTHING, st.lists(st.one_of(st.integers(-2, 4), ANYTHING), max_size=3).map(tuple))
DTYPES = st.one_of(st.sampled_from([float, int, bool, "float32", "int8", "complex64", "<u2", ">f8", "U3", "S2",
                                    "V4", object, "M8[s]", "bogus", None, 5, [("a", "i4")]]), ANYTHING)


@FUZZ
@given(make=st.sampled_from(["zeros", "empty"]), shape=SHAPES, dtype=DTYPES)
def test_zeros_and_empty_agree_with_numpy_or_refuse(make, shape, dtype):
    try:
        like = getattr(np, make)(shape, dtype)
    except Exception:  # numpy refuses (or would not fit): nbmp must refuse too
        like = None
    if like is not None and like.nbytes > 1 << 20:
        return
    if _outcome(lambda: getattr(nbmp, make)(shape, dtype)) == "rejected":
        return
    assert like is not None, f"nbmp.{make}({shape!r}, {dtype!r}) accepted what numpy refuses"
    got = getattr(nbmp, make)(shape, dtype)
    assert (got.shape, got.dtype) == (like.shape, like.dtype) and nbmp.is_shared(got)
    if make == "zeros":
        assert got.tobytes() == like.tobytes()


ARRAYS = hnp.arrays(st.one_of(hnp.scalar_dtypes(), st.just(np.dtype("U2"))), hnp.array_shapes(min_dims=0, max_side=4))


@FUZZ
@given(x=st.one_of(ARRAYS, ARRAYS.map(lambda a: a.T), ARRAYS.map(lambda a: a[::2] if a.ndim else a), ANYTHING))
def test_share_returns_an_equal_copy_of_the_same_class_or_refuses(x):
    if _outcome(lambda: nbmp.share(x)) == "rejected":
        assert not isinstance(x, np.ndarray) or x.dtype.hasobject, f"refused {type(x).__name__} {x!r}"
        return
    got = nbmp.share(x)
    assert type(got) is type(x) and got.dtype == x.dtype and got.shape == x.shape
    assert got.tobytes() == x.tobytes() and nbmp.is_shared(got)


@FUZZ
@given(maxsize=ANYTHING)
def test_queue_maxsize(maxsize):
    def make() -> None:
        q = nbmp.Queue(maxsize=maxsize)
        assert q._maxsize == maxsize or (maxsize <= 0 and q._maxsize > 0)  # the stdlib's: <= 0 is unbounded
        q.close()
    _outcome(make)


@FUZZ
@given(typecode=ANYTHING, size=ANYTHING)
def test_array_and_value(typecode, size):
    def array() -> None:
        arr = nbmp.Array(typecode, size)
        assert len(arr) == (size if isinstance(size, numbers.Integral) else len(size))
    _outcome(array)
    _outcome(lambda: nbmp.Value(typecode, size))
    _outcome(lambda: nbmp.RawArray(typecode, size))


@FUZZ
@given(value=ANYTHING)
def test_semaphores_and_barrier(value):
    for make in (nbmp.Semaphore, nbmp.BoundedSemaphore, nbmp.Barrier):
        _outcome(lambda: make(value))


def test_array_of_an_impossible_length():
    # found by the fuzzing: ctypes raised OverflowError ('array too large')
    for make in (nbmp.Array, nbmp.RawArray):
        with pytest.raises(ValueError, match=r"length of 4611686018427387904 items of 4 bytes .* smaller length"):
            make("i", 2**62)


@FUZZ
@given(name=ANYTHING, directory=st.one_of(st.none(), st.just("/dev/shm"), st.just("/no/such"), ANYTHING))
def test_set_sharing_strategy(name, directory):
    before = nbmp.get_sharing_strategy()
    try:
        if _outcome(lambda: nbmp.set_sharing_strategy(name, directory=directory)) == "accepted":
            assert nbmp.get_sharing_strategy() == name
    finally:
        nbmp.set_sharing_strategy(before)


@FUZZ
@given(method=ANYTHING)
def test_set_start_method_and_get_context(method):
    before = nbmp.get_start_method()
    try:
        if _outcome(lambda: nbmp.set_start_method(method, force=True)) == "accepted":
            assert method is None or nbmp.get_start_method() == method
        if _outcome(lambda: nbmp.get_context(method)) == "accepted" and method is not None:
            assert nbmp.get_context(method).get_start_method() == method
    finally:
        nbmp.set_start_method(before, force=True)
