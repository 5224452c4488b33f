"""Reuse on the sharing paths: freed segments come back from a bounded per-process pool, never
while anything still uses them; a ticket for a segment the receiver maps is carried again by
its next send. No timings here (see benchmarks/bench_sharing.py)."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from typing import Iterator

import numpy as np
import pytest

import nbmp
from conftest import TIMEOUT
from helpers import wait_until
from nbmp._sharing import _pool, _registry
from nbmp._sharing._ledger import live_segments, pooled_segments

MiB = 1 << 20

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif("file_descriptor" not in nbmp.get_all_sharing_strategies(),
                                 reason="the pool keeps memory files (file_descriptor) only")]


@pytest.fixture(autouse=True)
def fresh_pool() -> Iterator[None]:
    """An empty pool with the default settings before and after each test, and nothing of it
    left with the janitor after (on top of the suite's leak guard)."""
    before = nbmp.get_sharing_pool()
    nbmp.set_sharing_pool(0)
    nbmp.set_sharing_pool(*before)
    yield
    nbmp.set_sharing_pool(0)
    nbmp.set_sharing_pool(*before)
    wait_until(lambda: not pooled_segments(), "the pool is given back")


def segment_of(a: np.ndarray) -> str:
    mapped = _registry.find(a.__array_interface__["data"][0])
    assert mapped is not None, "not in a segment of this process"
    return mapped.seg


def memfds() -> int:
    """Memory files this process has open or mapped (a new segment is one more)."""
    with open(f"/proc/{os.getpid()}/maps") as f:
        maps = f.read()
    return maps.count("/memfd:nbmp-") - maps.count("/memfd:nbmp-board")


# Workers (module level).

def hold_then_check(q_in, q_out):
    first = q_in.get()   # a moved array: this process holds its segment
    second = q_in.get()  # the next one, moved while the first is held
    q_out.put((float(first.min()), float(first.max()), float(second.min())))
    q_in.get()


def read_inherited_later(a, started, q_out):
    started.set()
    time.sleep(0.5)  # the parent lets go of `a` and shares anew meanwhile
    q_out.put((float(a.min()), float(a.max())))


def make_free_and_die(q_out):
    a = nbmp.share(np.ones(2 * MiB, dtype="uint8"))
    seg = segment_of(a)
    del a
    gc.collect()
    q_out.put(seg)
    time.sleep(TIMEOUT)


def echo(q_in, q_out):
    while True:
        item = q_in.get()
        if item is None:
            return
        q_out.put(item)
        del item  # let go before waiting for the next


@contextlib.contextmanager
def worker(target, start_method: str = "fork") -> Iterator[tuple]:
    """A worker on (q_in, q_out); on leaving, it is sent None and must exit cleanly."""
    ctx = nbmp.get_context(start_method)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=target, args=(q_in, q_out))
    p.start()
    try:
        yield q_in, q_out
    finally:
        q_in.put(None)
        p.join(TIMEOUT)
    assert p.exitcode == 0


# --------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------


def test_a_freed_segment_is_reused_without_a_new_one():
    a = nbmp.share(np.ones(2 * MiB, dtype="uint8"))
    seg, files = segment_of(a), memfds()
    del a
    wait_until(lambda: seg in pooled_segments(), "the freed segment is in the pool")
    assert seg not in live_segments()  # free: not counted as live memory
    b = nbmp.share(np.full(2 * MiB, 3, dtype="uint8"))
    assert segment_of(b) == seg and memfds() == files
    assert (b == 3).all()
    c = nbmp.zeros(2 * MiB, dtype="uint8")  # the pool's only segment is b's: a new one
    assert segment_of(c) != seg and not c.any()
    del b
    wait_until(lambda: seg in pooled_segments(), "b's segment is free again")
    d = nbmp.zeros(2 * MiB, dtype="uint8")  # reused, and zeroed
    assert segment_of(d) == seg and not d.any()


def test_a_sent_array_reuses_the_segment_its_receiver_let_go_of():
    with worker(echo) as (q_in, q_out):
        x = np.ones(2 * MiB, dtype="uint8")
        q_in.put(x)
        back = q_out.get(timeout=TIMEOUT)
        seg = segment_of(back)
        del back
        wait_until(lambda: seg in pooled_segments(), "the moved segment is free")
        x[:] = 5
        q_in.put(x)  # copied into the freed segment: no new memory file
        back = q_out.get(timeout=TIMEOUT)
        assert segment_of(back) == seg and (back == 5).all()
        del back


def test_reuse_never_hands_out_a_segment_still_held():
    with worker(hold_then_check) as (q_in, q_out):
        q_in.put(np.ones(2 * MiB, dtype="uint8"))
        q_in.put(np.full(2 * MiB, 9, dtype="uint8"))  # the first is held by the worker: not reused
        assert q_out.get(timeout=TIMEOUT) == (1.0, 1.0, 9.0)


def test_a_segment_a_forked_child_inherited_is_never_reused():
    ctx = nbmp.get_context("fork")
    a = nbmp.share(np.ones(2 * MiB, dtype="uint8"))
    seg = segment_of(a)
    started, q_out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=read_inherited_later, args=(a, started, q_out))
    p.start()
    try:
        assert started.wait(TIMEOUT)
        del a
        gc.collect()
        b = nbmp.share(np.full(2 * MiB, 7, dtype="uint8"))
        assert segment_of(b) != seg
        assert q_out.get(timeout=TIMEOUT) == (1.0, 1.0)  # the child's copy of `a` was not overwritten
    finally:
        p.join(TIMEOUT)
    assert p.exitcode == 0
    assert seg not in pooled_segments()


def test_the_pool_is_bounded_by_bytes():
    nbmp.set_sharing_pool(max_bytes=3 * MiB)
    arrays = [nbmp.share(np.ones(2 * MiB, dtype="uint8")) for _ in range(3)]
    segs = [segment_of(a) for a in arrays]
    del arrays
    gc.collect()
    assert _pool.pooled_bytes() <= 3 * MiB
    wait_until(lambda: set(segs) - set(pooled_segments()) and not set(segs) & set(live_segments()),
               "the segments over the bound are freed")
    assert sum(pooled_segments().values()) <= 3 * MiB
    with pytest.raises(ValueError, match="set_sharing_pool"):
        nbmp.set_sharing_pool(max_bytes=-1)
    with pytest.raises(ValueError, match="idle"):
        nbmp.set_sharing_pool(idle=0)


def test_a_segment_unused_for_its_idle_time_is_freed():
    nbmp.set_sharing_pool(idle=0.2)
    a = nbmp.share(np.ones(2 * MiB, dtype="uint8"))
    seg = segment_of(a)
    del a
    wait_until(lambda: seg not in pooled_segments() and seg not in live_segments(), "the idle segment is freed")
    b = nbmp.share(np.ones(2 * MiB, dtype="uint8"))  # the janitor said it is gone: a new one
    assert segment_of(b) != seg and (b == 1).all()


def test_a_pool_goes_with_its_process_when_killed():
    ctx = nbmp.get_context("fork")
    q_out = ctx.Queue()
    p = ctx.Process(target=make_free_and_die, args=(q_out,))
    p.start()
    seg = q_out.get(timeout=TIMEOUT)
    wait_until(lambda: seg in pooled_segments(), "the child's freed segment is pooled")
    os.kill(p.pid, signal.SIGKILL)
    p.join(TIMEOUT)
    wait_until(lambda: seg not in pooled_segments(), "the dead child's pool is freed")


def test_file_system_segments_are_not_pooled():
    nbmp.set_sharing_strategy("file_system")
    try:
        a = nbmp.share(np.ones(2 * MiB, dtype="uint8"))
        seg = segment_of(a)
        del a
        wait_until(lambda: seg not in live_segments(), "the segment is freed")
        assert seg not in pooled_segments()
    finally:
        nbmp.set_sharing_strategy("file_descriptor")


# --------------------------------------------------------------------------
# Pocketed tickets
# --------------------------------------------------------------------------


def test_a_round_trip_of_a_mapped_segment_carries_its_ticket_again(start_method):
    a = nbmp.zeros(MiB, dtype="uint8")
    with worker(echo, start_method) as (q_in, q_out):
        for i in range(50):
            a[0] = i
            q_in.put(a[: i + 1])
            back = q_out.get(timeout=TIMEOUT)
            assert back[i] == 0 and back[0] == i and segment_of(back) == segment_of(a)
        del back
        # Between the two processes: at most one ticket per hop still pocketed (counted out).
        assert nbmp.shm_usage().in_flight == 0
    del a
    wait_until(lambda: not live_segments(), "the pocketed tickets went with the worker and the array")
