"""nbmp.Pool as a notebook user meets it, in a real ipykernel: warm pools across cells,
the interrupt button during a map, crash and exception reports."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import pytest

from conftest import TIMEOUT, child_pids

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_warm_pool_runs_the_latest_definition(kernel, method):
    kernel.run(f"import nbmp\npool = nbmp.get_context({method!r}).Pool(2)\n"
               "def h(x):\n    return ('old', x)").raise_for_error()
    assert kernel.run("pool.map(h, [1])").raise_for_error().result == "[('old', 1)]"
    kernel.run("def h(x):\n    return ('new', x)").raise_for_error()
    assert kernel.run("pool.map(h, [2])").raise_for_error().result == "[('new', 2)]"
    kernel.run("pool.terminate(); del pool").raise_for_error()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_cell_functions_see_what_the_initializer_set(kernel, method):
    kernel.run("import nbmp\nmodel = None\n"
               "def load(scale):\n    global model\n    model = {'scale': scale}\n"
               "def predict(x):\n    return model['scale'] * x").raise_for_error()
    cell = kernel.run(f"with nbmp.get_context({method!r}).Pool(2, initializer=load, initargs=(3,)) as pool:\n"
                      "    print(pool.map(predict, [1, 2]), pool.apply(lambda: model['scale']))\n"
                      "print(model)").raise_for_error()
    assert cell.stdout.split("\n")[:2] == ["[3, 6] 3", "None"]


def test_a_warm_pool_reads_the_notebooks_data_without_pickling_it(kernel):
    # Under fork the workers have the cell's function and the data it reads: neither is pickled.
    kernel.run("import nbmp\nclass Big:\n    def __reduce__(self):\n        raise TypeError('pickled')\n"
               "big = Big()\ndef uses_big(x):\n    return (type(big).__name__, x)\n"
               "pool = nbmp.Pool(2)").raise_for_error()
    try:
        assert kernel.run("pool.map(uses_big, [1])").raise_for_error().result == "[('Big', 1)]"
    finally:
        kernel.run("pool.terminate(); del pool").raise_for_error()


def test_a_lambda_written_in_the_cell_that_starts_the_pool_goes_by_its_code(kernel):
    # The cell's lambda exists (as the cell's code) when the workers are forked: it goes as a
    # reference to that code. With cloudpickle's by-value path refused, only that path works.
    kernel.run("import nbmp\nfrom nbmp._backend import pickling\n"
               "def refused(self, func):\n    raise TypeError('sent by value')\n"
               "by_value = pickling.Pickler._dynamic_function_reduce\n"
               "pickling.Pickler._dynamic_function_reduce = refused").raise_for_error()
    try:
        cell = kernel.run("with nbmp.Pool(2) as pool:\n    print(pool.map(lambda x: x * x, [1, 2, 3]))")
        assert cell.raise_for_error().stdout.strip() == "[1, 4, 9]"
        cell = kernel.run("pool = nbmp.Pool(1)")  # a later cell's lambda: not there at the fork
        cell = kernel.run("try:\n    pool.map(lambda x: x, [1])\nexcept TypeError as e:\n    print(e)\n"
                          "finally:\n    pool.terminate()")
        assert "sent by value" in cell.raise_for_error().stdout
    finally:
        kernel.run("pickling.Pickler._dynamic_function_reduce = by_value").raise_for_error()


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# The cell runs from a second thread, where jupyter_client makes an event loop (and its
# sockets) that it never closes; the garbage collector reports them at teardown ("Exception
# ignored in: <socket...>" up to 3.13, "... while finalizing socket <socket...>" from 3.14).
@pytest.mark.filterwarnings("ignore:Exception ignored .*<socket.socket:pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore:Exception ignored .*<function BaseEventLoop.__del__:"
                            "pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_interrupt_cancels_the_map_and_leaves_no_worker(kernel, method):
    marks = tempfile.mkdtemp()
    kernel.run(f"import nbmp, os, time\npool = nbmp.get_context({method!r}).Pool(2)\n"
               f"def slow(i):\n"
               f"    open(os.path.join({marks!r}, str(i)), 'w').close()\n"
               f"    time.sleep(600)\n").raise_for_error()
    before = child_pids()
    cells = []
    runner = threading.Thread(target=lambda: cells.append(kernel.run("pool.map(slow, range(8), chunksize=1)",
                                                                      timeout=TIMEOUT * 2)))
    runner.start()
    _wait_for(lambda: len(os.listdir(marks)) >= 2, "both workers to start a task")
    kernel.manager.interrupt_kernel()
    runner.join(TIMEOUT * 2)
    assert cells, "the interrupted cell never finished"
    cell = cells[0]
    assert cell.error is not None and cell.error["ename"] == "KeyboardInterrupt"
    # one KeyboardInterrupt (the caller's), not one traceback per worker
    assert "PoolWorker" not in cell.stderr and cell.stderr.count("KeyboardInterrupt") <= 1
    _wait_for(lambda: not (child_pids() - before) or child_pids() <= before, "workers to exit")
    # workers' fd-level stderr reaches the notebook late, attributed to the next cell
    late = kernel.run("time.sleep(1)").raise_for_error()
    assert "KeyboardInterrupt" not in late.stderr + late.stdout
    after = kernel.run("(pool._state, [p.pid for p in nbmp.active_children()])").raise_for_error()
    assert after.result == "('TERMINATE', [])"
    # the kernel stays usable, and so does nbmp
    assert kernel.run("nbmp.parallel_map(abs, [-1, -2], workers=2)").raise_for_error().result == "[1, 2]"
    # the interrupt's traceback (sys.last_*) references the Pool, whose spawn semaphores live with it
    kernel.run("import sys, gc\nsys.last_traceback = sys.last_value = sys.last_exc = None\n"
               "del pool\ngc.collect()").raise_for_error()


def test_crash_and_exception_reports_in_a_cell(kernel):
    cell = kernel.run("import nbmp, os, signal\n"
                      "with nbmp.Pool(2) as pool:\n"
                      "    pool.map(lambda i: os.kill(os.getpid(), signal.SIGKILL), [1])")
    assert cell.error["ename"] == "WorkerLostError"
    assert "SIGKILL" in cell.error["evalue"] and "Pool worker" in cell.error["evalue"]
    kernel.run("class CellError(Exception):\n    pass\n"
               "def fails(x):\n    raise CellError(f'bad {x}')  # this cell's line").raise_for_error()
    cell = kernel.run("with nbmp.get_context('spawn').Pool(1) as pool:\n"
                      "    try:\n        pool.map(fails, [3])\n"
                      "    except CellError as e:\n        caught = e\n"
                      "print(str(caught.__cause__))\n"
                      "del caught, pool  # a spawn Pool's semaphores live as long as the Pool")
    cell.raise_for_error()
    # the worker never saw this notebook's cells; the parent filled in the source line
    assert "raise CellError(f'bad {x}')  # this cell's line" in cell.stdout
    assert "CellError: bad 3" in cell.stdout


def test_progress_in_a_kernel_is_one_compact_line(kernel):
    # with the text front end chosen (a notebook's default is the dashboard widget)
    cell = kernel.run("import nbmp\nnbmp.set_dashboard('text')\n"
                      "try:\n    out = nbmp.parallel_map(abs, range(50), workers=2, progress=True)[-1]\n"
                      "finally:\n    nbmp.set_dashboard(None)\nout")
    cell.raise_for_error()
    assert cell.result == "49"
    assert "map(abs): 100%" in cell.stderr and cell.stderr.count("\n") == 1
