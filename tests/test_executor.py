"""nbmp.ProcessPoolExecutor: the standard Executor API, cloudpickle under every start method,
nbmp's sharing, and a dead worker named in BrokenProcessPool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main


def executor(method: str, workers: int = 2, **kwargs) -> nbmp.ProcessPoolExecutor:
    return nbmp.ProcessPoolExecutor(workers, mp_context=nbmp.get_context(method), **kwargs)


def test_is_a_concurrent_futures_executor():
    assert issubclass(nbmp.ProcessPoolExecutor, concurrent.futures.ProcessPoolExecutor)
    with nbmp.ProcessPoolExecutor(1) as ex:
        assert ex._mp_context is nbmp.get_context()


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
        assert isinstance(info.value.__cause__, nbmp.WorkerLostError)
        with pytest.raises(BrokenProcessPool):
            ex.submit(int)


def test_the_standard_executor_with_an_nbmp_context_still_refuses_lambdas():
    # What docs/migrating/multiprocessing.md says mp_context=nbmp.get_context() gives today.
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=nbmp.get_context()) as ex:
        with pytest.raises(Exception, match="(?i)pickle|local object"):  # 3.13 words it "Can't get local object"
            ex.submit(lambda: 1).result(TIMEOUT)
        assert ex.submit(int, "5").result(TIMEOUT) == 5
