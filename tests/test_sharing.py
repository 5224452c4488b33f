"""Shared numpy arrays cross every nbmp channel as handles: no copy, writes seen both ways."""

from __future__ import annotations

import gc
import os
import pickle
import time

import numpy as np
import pytest

import nbmp
from conftest import TIMEOUT

MiB = 1 << 20


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


# Workers (module level: importable under spawn and forkserver).

def write_and_return(q_in, q_out):
    x = q_in.get()
    x[...] = 7
    q_out.put(x)


def write_views(q_in, q_out):
    views = q_in.get()
    for i, v in enumerate(views):
        v[...] = i + 1
    q_out.put(views)


def writeable_flags(q_in, q_out):
    q_out.put([x.flags.writeable for x in q_in.get()])


def facts_about(q_in, q_out):
    x = q_in.get()
    q_out.put((nbmp.is_shared(x), float(x.sum()), x.flags.writeable, type(x).__name__))


# --------------------------------------------------------------------------
# Creation and the public functions
# --------------------------------------------------------------------------


def test_zeros_empty_share_give_plain_shared_arrays():
    a = nbmp.zeros((64, 32), dtype="float32")
    b = nbmp.empty(10, dtype=np.int64)
    c = nbmp.share(np.arange(6.0).reshape(2, 3))
    assert type(a) is np.ndarray and a.dtype == np.float32 and a.shape == (64, 32) and not a.any()
    assert b.shape == (10,) and b.dtype == np.int64
    assert c.tolist() == [[0, 1, 2], [3, 4, 5]]
    for x in (a, b, c, a[3:9, ::2], a.T, a.reshape(-1)[::-7], c[1]):
        assert nbmp.is_shared(x)
    assert nbmp.share(c) is c
    assert not nbmp.is_shared(np.zeros(3)) and not nbmp.is_shared([1, 2]) and not nbmp.is_shared(a.copy())


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown sharing strategy 'shm'.*file_descriptor.*file_system"):
        nbmp.set_sharing_strategy("shm")
    with pytest.raises(ValueError, match=r"non-negative int.*-1"):
        nbmp.set_sharing_threshold(-1)
    with pytest.raises(TypeError, match=r"numpy array or a torch tensor, not list"):
        nbmp.share([1, 2, 3])
    with pytest.raises(TypeError, match="Python objects"):
        nbmp.zeros(3, dtype=object)
    assert nbmp.get_sharing_strategy() in nbmp.get_all_sharing_strategies()


def test_default_strategy_is_file_descriptor_on_linux():
    assert nbmp.get_all_sharing_strategies() == ["file_descriptor", "file_system"]
    assert nbmp.get_sharing_strategy() == "file_descriptor"


def test_usage_accounting(strategy):
    before = nbmp.shm_usage()
    a = nbmp.zeros(3 * MiB, dtype="uint8")
    b = nbmp.zeros((10, 10))
    during = nbmp.shm_usage()
    assert (during.segments, during.bytes) == (before.segments + 2, before.bytes + 3 * MiB + 800)
    assert during.local_segments == before.local_segments + 2
    assert during.strategy == strategy and during.shm_total >= during.shm_free > 0
    if strategy == "file_system":
        assert len([n for n in os.listdir("/dev/shm") if n.startswith(f"nbmp-{os.getpid()}-")]) == 2
    del a, b
    gc.collect()
    after = nbmp.shm_usage()
    assert (after.segments, after.bytes) == (before.segments, before.bytes)


# --------------------------------------------------------------------------
# Crossing processes
# --------------------------------------------------------------------------


def test_shared_array_round_trip_is_zero_copy(ctx, strategy):
    a = nbmp.zeros((256, 1024), dtype="float64")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=write_and_return, args=(q_in, q_out))
    p.start()
    q_in.put(a)
    back = q_out.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert (a == 7).all(), "the worker's writes must land in the parent's array"
    assert address(back) == address(a), "the array must come back as the same memory"
    assert nbmp.shm_usage().segments == 1


def test_views_cross_as_views(ctx):
    a = nbmp.zeros((20, 30), dtype="int32")
    views = [a[2:5, 3:9], a[10, ::3], a.T[::2, 15:18], a.reshape(600)[-1:550:-2], a[16:18].reshape(2, 3, 10)]
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=write_views, args=(q_in, q_out))
    p.start()
    q_in.put(views)
    back = q_out.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    expected = np.zeros_like(a)
    for i, v in enumerate([expected[2:5, 3:9], expected[10, ::3], expected.T[::2, 15:18],
                           expected.reshape(600)[-1:550:-2], expected[16:18].reshape(2, 3, 10)]):
        v[...] = i + 1
    np.testing.assert_array_equal(a, expected)
    for sent, got in zip(views, back):
        assert (address(got), got.strides, got.shape) == (address(sent), sent.strides, sent.shape)


def test_every_channel_carries_a_handle(ctx):
    a = nbmp.zeros(1000, dtype="int64")
    a[:] = 1

    def mark(x, i):
        x[i] = 100 + i  # a slot per task: concurrent workers never race on one element
        return x[:10]

    simple = ctx.SimpleQueue()
    simple.put(a)
    assert address(simple.get()) == address(a)
    joinable = ctx.JoinableQueue()
    joinable.put(a)
    assert address(joinable.get(timeout=TIMEOUT)) == address(a)
    joinable.task_done()
    left, right = ctx.Pipe()
    left.send(a[5:])
    assert address(right.recv()) == address(a) + 40
    with ctx.Pool(2) as pool:
        results = pool.starmap(mark, [(a, 1), (a, 2), (a, 3)])
    assert list(a[:4]) == [1, 101, 102, 103] and all(address(r) == address(a) for r in results)
    p = ctx.Process(target=mark, args=(a, 4))
    p.start()
    p.join(TIMEOUT)
    assert a[4] == 104


def test_a_map_function_carrying_arrays_reaches_every_worker(ctx):
    # A map's function is pickled once for all its tasks: every worker that loads it
    # must still get the arrays it carries (a shared one, and a big one that is moved).
    flags = nbmp.zeros(2, dtype="int64")
    big = np.arange(2 * MiB, dtype=np.float32)

    def meet(i):
        flags[i] = 1
        deadline = time.monotonic() + TIMEOUT
        while flags.sum() < 2 and time.monotonic() < deadline:  # both tasks at once: one per worker
            time.sleep(0.001)
        return int(flags.sum()), float(big[i + 1])

    with ctx.Pool(2) as pool:
        assert pool.map_async(meet, range(2), chunksize=1).get(TIMEOUT) == [(2, 1.0), (2, 2.0)]


def test_unshared_big_array_is_moved_once(ctx, strategy):
    x = np.arange(2 * MiB, dtype=np.float32)  # 8 MiB, above the 1 MiB threshold
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=write_and_return, args=(q_in, q_out))
    p.start()
    q_in.put(x)
    back = q_out.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert x[1] == 1, "the sender's array is copied, never written"
    assert (back == 7).all() and nbmp.is_shared(back)
    # the worker received the copy by mapping it and sent that same segment back: one segment, one copy
    usage = nbmp.shm_usage()
    assert (usage.segments, usage.bytes) == (1, x.nbytes)
    assert usage.local_segments == 1


def test_small_arrays_go_by_ordinary_pickling(ctx):
    x = np.arange(1000, dtype=np.float64)  # 8 KB
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=facts_about, args=(q_in, q_out))
    p.start()
    q_in.put(x)
    assert q_out.get(timeout=TIMEOUT) == (False, float(x.sum()), True, "ndarray")
    p.join(TIMEOUT)
    assert nbmp.shm_usage().segments == 0


def test_an_array_sent_read_only_arrives_read_only(ctx):
    # A view of a shared array (a handle), a big array (moved) and a small one (pickled): the
    # receiver of a handle must not write where the sender allowed no writes.
    shared = nbmp.zeros(100)
    sent = [shared[:50], np.arange(2 * MiB, dtype=np.float32), np.arange(10.0), shared[50:]]
    for a in sent[:3]:
        a.flags.writeable = False
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=writeable_flags, args=(q_in, q_out))
    p.start()
    q_in.put(sent)
    assert q_out.get(timeout=TIMEOUT) == [False, False, False, True]
    p.join(TIMEOUT)


def test_threshold_is_a_setting():
    x = np.ones(100)
    nbmp.set_sharing_threshold(0)
    try:
        back = pickle.loads(nbmp._backend.pickling.dumps(x))
        assert nbmp.is_shared(back) and (back == 1).all()
        assert nbmp.get_sharing_threshold() == 0
    finally:
        nbmp.set_sharing_threshold(1 << 20)
    del back
    assert not nbmp.is_shared(pickle.loads(nbmp._backend.pickling.dumps(x)))


def test_non_contiguous_and_fortran_arrays_are_moved_with_their_values(ctx):
    base = np.arange(4 * MiB, dtype=np.float32).reshape(2048, 2048)
    for x in (base[::2, ::3], np.asfortranarray(base)):
        got = pickle.loads(nbmp._backend.pickling.dumps(x))
        assert nbmp.is_shared(got) and got.shape == x.shape
        np.testing.assert_array_equal(got, x)
        del got


class Tagged(np.ndarray):
    """An ndarray subclass with an attribute (pickles like ndarray)."""


def test_subclasses_keep_their_type_and_attributes():
    a = nbmp.zeros(10).view(Tagged)
    a.tag = "hello"
    got = pickle.loads(nbmp._backend.pickling.dumps(a))
    assert type(got) is Tagged and got.tag == "hello" and address(got) == address(a)
    masked = np.ma.masked_array(np.zeros(MiB), mask=False)  # has its own __reduce__: ordinary pickling
    assert type(pickle.loads(nbmp._backend.pickling.dumps(masked))) is np.ma.MaskedArray


def test_object_arrays_are_pickled():
    x = np.array([{"a": 1}] * 200000, dtype=object)
    assert pickle.loads(nbmp._backend.pickling.dumps(x))[0] == {"a": 1}


def test_too_big_for_dev_shm_is_an_error_before_allocating():
    nbmp.set_sharing_strategy("file_system")
    try:
        free = nbmp.shm_usage().shm_free
        with pytest.raises(MemoryError, match=r"cannot put .* in shared memory: /dev/shm has .* free.*--shm-size"):
            nbmp.zeros(free + (1 << 30), dtype="uint8")
    finally:
        nbmp.set_sharing_strategy("file_descriptor")
    with pytest.raises(nbmp.SharedMemoryFullError, match="memory is available"):
        nbmp.zeros(1 << 60, dtype="uint8")
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"nbmp-{os.getpid()}-")]


def test_a_notebook_user_fills_a_shared_array_in_a_pool(kernel):
    cell = kernel.run("""
import nbmp, numpy as np
a = nbmp.zeros((8, 1000), dtype="float64")
def fill(row, i):
    row[:] = i
    return float(row.sum())
with nbmp.Pool(2) as pool:
    sums = pool.starmap(fill, [(a[i], i) for i in range(8)])
print(sums == [1000.0 * i for i in range(8)], (a[:, 0] == np.arange(8)).all(), nbmp.shm_usage().segments)
del a
""").raise_for_error()
    assert cell.stdout.split() == ["True", "True", "1"]
