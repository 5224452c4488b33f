"""Where nbmp now behaves as the standard module: a child inherits the start method it was
started with, and errors raised while pickling keep their type."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time

import pytest

import nbmp
from conftest import TIMEOUT, START_METHODS
from helpers import run_main

SPAWNING = [m for m in nbmp.get_all_start_methods() if m != "fork"]

GRANDCHILD = """
    import nbmp
    def grandchild(q):
        q.put(("grandchild", nbmp.get_start_method()))
        q.put(1)
    def child(q):
        q.put(("child", nbmp.get_start_method()))
        p = nbmp.Process(target=grandchild, args=(q,)); p.start(); p.join()
        q.put(2)
    if __name__ == "__main__":
        {setup}
        q = {queue}
        p = {process}(target=child, args=(q,)); p.start()
        got = [q.get(timeout=60) for _ in range(4)]  # in any order: each process has its own feeder
        p.join()
        print(sorted(x for x in got if isinstance(x, int)), dict(sorted(x for x in got if isinstance(x, tuple))))
"""


@pytest.mark.parametrize("method", SPAWNING)
def test_a_child_inherits_the_default_start_method(method):
    out = run_main(GRANDCHILD.format(setup=f"nbmp.set_start_method({method!r}, force=True)",
                                     queue="nbmp.Queue()", process="nbmp.Process"))
    assert out.strip() == f"[1, 2] {{'child': {method!r}, 'grandchild': {method!r}}}"


@pytest.mark.parametrize("method", SPAWNING)
def test_a_child_inherits_the_context_it_was_started_with(method):
    out = run_main(GRANDCHILD.format(setup=f"ctx = nbmp.get_context({method!r})",
                                     queue="ctx.Queue()", process="ctx.Process"))
    assert out.strip() == f"[1, 2] {{'child': {method!r}, 'grandchild': {method!r}}}"


@pytest.mark.parametrize("default", SPAWNING)
def test_a_child_a_fork_context_started_has_fork_as_its_default(default):
    # The standard bootstrap forces the child's default to its own start method; nbmp's too.
    out = run_main(GRANDCHILD.format(setup=f"nbmp.set_start_method({default!r}, force=True); "
                                           f"ctx = nbmp.get_context('fork')",
                                     queue="ctx.Queue()", process="ctx.Process"))
    assert out.strip() == "[1, 2] {'child': 'fork', 'grandchild': 'fork'}"


class RaisesInReduce:
    def __reduce__(self):
        raise RuntimeError("my own reduce failed")


def test_an_error_raised_by_user_code_while_pickling_keeps_its_type():
    a, b = nbmp.Pipe()
    try:
        with pytest.raises(RuntimeError, match="my own reduce failed") as info:
            a.send({"key": RaisesInReduce()})
        assert not isinstance(info.value, nbmp.PicklingError)
        if hasattr(info.value, "__notes__"):  # from 3.14 pickle's own notes ("when serializing ...") come first
            assert any("the object sent['key']" in note for note in info.value.__notes__), info.value.__notes__
    finally:
        a.close(), b.close()


@pytest.mark.parametrize("method", SPAWNING)
def test_process_args_error_keeps_its_type(method):
    p = nbmp.get_context(method).Process(target=print, args=(RaisesInReduce(),))
    with pytest.raises(RuntimeError, match="my own reduce failed"):
        p.start()


def test_what_the_pickler_refuses_is_still_a_picklingerror():
    a, b = nbmp.Pipe()
    try:
        with pytest.raises(nbmp.PicklingError):
            a.send(threading.Lock())
    finally:
        a.close(), b.close()


def test_queue_put_of_an_unpicklable_object_raises_in_the_caller():
    q = nbmp.Queue()
    with pytest.raises(nbmp.PicklingError, match="the object put"):
        q.put(threading.Lock())
    with pytest.raises(RuntimeError, match="my own reduce failed"):
        q.put(RaisesInReduce())
    q.put("still usable")
    assert q.get(timeout=TIMEOUT) == "still usable"
    q.close(); q.join_thread()


def test_queue_put_captures_the_object_at_put_time():
    q, items = nbmp.Queue(), [1]
    q.put(items)
    items.append(2)
    assert q.get(timeout=TIMEOUT) == [1]
    q.close(); q.join_thread()


def test_small_puts_stay_fast():
    import multiprocessing
    def rate(q):
        start = time.perf_counter()
        for i in range(2000):
            q.put(i)
        for _ in range(2000):
            q.get(timeout=TIMEOUT)
        q.close(); q.join_thread()
        return time.perf_counter() - start
    rate(nbmp.Queue())  # warm up the pickler
    std = min(rate(multiprocessing.get_context("fork").Queue()) for _ in range(3))
    ours = min(rate(nbmp.Queue()) for _ in range(3))
    assert ours < 4 * std + 0.05, (ours, std)


def test_a_non_leaf_tensor_that_requires_grad_gives_torchs_runtimeerror():
    torch = pytest.importorskip("torch")
    t = torch.ones(3, requires_grad=True) * 2
    a, b = nbmp.Pipe()
    try:
        with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad") as info:
            a.send(t)
        assert not isinstance(info.value, pickle.PicklingError)
    finally:
        a.close(), b.close()


def test_a_wrong_maxtasksperchild_type_is_the_standard_value_error_and_nbmp_type_error():
    """CPython's test_pool_maxtasksperchild_invalid expects ValueError for 0.5 and "12"; nbmp's rule
    says TypeError for a wrong type: the error is both."""
    for value in (0.5, "12"):
        with pytest.raises(ValueError, match="maxtasksperchild") as info:
            nbmp.Pool(3, maxtasksperchild=value)
        assert isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="maxtasksperchild"):
        nbmp.Pool(3, maxtasksperchild=0)


def test_arrays_take_bytes_and_str_initializers_as_the_standard_ones_do():
    # Python's own docs make a shared string with Array('c', b'...')
    for make in (nbmp.Array, nbmp.RawArray, multiprocessing.Array, multiprocessing.RawArray):
        assert make("c", b"hello")[:] == b"hello"
        assert make("u", "hi")[:] == "hi"
        assert make("B", b"\x01\x02")[:] == [1, 2]


# -- a Queue keeps each producer's items whole and in order ------------------------------------


def _mixed_producer(q, n, big):
    for i in range(n):
        q.put((i, big if i % 3 == 0 else b""))
    q.close()
    q.join_thread()


def test_small_and_big_items_from_one_producer_keep_their_order(start_method):
    ctx = nbmp.get_context(start_method)
    q = ctx.Queue()
    big = b"x" * 100_000  # larger than the pipe: the feeder thread blocks while writing it
    p = ctx.Process(target=_mixed_producer, args=(q, 60, big))
    p.start()
    got = [q.get(timeout=TIMEOUT) for _ in range(60)]
    p.join(TIMEOUT)
    assert [i for i, _ in got] == list(range(60)) and p.exitcode == 0
    assert all(data == (big if i % 3 == 0 else b"") for i, data in got)


def _small_producer(q, k, n):
    for i in range(n):
        q.put((k, i))


def test_many_writer_processes_never_mix_their_messages():
    ctx = nbmp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_small_producer, args=(q, k, 500)) for k in range(4)]
    for p in procs:
        p.start()
    got = [q.get(timeout=TIMEOUT) for _ in range(2000)]
    for p in procs:
        p.join(TIMEOUT)
    for k in range(4):
        assert [i for j, i in got if j == k] == list(range(500))  # each producer's items whole and in order


def test_put_never_blocks_on_a_full_pipe_and_close_still_flushes():
    # Nobody reads while 5000 small items are put: the pipe (64 KiB) fills, and put must
    # still return at once, the rest waiting in the buffer for the feeder thread.
    q = nbmp.Queue()
    start = time.monotonic()
    for i in range(5000):
        q.put(i)
    assert time.monotonic() - start < TIMEOUT
    assert [q.get(timeout=TIMEOUT) for _ in range(5000)] == list(range(5000))
    q.close()
    q.join_thread()


def test_joinable_queue_counts_items_written_at_once():
    q = nbmp.JoinableQueue()
    q.put("a")
    assert q.get(timeout=TIMEOUT) == "a"
    q.task_done()  # counted before the item could be read: no "called too many times"
    q.join()
    q.close()
    q.join_thread()


def _put_then_exit(q, jq, n):
    for i in range(n):
        q.put(lambda i=i: i)  # cell-made objects travel
    jq.put("job")
    # the process exits at once: its feeder thread writes everything buffered first


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", START_METHODS)
def test_queues_behave_as_the_standard_ones(method):
    ctx = nbmp.get_context(method)
    q, jq, bounded = ctx.Queue(), ctx.JoinableQueue(), ctx.Queue(2)
    p = ctx.Process(target=_put_then_exit, args=(q, jq, 500))
    p.start()
    assert sorted(q.get(timeout=TIMEOUT)() for _ in range(500)) == list(range(500))
    assert jq.get(timeout=TIMEOUT) == "job"
    p.join(TIMEOUT)
    assert p.exitcode == 0
    assert q.empty() and q.qsize() == 0
    with pytest.raises(nbmp.queues.Empty):
        q.get(timeout=0.05)
    bounded.put(1)
    bounded.put(2)
    assert bounded.full() and bounded.qsize() == 2
    with pytest.raises(nbmp.queues.Full):
        bounded.put(3, timeout=0.05)
    assert bounded.get(timeout=TIMEOUT) == 1 and not bounded.full()
    jq.task_done()
    jq.join()  # every item got is done
    with pytest.raises(ValueError, match="too many times"):
        jq.task_done()
    with pytest.raises(RuntimeError, match="inheritance"):
        pickle.dumps(q)  # a queue travels only to a child being started
    fresh = ctx.Queue()
    fresh.close()  # never put to: closes nothing
    assert fresh.empty()
    for used in (q, jq, bounded):
        used.close()
        used.join_thread()
        with pytest.raises(ValueError, match="is closed"):
            used.get()
    with pytest.raises(OSError, match="is closed"):
        bounded.empty()  # its feeder closed both ends


class _SlowToTakeLock:
    """A Queue's write lock that the feeder thread (``with lock:``) takes only after a pause,
    as a busy machine may delay it; ``put`` (acquire/release) takes it at once."""

    def __init__(self, lock):
        self.lock = lock

    def acquire(self, block=True, timeout=None):
        return self.lock.acquire(block) if timeout is None else self.lock.acquire(block, timeout)

    def release(self):
        self.lock.release()

    def __enter__(self):
        time.sleep(0.2)
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()


def test_a_small_item_never_overtakes_one_the_feeder_is_about_to_send():
    q = nbmp.Queue()
    q._wlock = _SlowToTakeLock(q._wlock)  # before the first put starts the feeder with it
    big = b"x" * 10_000
    q.put(big)
    time.sleep(0.05)  # the feeder has taken it out of the buffer's reach and waits for the lock
    q.put("small")
    assert q.get(timeout=TIMEOUT) == big
    assert q.get(timeout=TIMEOUT) == "small"
    q.close()
    q.join_thread()


def test_processes_are_named_as_the_standard_module_names_them():
    # logging's %(processName)s shows the name: a program moved to nbmp logs the same
    import multiprocessing
    import re
    assert re.fullmatch(r"Process-\d+", nbmp.Process().name)
    assert re.fullmatch(r"Process-\d+", multiprocessing.Process().name)
    assert re.fullmatch(r"ForkProcess-\d+", nbmp.get_context("fork").Process().name)
    assert nbmp.Process(name="loader").name == "loader"
    process = nbmp.Process(target=_current_name_to, args=(queue := nbmp.SimpleQueue(),))
    process.start()
    assert queue.get() == process.name  # the child's own current_process().name
    process.join(TIMEOUT)
    queue.close()


def _current_name_to(queue):
    queue.put(nbmp.current_process().name)


def _waits_for_an_interrupt(ready, said):
    try:
        ready.set()
        time.sleep(TIMEOUT)
    except KeyboardInterrupt:
        said.put("interrupted")


@pytest.mark.skipif(not hasattr(multiprocessing.Process, "interrupt"), reason="Process.interrupt() is new in 3.14")
@pytest.mark.parametrize("method", START_METHODS)
def test_interrupt_raises_keyboardinterrupt_in_the_child(method):
    ctx = nbmp.get_context(method)
    ready, said = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_waits_for_an_interrupt, args=(ready, said))
    p.start()
    try:
        assert ready.wait(TIMEOUT)
        p.interrupt()
        assert said.get(timeout=TIMEOUT) == "interrupted"
    finally:
        p.join(TIMEOUT)
    assert p.exitcode == 0
