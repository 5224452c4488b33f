"""nbmp.ProcessPoolExecutor: the standard Executor API, cloudpickle under every start method,
nbmp's sharing, and a dead worker named in BrokenProcessPool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import psutil
import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main, wait_until


def executor(method: str, workers: int = 2, **kwargs) -> nbmp.ProcessPoolExecutor:
    return nbmp.ProcessPoolExecutor(workers, mp_context=nbmp.get_context(method), **kwargs)


def test_is_a_concurrent_futures_executor():
    assert issubclass(nbmp.ProcessPoolExecutor, concurrent.futures.ProcessPoolExecutor)
    with nbmp.ProcessPoolExecutor(1) as ex:
        assert ex._mp_context._ctx is nbmp.get_context()  # its workers' context: nbmp's default


def test_submit_and_map_with_lambdas(start_method):
    offset = 10
    with executor(start_method) as ex:
        assert ex.submit(lambda x, y=0: x + y + offset, 1, y=2).result(TIMEOUT) == 13
        assert list(ex.map(lambda x: x * x, range(10), chunksize=3, timeout=TIMEOUT)) == [x * x for x in range(10)]
        assert list(ex.map(lambda a, b: a - b, [5, 6], [1, 2])) == [4, 4]
        assert ex.submit(lambda: (lambda: "a returned lambda")).result(TIMEOUT)() == "a returned lambda"


def test_initializer_may_be_a_lambda(start_method):
    with executor(start_method, 1, initializer=lambda: os.environ.__setitem__("NBMP_INIT", "yes")) as ex:
        assert ex.submit(lambda: os.environ.get("NBMP_INIT")).result(TIMEOUT) == "yes"


def test_cell_defined_functions_under_every_method():
    out = run_main("""
        import nbmp
        def square(x):
            return x * x
        class Box:
            def __init__(self, v): self.v = v
        if __name__ == "__main__":
            for method in nbmp.get_all_start_methods():
                with nbmp.ProcessPoolExecutor(2, mp_context=nbmp.get_context(method)) as ex:
                    print(method, list(ex.map(square, [1, 2, 3])), ex.submit(lambda: Box(4)).result().v)
    """)
    assert [line.split(" ", 1)[1] for line in out.splitlines()] == ["[1, 4, 9] 4"] * len(nbmp.get_all_start_methods())


def test_task_exceptions_keep_their_type(start_method):
    with executor(start_method, 1) as ex:
        with pytest.raises(ZeroDivisionError):
            ex.submit(lambda: 1 / 0).result(TIMEOUT)


def test_an_unpicklable_call_fails_its_future_with_nbmps_message():
    with nbmp.ProcessPoolExecutor(1) as ex:
        future = ex.submit(print, threading.Lock())
        with pytest.raises(nbmp.PicklingError, match=r"args\[0\].*ProcessPoolExecutor"):
            future.result(TIMEOUT)
        assert ex.submit(lambda: "still usable").result(TIMEOUT) == "still usable"


def test_shutdown_cancel_futures_and_refuses_new_work(start_method):
    ex = executor(start_method, 1)
    first = ex.submit(time.sleep, 0.5)
    queued = [ex.submit(int, "1") for _ in range(20)]
    ex.shutdown(wait=True, cancel_futures=True)
    assert first.result(TIMEOUT) is None
    assert any(f.cancelled() for f in queued)
    assert all(f.cancelled() or f.result() == 1 for f in queued)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(int)


def test_usable_from_asyncio_run_in_executor(start_method):
    async def main(ex):
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(ex, lambda x: x + 1, i) for i in range(4)))
    with executor(start_method) as ex:
        assert asyncio.run(main(ex)) == [1, 2, 3, 4]


def test_shared_arrays_cross_without_a_copy(start_method):
    a = nbmp.zeros(1000, dtype="int64")

    def fill(arr):
        arr[:] = 7
        return nbmp.is_shared(arr)

    with executor(start_method, 1) as ex:
        assert ex.submit(fill, a).result(TIMEOUT) is True
    assert np.all(a == 7)


@pytest.mark.parametrize("how, named", [("sigkill", "SIGKILL"), ("exit", "code 3")])
def test_a_dead_worker_is_named_in_brokenprocesspool(start_method, how, named):
    die = (lambda: os.kill(os.getpid(), signal.SIGKILL)) if how == "sigkill" else (lambda: os._exit(3))
    with executor(start_method, 1) as ex:
        future = ex.submit(die)
        with pytest.raises(BrokenProcessPool) as info:
            future.result(TIMEOUT)
        assert named in str(info.value) and "ProcessPoolExecutor worker 0 (pid" in str(info.value)
        cause = str(info.value.__cause__)  # as the standard's (3.15): the remote traceback's text
        assert "terminated abruptly with exit code" in cause and "ProcessPoolExecutor worker 0 (pid" in cause
        with pytest.raises(BrokenProcessPool):
            ex.submit(int)


def _die_in_the_middle_of_the_result():
    # What a worker killed while it sends a big result leaves (out of memory, say): the result
    # queue's lock taken and the start of a message in the pipe.
    frame = sys._getframe()
    while "result_queue" not in frame.f_locals:
        frame = frame.f_back
    queue = frame.f_locals["result_queue"]
    queue._wlock.acquire()
    queue._writer._send(struct.pack("!i", 1 << 20) + b"cut off")
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_worker_killed_in_the_middle_of_its_result_breaks_the_executor(start_method):
    # The standard executor waits for the rest of that message for ever: its future and its shutdown hang.
    ex = executor(start_method)
    try:
        with pytest.raises(BrokenProcessPool, match="SIGKILL"):
            ex.submit(_die_in_the_middle_of_the_result).result(TIMEOUT)
    finally:
        ex.shutdown(wait=True)


@pytest.mark.timeout(120)
def test_shutdown_ends_after_a_worker_was_killed_as_it_waited_for_a_call(start_method):
    # One of two idle workers holds the call queue's lock as it waits: killed, it keeps it, and the
    # standard executor's shutdown waits for ever for the other, which cannot read its stop.
    for _ in range(6):
        ex = executor(start_method)
        assert list(ex.map(abs, [-1, -2, -3, -4])) == [1, 2, 3, 4]
        workers = list(ex._processes.values())
        time.sleep(0.1)  # both wait for a call
        os.kill(workers[0].pid, signal.SIGKILL)
        ex.shutdown(wait=True)
        assert None not in [w.exitcode for w in workers]


def test_the_standard_executor_with_an_nbmp_context_still_refuses_lambdas():
    # What docs/migrating/multiprocessing.md says mp_context=nbmp.get_context() gives today.
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=nbmp.get_context()) as ex:
        with pytest.raises(Exception, match="(?i)pickle|local object"):  # 3.13 words it "Can't get local object"
            ex.submit(lambda: 1).result(TIMEOUT)
        assert ex.submit(int, "5").result(TIMEOUT) == 5


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_standard_executor_with_an_nbmp_context_sees_what_its_initializer_set(method, tmp_path):
    # The initializer travels by nbmp's pickler (by value), the calls by the standard one (by
    # reference, into the script the worker ran again): both must use one namespace.
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        import concurrent.futures, nbmp
        SETTING = None
        def init(value):
            global SETTING
            SETTING = value
        def setting(_):
            return SETTING
        if __name__ == "__main__":
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=nbmp.get_context({method!r}),
                                                        initializer=init, initargs=("set",)) as ex:
                print(list(ex.map(setting, range(2))))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.stdout == "['set', 'set']\n", proc.stderr


# --------------------------------------------------------------------------
# No worker outlives its executor (the parent's death: test_reliability.py)
# --------------------------------------------------------------------------

_kept = None


def _keep(semaphore):
    global _kept
    _kept = semaphore  # a worker gets a context's semaphore at its start, the way it may cross


def _wait_for_kept():
    return _kept.acquire(timeout=TIMEOUT)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ending", ["shutdown(wait=True)", "shutdown(wait=False)", "garbage collection"])
def test_no_worker_outlives_its_executor(start_method, ending):
    ctx = nbmp.get_context(start_method)
    semaphore = ctx.Semaphore(0)
    ex = nbmp.ProcessPoolExecutor(2, mp_context=ctx, initializer=_keep, initargs=(semaphore,))
    blocked = [ex.submit(_wait_for_kept) for _ in range(2)]  # the tasks wait on the semaphore at the end
    workers = list(ex._processes.values())
    assert len(workers) == 2
    release = threading.Timer(0.5, lambda: [semaphore.release() for _ in range(2)])
    release.start()
    try:
        if ending == "garbage collection":
            del ex
            gc.collect()
        else:
            ex.shutdown(wait=ending == "shutdown(wait=True)")
        assert [f.result(TIMEOUT) for f in blocked] == [True, True]
        for worker in workers:
            worker.join(TIMEOUT)
        assert [w.exitcode for w in workers] == [0, 0], f"workers outlived the executor's {ending}"
    finally:
        release.join()


def test_no_worker_outlives_the_interpreter(start_method):
    out = run_main(f"""
        import threading, nbmp
        ctx = nbmp.get_context({start_method!r})
        semaphore = ctx.Semaphore(0)
        def keep(s):
            global kept
            kept = s
        ex = nbmp.ProcessPoolExecutor(2, mp_context=ctx, initializer=keep, initargs=(semaphore,))
        for _ in range(2):
            ex.submit(lambda: kept.acquire(timeout=30))
        print(*[p.pid for p in ex._processes.values()])
        threading.Timer(0.5, lambda: [semaphore.release() for _ in range(2)]).start()
    """)  # no shutdown: the interpreter's exit ends the executor
    workers = [int(pid) for pid in out.split()]
    assert len(workers) == 2
    wait_until(lambda: not any(_alive(pid) for pid in workers), "the workers ended with the interpreter", TIMEOUT)


@pytest.mark.parametrize("refusal", [RuntimeError, KeyboardInterrupt])
def test_a_call_refused_by_the_pickler_leaves_no_worker_running(start_method, refusal):
    class Refused:
        def __reduce__(self):
            raise refusal("not this")

    ex = executor(start_method)
    with pytest.raises(refusal, match="not this"):
        ex.submit(print, Refused()).result(TIMEOUT)  # an error fails the future; an interrupt, the call
    workers = list(ex._processes.values())  # under fork they started before the call was pickled
    ex.shutdown()
    assert all(w.exitcode is not None for w in workers)


@pytest.mark.parametrize("wait", [True, False])
def test_an_interrupt_between_the_first_forks_leaves_no_worker_after_shutdown(wait):
    forks = []

    def interrupt_at_the_second():  # the interrupt button, pressed as the first map starts its workers
        forks.append(1)
        if len(forks) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    ex = nbmp.ProcessPoolExecutor(4)
    with nbmp.register_fork_handler(after_in_parent=interrupt_at_the_second):
        with pytest.raises(KeyboardInterrupt):
            list(ex.map(abs, range(8)))
    ex.shutdown(wait=wait, cancel_futures=True)
    wait_until(lambda: not nbmp.active_children(), "the workers forked before the interrupt ended", TIMEOUT)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --------------------------------------------------------------------------
# Started as the standard executor starts its workers
# --------------------------------------------------------------------------

needs_max_tasks_per_child = pytest.mark.skipif(sys.version_info < (3, 11), reason="max_tasks_per_child: Python 3.11+")


def test_workers_start_on_demand_up_to_max_workers(start_method):
    ctx = nbmp.get_context(start_method)
    semaphore = ctx.Semaphore(0)
    with nbmp.ProcessPoolExecutor(3, mp_context=ctx, initializer=_keep, initargs=(semaphore,)) as ex:
        ex.submit(int).result(TIMEOUT)
        ex.submit(int).result(TIMEOUT)
        assert len(ex._processes) == (3 if start_method == "fork" else 1)  # fork: all at once, as the stdlib
        futures = [ex.submit(_wait_for_kept) for _ in range(5)]
        assert len(ex._processes) == 3
        for _ in futures:
            semaphore.release()
        assert [f.result(TIMEOUT) for f in futures] == [True] * 5


@needs_max_tasks_per_child
def test_max_tasks_per_child_without_a_context_picks_spawn():
    with nbmp.ProcessPoolExecutor(1, max_tasks_per_child=2) as ex:
        assert ex._mp_context.get_start_method() == "spawn"
        pids = [ex.submit(os.getpid).result(TIMEOUT) for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]


@needs_max_tasks_per_child
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_that_left_at_max_tasks_per_child_is_replaced_while_calls_wait(method):
    # A backlog: the standard executor of 3.11 and 3.12 runs two calls, then none, for ever (CPython gh-115634).
    with executor(method, 1, max_tasks_per_child=2) as ex:
        futures = [ex.submit(os.getpid) for _ in range(6)]
        pids = [f.result(TIMEOUT) for f in futures]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]


@needs_max_tasks_per_child
def test_max_tasks_per_child_under_fork_is_refused_as_the_standard_refuses_it():
    with pytest.raises(ValueError, match="incompatible with the 'fork'"):
        nbmp.ProcessPoolExecutor(1, mp_context=nbmp.get_context("fork"), max_tasks_per_child=2)


# --------------------------------------------------------------------------
# What the standard executor does with a lock, and with a call that fails to load
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["Lock", "Semaphore"])
@pytest.mark.parametrize("sent, error, words", [("the lock", RuntimeError, "through inheritance"),
                                                ("its acquire method", TypeError, "cannot pickle")])
def test_a_context_lock_fails_its_future_as_the_standards_does_and_names_the_fix(start_method, kind, sent, error,
                                                                                 words):
    lock = getattr(nbmp.get_context(start_method), kind)()
    with executor(start_method) as ex:
        future = ex.submit(print, lock) if sent == "the lock" else ex.submit(lock.acquire)
        with pytest.raises(error, match=words) as info:
            future.result(TIMEOUT)
        if sys.version_info >= (3, 11) or sent != "the lock":  # the standard error says it; nbmp's note (3.11+)
            assert "initargs=(lock,)" in "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])
        assert ex.submit(int, "3").result(TIMEOUT) == 3  # the executor stays usable, as the standard one


class _FailsToLoad:
    def __init__(self, how):
        self.how = how

    def __reduce__(self):
        return (sys.exit, (1,)) if self.how == "exit" else (_raise_unpickling_error, ())


def _raise_unpickling_error():
    raise pickle.UnpicklingError("cannot load this")


@pytest.mark.parametrize("how", ["error", "exit"])
def test_a_call_that_fails_to_load_in_the_worker_breaks_the_pool(start_method, how):
    with executor(start_method, 1) as ex:
        with pytest.raises(BrokenProcessPool):
            ex.submit(id, _FailsToLoad(how)).result(TIMEOUT)
        with pytest.raises(BrokenProcessPool):
            ex.submit(int)
