"""nbmp.Pool: cloudpickle under every start method, dead workers raise instead of hanging,
remote tracebacks, progress events, parallel_map, and input checks."""

from __future__ import annotations

import io
import os
import re
import signal
import struct
import sys
import threading
import time
from typing import Any, List

import pytest

import nbmp
from conftest import TIMEOUT
from helpers import as_jupyterlab_shows, run_main, wait_until
from nbmp._base.events import RunFinished, RunStarted, TaskProgress


def _segfault() -> None:
    import ctypes
    import faulthandler
    faulthandler.disable()  # pytest's faulthandler would print a dump of this intended crash
    ctypes.string_at(0)


KILLS = {
    "SIGKILL": (lambda: os.kill(os.getpid(), signal.SIGKILL), r"killed by SIGKILL.*out-of-memory killer"),
    "SIGSEGV": (_segfault, r"killed by SIGSEGV.*segmentation fault"),
    "os._exit": (lambda: os._exit(7), r"exited with code 7.*os\._exit"),
}


def _calls(pool: Any, task: Any) -> dict:
    return {
        "starmap": lambda: pool.starmap(task, [(i,) for i in range(8)]),
        "map": lambda: pool.map(task, range(8), chunksize=1),
        "imap": lambda: list(pool.imap(task, range(8))),
        "apply_async": lambda: [pool.apply_async(task, (i,)).get(TIMEOUT) for i in range(8)],
    }


# --------------------------------------------------------------------------
# cloudpickle
# --------------------------------------------------------------------------


def test_lambdas_and_closures_in_every_call(ctx):
    offset = 10
    with ctx.Pool(2) as pool:
        assert pool.map(lambda x: x + offset, range(5)) == [10, 11, 12, 13, 14]
        assert pool.starmap(lambda a, b: a * b, [(1, 2), (3, 4)]) == [2, 12]
        assert list(pool.imap(lambda x: -x, range(3))) == [0, -1, -2]
        assert sorted(pool.imap_unordered(lambda x: x * 2, range(4), chunksize=2)) == [0, 2, 4, 6]
        assert pool.apply_async(lambda: "ok").get(TIMEOUT) == "ok"
        assert pool.apply(lambda x, y=1: x + y, (1,), {"y": 2}) == 3
        assert pool.map_async(lambda x: x, [1, 2]).get(TIMEOUT) == [1, 2]
        assert pool.starmap_async(lambda x: x, [(1,)]).get(TIMEOUT) == [1]


def _interrupted_self() -> str:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    return "still running"


def test_workers_ignore_sigint_the_parent_handles_it(ctx):
    with ctx.Pool(1) as pool:
        assert pool.apply(_interrupted_self) == "still running"


def test_maxtasksperchild_and_initializer_keep_their_meaning(ctx):
    def init(tag: str) -> None:
        os.environ["NBMP_TEST_TAG"] = tag

    with ctx.Pool(2, initializer=init, initargs=("set",), maxtasksperchild=1) as pool:
        out = pool.map(lambda _: (os.environ["NBMP_TEST_TAG"], os.getpid()), range(6), chunksize=1)
    assert {tag for tag, _ in out} == {"set"}
    assert len({pid for _, pid in out}) == 6  # a fresh worker per task, and no call failed


def test_workers_know_their_index(ctx):
    def index(_):
        time.sleep(0.05)  # long enough that both workers take tasks
        return nbmp.current_process().launch.index, os.getpid()

    with ctx.Pool(2) as pool:
        seen = dict(pool.map(index, range(8), chunksize=1))
    assert sorted(seen) == [0, 1] and len(set(seen.values())) == 2  # two workers, two indexes


# --------------------------------------------------------------------------
# A worker that dies holding a task
# --------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["starmap", "map", "imap", "apply_async"])
@pytest.mark.parametrize("kill", list(KILLS))
def test_dead_worker_raises_named_error_and_pool_stays_usable(ctx, kill, call):
    die, message = KILLS[kill]

    def task(i: int) -> int:
        if i == 3:
            die()
        return i

    with ctx.Pool(2) as pool:
        with pytest.raises(nbmp.WorkerLostError, match=message) as info:
            _calls(pool, task)[call]()
        error = info.value
        assert error.index in (0, 1) and error.pid > 0
        assert f"Pool worker {error.index} (pid {error.pid})" in str(error)
        assert error.signal_name == (kill if kill.startswith("SIG") else None)
        assert error.exitcode == (-getattr(signal, kill) if kill.startswith("SIG") else 7)
        assert "item 3" in str(error) or call == "apply_async"
        # the worker was replaced: the Pool still works, both workers included
        assert pool.map(lambda x: x + 1, range(4)) == [1, 2, 3, 4]
        pids: set = set()
        deadline = time.monotonic() + TIMEOUT  # a spawned replacement may take seconds to start on a busy machine
        while len(pids) < 2 and time.monotonic() < deadline:
            pids |= set(pool.map(lambda _: time.sleep(0.05) or os.getpid(), range(8), chunksize=1))
        assert len(pids) == 2 and error.pid not in pids


def test_worker_lost_error_is_picklable_and_a_process_error():
    import pickle
    error = nbmp.WorkerLostError("gone", index=1, pid=42, exitcode=-9, rss=3 << 30, task="map(f)")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, nbmp.ProcessError)
    assert (copy.index, copy.pid, copy.exitcode, copy.signal_name, copy.rss, copy.task, str(copy)) == \
        (1, 42, -9, "SIGKILL", 3 << 30, "map(f)", "gone")


def test_message_reports_memory_when_sampled():
    from nbmp._base import WorkerExited
    from nbmp._pool.errors import lost_error
    end = WorkerExited(0, index=1, exitcode=-9, pid=42, rss=int(3.1 * (1 << 30)))
    error = lost_error(end, "while running x", "")
    assert "SIGKILL: often the out-of-memory killer" in str(error)
    assert "resident memory was 3.1 GiB" in str(error)
    assert end.cause in str(error)  # the same words as spawn's error and the dashboard
    assert isinstance(error, nbmp.NbmpError) and isinstance(error, nbmp.ProcessError)


class _Recorder:
    def __init__(self):
        self.events = []

    def handle(self, event):
        self.events.append(event)


def test_a_dead_worker_is_an_event_of_the_map_it_failed(ctx):
    """A worker that dies holding a task is told to the map's sinks (the dashboard) as the
    same record spawn's workers end with, cause and peak memory included."""
    from nbmp._base import WorkerExited
    sink = _Recorder()
    with ctx.Pool(2) as pool:
        with pytest.raises(nbmp.WorkerLostError) as info:
            pool.map(lambda i: os.kill(os.getpid(), signal.SIGKILL) if i == 1 else i, range(4), chunksize=1,
                     progress=sink)
    ends = [e for e in sink.events if isinstance(e, WorkerExited)]
    assert len(ends) == 1, sink.events
    end = ends[0]
    assert (end.run_id, end.index, end.pid, end.exitcode) == (sink.events[0].run_id, info.value.index,
                                                              info.value.pid, -signal.SIGKILL)
    assert end.signal_name == "SIGKILL" and end.cause and end.cause in str(info.value)
    if ctx.get_start_method() != "forkserver":  # the server, not we, reaps forkserver's children
        assert end.rss and end.rss > 1 << 20


def test_map_async_and_close_join_do_not_hang_on_a_dead_worker(ctx):
    pool = ctx.Pool(2)
    result = pool.map_async(lambda i: os._exit(1) if i == 0 else i, range(4), chunksize=1)
    pool.close()
    with pytest.raises(nbmp.WorkerLostError):
        result.get(TIMEOUT)
    pool.join()


@pytest.mark.timeout(120)
def test_a_worker_killed_reading_a_task_breaks_the_pool_and_join_ends(ctx):
    # The task stream is cut mid-message and its lock is the dead worker's: the call fails,
    # the Pool closes, and join() must still end (the task thread was left writing the rest
    # of the task into a pipe nobody read, and the other worker waited on the lock).
    from nbmp._pool.worker import PHASE, RECEIVING
    pool = ctx.Pool(2)
    try:
        assert pool.map(abs, [-1, -2]) == [1, 2]
        result = pool.apply_async(len, (b"x" * (256 << 20),))  # takes a while to cross the pipe
        deadline, victim = time.monotonic() + TIMEOUT, None
        while victim is None and time.monotonic() < deadline:
            victim = next((w for w in list(pool._watch.workers) if w.slot.view[PHASE] == RECEIVING), None)
        assert victim is not None, "no worker was seen reading the big task"
        os.kill(victim.proc.pid, signal.SIGKILL)
        with pytest.raises(nbmp.WorkerLostError, match="while reading a task"):
            result.get(TIMEOUT)
        with pytest.raises(ValueError, match="Pool not running: it was closed because a worker died while reading a task"):
            pool.map(abs, [1])
        assert None not in _close_and_join(pool)
    finally:
        pool.terminate()


def _close_and_join(pool: Any) -> List[Any]:
    """``close(); join()`` (the test's timeout says if it hangs): the workers' exit codes."""
    pool.close()
    pool.join()
    return [w.exitcode for w in pool._pool]


def _a_big_result(_: int) -> bytes:
    return b"y" * (64 << 20)


@pytest.mark.timeout(120)
def test_an_unreadable_result_breaks_the_pool_and_join_ends(ctx):
    # What a worker killed mid-write leaves: a result that cannot be read. The map fails, the
    # Pool closes, and join() must still end: the result thread must not read the stream again
    # (its framing from there asks for gigabytes), and the workers still writing 64 MiB
    # results into it, holding its lock, must get them read away.
    pool = ctx.Pool(2)
    try:
        result = pool.map_async(_a_big_result, range(6), chunksize=1)
        with pool._outqueue._wlock:  # a frame of 1 MiB cut after 7 bytes: the results after it fill it
            pool._outqueue._writer._send(struct.pack("!i", 1 << 20) + b"cut off")
        with pytest.raises(nbmp.WorkerLostError, match="result stream broke"):
            result.get(TIMEOUT)
        assert None not in _close_and_join(pool)
    finally:
        pool.terminate()


def _die_or_return_big_results(i: int) -> bytes:
    if i == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # written after the map failed, and after close()
    return b"z" * (64 << 20)


@pytest.mark.timeout(120)
def test_the_tasks_of_a_map_that_failed_early_still_end_after_close(ctx):
    # A worker's death fails its map at once while the map's other tasks still run. After
    # close(), the stdlib's threads ended as soon as no call waited: a worker writing one of
    # those tasks' 64 MiB results into a pipe nobody read blocked for good, and join() hung.
    pool = ctx.Pool(3)
    try:
        result = pool.map_async(_die_or_return_big_results, range(3), chunksize=1)
        with pytest.raises(nbmp.WorkerLostError, match="SIGKILL while running item 0 of map"):
            result.get(TIMEOUT)
        codes = _close_and_join(pool)
        assert codes.count(0) >= 2 and set(codes) <= {0, -signal.SIGKILL}, codes
    finally:
        pool.terminate()


def _sleep_and_count(seconds: float, where: str, payload: bytes) -> None:
    time.sleep(seconds)
    with open(os.path.join(where, str(os.getpid())), "a") as ran:
        ran.write("x")


@pytest.mark.timeout(120)
def test_the_unsent_tasks_of_a_map_that_failed_early_are_not_run(ctx, tmp_path):
    # One worker, and tasks of 512 KiB: a few fit in the pipe, so the death fails the map while
    # most of its 40 tasks are unsent; those are dropped, and the Pool is free for the next call.
    pool = ctx.Pool(1)
    try:
        from nbmp._pool.worker import PHASE, RUNNING
        result = pool.starmap_async(_sleep_and_count, [(0.05, str(tmp_path), b"t" * (512 << 10))] * 40, chunksize=1)
        deadline = time.monotonic() + TIMEOUT  # running a task (under spawn and load the start takes a while)
        while not any(w.slot.view[PHASE] == RUNNING for w in list(pool._watch.workers)):
            assert time.monotonic() < deadline, "the worker never ran a task"
            time.sleep(0.005)
        os.kill(pool._pool[0].pid, signal.SIGKILL)
        with pytest.raises(nbmp.WorkerLostError):
            result.get(TIMEOUT)
        assert pool.apply(abs, (-3,)) == 3
        pool.close()
        pool.join()
        ran = sum(len((tmp_path / name).read_text()) for name in os.listdir(tmp_path))
        assert ran < 20, f"{ran} of the failed map's 40 tasks ran"
    finally:
        pool.terminate()


class _Unloadable:
    def __reduce__(self) -> Any:
        return (_refuse_to_load, ())


def _refuse_to_load() -> None:
    raise RuntimeError("this task cannot be loaded here")


def _wait_for(path: str, result: Any = None) -> Any:
    """Return ``result`` once ``path`` exists (the test says when: no race with a slow start)."""
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return result


@pytest.mark.timeout(120)
def test_results_of_calls_that_failed_are_read_after_close(ctx, tmp_path):
    # A task no worker can load fails every pending call, the one still running a 64 MiB
    # result among them; after close() the result thread ends, and that result is read away
    # all the same (else its worker blocks on the pipe, and join() with it).
    pool = ctx.Pool(2)
    try:
        go = tmp_path / "go"
        big = pool.apply_async(_wait_for, (str(go), b"z" * (64 << 20)))
        with pytest.raises(Exception, match="this task cannot be loaded here"):
            pool.apply(abs, (_Unloadable(),))
        with pytest.raises(Exception, match="this task cannot be loaded here"):
            big.get(TIMEOUT)
        go.touch()  # its 64 MiB result is written now, after the call failed
        codes = _close_and_join(pool)
        assert codes == [0, 0], codes
    finally:
        pool.terminate()


def _worker_loop_locals() -> dict:
    """The queues and slot of the nbmp worker loop running this task (its frame's locals)."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "worker" and "slot" in frame.f_locals):
        frame = frame.f_back
    assert frame is not None, "not run by nbmp's Pool worker loop"
    return frame.f_locals


def _die_just_after_taking_the_task_lock() -> None:
    from nbmp._pool.worker import IDLE, PHASE
    here = _worker_loop_locals()
    here["inqueue"]._rlock.acquire()
    here["slot"][PHASE] = IDLE  # as if killed between taking the lock and saying so
    os.kill(os.getpid(), signal.SIGKILL)


def _die_just_after_taking_the_result_lock() -> None:
    here = _worker_loop_locals()
    here["outqueue"]._wlock.acquire()  # its phase still says RUNNING
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_worker_killed_the_instant_it_took_a_queue_lock_leaves_the_pool_usable(ctx):
    # A worker stores its phase just after taking a queue lock; killed in between, it left the
    # lock taken for good and every later call of the Pool hung.
    with ctx.Pool(2) as pool:
        pool.apply_async(_die_just_after_taking_the_task_lock)  # its slot says IDLE: nothing lost, never answered
        assert pool.map(abs, range(-6, 0), chunksize=1) == [6, 5, 4, 3, 2, 1]
        with pytest.raises(nbmp.WorkerLostError):
            pool.apply(_die_just_after_taking_the_result_lock)
        assert pool.map(abs, range(-6, 0), chunksize=1) == [6, 5, 4, 3, 2, 1]


def _die_writing_a_result(written: bytes) -> None:
    # What a worker killed in the middle of sending its result leaves: the result lock taken,
    # its slot saying SENDING, and ``written`` in the pipe (a frame's start, or nothing).
    from nbmp._pool.worker import PHASE, SENDING
    here = _worker_loop_locals()
    here["outqueue"]._wlock.acquire()
    here["slot"][PHASE] = SENDING
    if written:
        here["outqueue"]._writer._send(written)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_worker_killed_before_its_result_was_written_leaves_the_pool_usable(ctx):
    with ctx.Pool(2) as pool:
        assert pool.map(abs, [-1, -2], chunksize=1) == [1, 2]
        with pytest.raises(nbmp.WorkerLostError, match="while sending the result of"):
            pool.apply(_die_writing_a_result, (b"",))
        assert pool.map(abs, range(-6, 0), chunksize=1) == [6, 5, 4, 3, 2, 1]


@pytest.mark.timeout(120)
def test_a_worker_killed_in_the_middle_of_its_result_fails_the_call_and_join_ends(ctx, tmp_path):
    # Its frame can never end: the reader waited for the rest forever, and the death's notice,
    # written behind it, was read as part of it. The call hung; a terminate or join with it.
    pool = ctx.Pool(2)
    try:
        other = pool.apply_async(_wait_for, (str(tmp_path / "never"),))  # pending until the Pool breaks
        with pytest.raises(nbmp.WorkerLostError, match="while sending the result of"):
            pool.apply(_die_writing_a_result, (struct.pack("!i", 1 << 20) + b"cut off",))
        with pytest.raises(nbmp.WorkerLostError, match="died in the middle of writing a result"):
            other.get(TIMEOUT)
        with pytest.raises(ValueError, match="Pool not running: it was closed because a worker died in the middle"):
            pool.map(abs, [1])
        assert None not in _close_and_join(pool)
    finally:
        pool.terminate()


@pytest.mark.timeout(120)
def test_a_closed_pool_whose_worker_died_in_the_middle_of_its_result_joins_with_nothing_left_running(ctx):
    # The call fails a moment before the Pool knows it is broken. A join in that moment waited for
    # every worker, then 5 s for the cut stream's drain, which ran on; or blocked 30 s in the
    # terminate, on a read of the pipe the drain was emptying.
    for _ in range(5):
        pool = ctx.Pool(2)
        try:
            result = pool.apply_async(_die_writing_a_result, (struct.pack("!i", 1 << 20) + b"cut off",))
            pool.close()
            with pytest.raises(nbmp.WorkerLostError, match="while sending the result of"):
                result.get(TIMEOUT)
            pool.join()
            assert [t.name for t in threading.enumerate() if t.name.startswith("nbmp")] == []
        finally:
            pool.terminate()


@pytest.mark.timeout(120)
def test_terminate_does_not_wait_for_the_task_lock_of_a_worker_killed_while_idle(ctx):
    # Of two idle workers one waits for a task holding the task queue's lock; killed, it holds it for
    # good, and the terminate waited 5 s for it before it drained the stops it had just queued.
    for _ in range(5):
        pool = ctx.Pool(2)
        try:
            assert pool.map(abs, [-1, -2, -3, -4], chunksize=1) == [1, 2, 3, 4]
            time.sleep(0.1)  # both wait for a task
            os.kill(pool._pool[0].pid, signal.SIGKILL)
            started = time.monotonic()
            pool.terminate()
            assert time.monotonic() - started < 3.0, "the terminate waited for the dead worker's lock"
        finally:
            pool.terminate()
            pool.join()


def _die_just_after_writing_a_result(pid_file: str) -> None:
    # What a worker SIGTERMed the moment after it wrote its result leaves: the result lock taken,
    # its slot saying SENT.
    from nbmp._pool.worker import PHASE, SENT
    here = _worker_loop_locals()
    here["outqueue"]._wlock.acquire()
    here["slot"][PHASE] = SENT
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGTERM)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.timeout(120)
def test_terminate_ends_the_workers_when_one_died_holding_the_result_lock(ctx, tmp_path):
    # The terminate's first put waits for the result lock, and it ends the workers only after that
    # put: a worker killed the moment after it wrote its last result, just before a with-block
    # ended, left that block waiting 30 s for the other worker.
    pid_file = tmp_path / "pid"
    with ctx.Pool(2) as pool:
        assert pool.map(abs, [-1, -2, -3, -4], chunksize=1) == [1, 2, 3, 4]
        pool.apply_async(_die_just_after_writing_a_result, (str(pid_file),))
        wait_until(lambda: pid_file.exists() and pid_file.read_text() and _gone(int(pid_file.read_text())),
                   "the worker has died")
        started = time.monotonic()
    assert time.monotonic() - started < 10.0, "the with-block's terminate waited for the other workers"


def _stall_writing_a_result() -> None:
    from nbmp._pool.worker import PHASE, SENDING
    here = _worker_loop_locals()
    here["outqueue"]._wlock.acquire()
    here["slot"][PHASE] = SENDING
    here["outqueue"]._writer._send(struct.pack("!i", 1 << 20) + b"cut off")
    here["outqueue"]._wlock.release()  # as if the rest were being written (the pipe drains)
    time.sleep(600)  # until the terminate kills it in the middle of its frame


@pytest.mark.timeout(120)
def test_terminate_ends_while_a_worker_is_in_the_middle_of_writing_a_result(ctx):
    # The terminate kills the worker, and then joins the result thread, which waited for the
    # rest of that frame forever.
    from nbmp._pool.worker import PHASE, SENDING
    pool = ctx.Pool(2)
    try:
        pool.apply_async(_stall_writing_a_result)
        deadline = time.monotonic() + TIMEOUT
        while not any(w.slot.view[PHASE] == SENDING for w in list(pool._watch.workers)):
            assert time.monotonic() < deadline, "no worker was seen writing"
            time.sleep(0.01)
        pool.terminate()
        pool.join()
        assert all(w.exitcode is not None for w in pool._pool)
        assert not pool._result_handler.is_alive()
    finally:
        pool.terminate()


def _a_bigger_result(_: int) -> bytes:
    return b"r" * (8 << 20)


@pytest.mark.timeout(120)
def test_terminate_ends_while_the_workers_write_results_bigger_than_the_pipe(ctx):
    # The result thread stops reading at a terminate; the workers' results then fill the pipe
    # before they are killed, and the task thread's last message waited for room forever.
    for i in range(10):
        pool = ctx.Pool(3)
        try:
            results = [pool.apply_async(_a_bigger_result, (i,)) for i in range(60)]
            results[0].wait(TIMEOUT)
            time.sleep(0.01 * i)  # somewhere in the stream of results
            pool.terminate()
            pool.join()
            assert all(w.exitcode is not None for w in pool._pool)
            assert not pool._task_handler.is_alive() and not pool._result_handler.is_alive()
        finally:
            pool.terminate()


def _outlive_sigterm(started: int, seconds: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # this worker outlives the terminate's SIGTERM,
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # (not pytest-timeout's handler, inherited)
    signal.alarm(seconds)  # still running its task (a writer of the result pipe), until SIGALRM
    os.write(started, b"!")
    time.sleep(4 * seconds)


@pytest.mark.timeout(60)
def test_terminate_says_no_writer_is_left_only_once_every_worker_has_ended(monkeypatch):
    # The terminate tells the result pipe's reader that no writer is left, after which it stops
    # reading at the first empty moment. Told when the first worker had ended (multiprocessing's
    # wait() returns at the first ready sentinel), a worker still alive could fill the pipe again,
    # and the task thread's last message then waited for room forever (seen once in CI).
    from multiprocessing.connection import wait
    from nbmp._pool.frames import FrameReader

    told: List[List[int]] = []
    original = FrameReader.writers_gone

    def writers_gone(self: Any) -> None:  # a worker whose sentinel is not ready may still write
        told.append([w.pid for w in workers if not wait([w.sentinel], 0)])
        original(self)

    monkeypatch.setattr(FrameReader, "writers_gone", writers_gone)
    started_r, started_w = os.pipe()
    pool = nbmp.Pool(3)
    workers = list(pool._pool)
    try:
        assert pool.map(abs, range(6)) == [0, 1, 2, 3, 4, 5]
        pool.apply_async(_outlive_sigterm, (started_w, 1))
        assert os.read(started_r, 1) == b"!"
        pool.terminate()
        pool.join()
        wait_until(lambda: told, "the reader is told that no writer is left")
        assert told == [[]], f"told while workers {told} still ran"
        assert -signal.SIGALRM in [w.exitcode for w in workers]  # the late one ended by itself
    finally:
        pool.terminate()
        os.close(started_r)
        os.close(started_w)


def _count_unblocks(monkeypatch: Any) -> List[int]:
    from nbmp._pool import pool as pool_module

    started: List[int] = []
    original = pool_module._unblock_threads

    def counted(*args: Any) -> None:
        started.append(1)
        original(*args)

    monkeypatch.setattr(pool_module, "_unblock_threads", counted)
    return started


@pytest.mark.timeout(TIMEOUT)
def test_a_terminate_with_nothing_in_flight_needs_no_unblocking(ctx, monkeypatch):
    # The common `with Pool() as p: p.map(...)`: every call done, every worker waiting for a
    # task. Nothing a killed worker holds can block the terminate, so it starts no helper
    # threads; it still ends every worker and thread.
    from nbmp._pool.worker import IDLE, PHASE, WAITING

    unblocks = _count_unblocks(monkeypatch)
    with ctx.Pool(2) as pool:
        assert pool.map(lambda x: x * 2, range(8)) == [0, 2, 4, 6, 8, 10, 12, 14]
        workers = list(pool._pool)
        # a worker that has just written the last result says so a moment later
        wait_until(lambda: all(w.slot.view[PHASE] in (IDLE, WAITING) for w in pool._watch.workers),
                   "every worker waits for a task")
    pool.join()
    assert unblocks == []
    assert all(w.exitcode is not None for w in workers)
    assert not any(t.is_alive() for t in (pool._worker_handler, pool._task_handler, pool._result_handler))


@pytest.mark.timeout(TIMEOUT)
def test_a_terminate_with_a_task_running_still_unblocks_its_threads(ctx, monkeypatch):
    from nbmp._pool.worker import PHASE, RUNNING

    unblocks = _count_unblocks(monkeypatch)
    pool = ctx.Pool(2)
    try:
        pending = pool.apply_async(time.sleep, (60,))
        wait_until(lambda: any(w.slot.view[PHASE] == RUNNING for w in pool._watch.workers), "the task runs")
        assert not pool._watch.settled(pool._taskqueue)
        workers = list(pool._pool)
        pool.terminate()
        pool.join()
        assert unblocks == [1]
        assert all(w.exitcode is not None for w in workers)
        assert not pending.ready()
    finally:
        pool.terminate()


def test_failing_initializer_fails_the_call_and_closes_the_pool(ctx, capfd):
    def init() -> None:
        raise RuntimeError("no GPU here")

    for _ in range(3):  # the first failure may come before the Pool's watcher has started
        pool = ctx.Pool(2, initializer=init)
        try:
            # the first call raises the initializer's error, or finds the Pool closed because of it
            with pytest.raises((RuntimeError, ValueError), match="no GPU here"):
                pool.map(abs, range(4))
            with pytest.raises(ValueError, match="initializer raised RuntimeError: no GPU here") as info:
                pool.map(abs, range(4))
            assert isinstance(info.value.__cause__, RuntimeError)
        finally:
            pool.terminate()
    assert "Traceback" not in capfd.readouterr().err


def test_map_while_the_worker_list_is_being_refilled():
    # The worker handler empties and refills the Pool's list when workers die (a failing
    # initializer): a map that reads it at that moment must still size its chunks.
    with nbmp.Pool(2) as pool:
        workers = pool._pool[:]
        pool._pool.clear()
        try:
            result = pool.map_async(abs, range(-8, 0))
        finally:
            pool._pool.extend(workers)
        assert result.get(TIMEOUT) == list(range(8, 0, -1))


def test_an_init_failure_reported_after_terminate_is_ignored_quietly(capsys):
    from nbmp._pool.worker import Notice
    pool = nbmp.Pool(1)
    pool.terminate()
    pool.join()
    pool._watch.handle(Notice("init-failed", payload=RuntimeError("late")))
    assert "late" in pool._watch.broken and capsys.readouterr().err == ""


def _fork_failing_at(monkeypatch, call):
    """Make the ``call``-th ``os.fork()`` from now on fail, as when the system is out of processes."""
    real, calls = os.fork, []

    def fork():
        calls.append(1)
        if len(calls) == call:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real()
    monkeypatch.setattr(os, "fork", fork)


def test_a_fork_failing_in_the_round_of_starts_leaves_nothing_behind(monkeypatch):
    # A Pool makes its workers first and forks them in one round: when the third fork fails,
    # the two started are stopped (the leak guard
    # checks that no process, thread or segment is left).
    _fork_failing_at(monkeypatch, 3)
    with pytest.raises(BlockingIOError):
        nbmp.get_context("fork").Pool(4)
    assert nbmp.active_children() == []  # stopped and joined before the error reached us
    monkeypatch.undo()
    with nbmp.get_context("fork").Pool(2) as pool:  # and the next Pool starts as usual
        assert pool.map(abs, [-1, -2]) == [1, 2]


def test_a_fork_failing_in_spawns_round_leaves_nothing_behind(monkeypatch):
    nbmp.spawn(abs, nprocs=1, start_method="fork")  # whatever a first run opens for good (pidfd, /dev/null reader)
    descriptors = set(os.listdir("/proc/self/fd"))
    _fork_failing_at(monkeypatch, 3)
    with pytest.raises(BlockingIOError):
        nbmp.spawn(abs, nprocs=4, start_method="fork")
    assert nbmp.active_children() == []
    assert set(os.listdir("/proc/self/fd")) <= descriptors  # the run's pipes, its supervisor's selector and wake-up pipe
    monkeypatch.undo()
    assert nbmp.spawn(abs, nprocs=2, start_method="fork") == [0, 1]


def test_killing_idle_workers_loses_nothing(ctx):
    with ctx.Pool(2) as pool:
        for round in range(4):
            pids = pool.map(lambda _: os.getpid(), range(8), chunksize=1)
            # An idle worker may hold the task queue's lock (waiting for a task) or still hold
            # the result queue's lock (just after writing): the parent frees either.
            os.kill(pids[-1], signal.SIGKILL)
            assert pool.map(lambda x: x * round, range(6), chunksize=1) == [x * round for x in range(6)]


def test_a_fork_pools_watcher_starts_at_its_first_loss_or_close_and_reports_the_loss():
    # Started right after the forks, a thread waits for a core behind the children's exits:
    # a fork Pool starts its watcher when it first replaces a worker, or at close().
    with nbmp.Pool(2) as pool:
        pids = pool.map(lambda _: os.getpid(), range(4), chunksize=1)
        assert pool._watch._thread is None
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(nbmp.WorkerLostError):  # a worker that dies holding a task is reported
            pool.map(lambda x: os.kill(os.getpid(), signal.SIGKILL) if x == 0 else x, range(2), chunksize=1)
        # By the watcher: a thread is listed from its start on (its record may be stored a moment later).
        assert "nbmp-pool-watcher" in {t.name for t in threading.enumerate()}
    with nbmp.Pool(1) as pool:
        pool.close()
        assert pool._watch._thread is not None
        pool.join()
    with nbmp.get_context("forkserver").Pool(1) as pool:  # samples its workers' memory: from the start
        assert pool._watch._thread is not None


def test_the_watcher_ends_when_the_pools_finalizer_alone_terminates_it():
    # The interpreter's exit terminates a Pool left open through its finalizer, not
    # terminate(): the Pool's state still says it runs. The exit then waits for nbmp's
    # helper threads (nbmp._backend.daemons), so the watcher must end too, not watch on.
    pool = nbmp.Pool(2)
    try:
        assert pool.map(abs, [-1, -2]) == [1, 2]
        assert pool._watch._thread is None  # a fork Pool that lost no worker has none yet (Watch.start)
        pool._watch.watch_now()  # as the first replacement of a worker, or close(), starts it
        watcher = pool._watch._thread
        assert watcher is not None and watcher.is_alive()
        pool._terminate()  # the finalizer the exit runs
        watcher.join(TIMEOUT)
        assert not watcher.is_alive()
    finally:
        pool.terminate()


# --------------------------------------------------------------------------
# Exceptions raised by tasks
# --------------------------------------------------------------------------


def test_exception_keeps_type_and_chains_worker_traceback(ctx):
    def task(x: int) -> None:
        raise KeyError(f"missing {x}")  # the line the traceback must show

    with ctx.Pool(1) as pool:
        with pytest.raises(KeyError, match="missing 5") as info:
            pool.map(task, [5])
    cause = info.value.__cause__
    from multiprocessing.pool import RemoteTraceback
    assert isinstance(cause, RemoteTraceback)
    assert 'raise KeyError(f"missing {x}")' in str(cause)
    assert "Pool worker 0 (pid" in str(cause)
    assert "_pool_worker.py" not in str(cause)


def test_cell_defined_exception_class_unpickles_as_itself_under_spawn():
    out = run_main("""
        import nbmp

        class MyError(Exception):
            pass

        def task(x):
            raise MyError(x)

        for method in nbmp.get_all_start_methods():
            with nbmp.get_context(method).Pool(1) as pool:
                try:
                    pool.map(task, [1])
                except MyError as e:
                    print(method, "caught", "in task" in str(e.__cause__))
    """)
    assert out.count("caught True") == len(nbmp.get_all_start_methods())


def test_exception_that_cannot_unpickle_becomes_remote_task_error(ctx):
    def task(_: int) -> None:
        class Picky(Exception):
            def __init__(self, a: int, b: int) -> None:  # pickle re-calls __init__ with 1 arg
                super().__init__(a)
        raise Picky(1, 2)

    with ctx.Pool(1) as pool:
        with pytest.raises(nbmp.RemoteTaskError, match="Picky: 1") as info:
            pool.apply(task, (0,))
        assert "Picky" in info.value.exc_type
        assert pool.apply(abs, (-1,)) == 1


# --------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.events: List[Any] = []

    def handle(self, event: Any) -> None:
        self.events.append(event)


def test_progress_events_reach_a_sink(ctx):
    sink = Sink()
    with ctx.Pool(2) as pool:
        assert pool.map(abs, range(-10, 0), chunksize=3, progress=sink) == list(range(10, 0, -1))
    kinds = [type(e) for e in sink.events]
    assert kinds[0] is RunStarted and kinds[-1] is RunFinished and TaskProgress in kinds
    progress = [e for e in sink.events if isinstance(e, TaskProgress)]
    assert progress[-1].done == progress[-1].total == 10
    assert [e.done for e in progress] == sorted(e.done for e in progress)
    assert sink.events[0].target == "map(abs)" and sink.events[-1].ok


def test_progress_false_emits_nothing_and_true_draws_a_bar(capsys):
    with nbmp.Pool(2) as pool:
        pool.map(abs, range(20), progress=False)
        assert capsys.readouterr().err == ""
        pool.starmap(pow, [(2, 3)] * 10, progress=True)
    err = capsys.readouterr().err
    assert "starmap(pow): 100%|" in err and "10/10" in err and err.endswith("\n")


def test_text_bar_redraws_in_place_on_a_terminal():
    from nbmp._pool.progress import TextBar

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [0.0]
    stream = Tty()
    bar = TextBar(stream, clock=lambda: now[0])
    bar.handle(RunStarted(1, "map(f)", "fork", 2))
    for done in (0, 5, 10):
        now[0] += 1
        bar.handle(TaskProgress(1, None, done, 10))
    bar.handle(RunFinished(1, True))
    text = stream.getvalue()
    assert text.count("/10 [") == 3 and "5/10" in text and text.endswith("\n")  # each step drawn, then the line ended
    assert as_jupyterlab_shows(text) == ["map(f): 100%|" + "#" * 24 + "| 10/10 [00:03<00:00, 3.3 it/s]"]  # in place


def test_auto_progress_stays_quiet_for_quick_maps(capsys):
    with nbmp.Pool(1) as pool:
        pool.map(abs, range(5))
    assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_bar_leaves_nothing_of_a_longer_line_it_redraws():
    from nbmp._pool.progress import TextBar
    now = [0.0]
    stream = _Terminal()
    bar = TextBar(stream, clock=lambda: now[0])
    bar.handle(RunStarted(1, "map(f)", "fork", 2))
    for done in (10, 11):  # 10.0 it/s, then 5.5 it/s: one character shorter
        now[0] += 1
        bar.handle(TaskProgress(1, None, done, 100))
    assert as_jupyterlab_shows(stream.getvalue()) == ["map(f):  11%|##                      | 11/100 [00:02<00:16, 5.5 it/s]"]


class _Cell(io.StringIO):
    """A Jupyter kernel's stream, as the bar tells one."""


_Cell.__module__ = "ipykernel.iostream"


@pytest.mark.parametrize("kind, draws", [(_Cell, 4), (io.StringIO, 1)])
def test_text_bar_redraws_once_a_second_in_a_notebook_and_only_its_end_elsewhere(kind, draws):
    from nbmp._pool.progress import TextBar
    now = [0.0]
    stream = kind()
    bar = TextBar(stream, clock=lambda: now[0])
    bar.handle(RunStarted(1, "map(f)", "fork", 2))
    for done in range(1, 11):  # a step every 0.25 s: drawn at 0.25, 1.25 and 2.25 s, and the end
        now[0] += 0.25
        bar.handle(TaskProgress(1, None, done, 10))
    bar.handle(RunFinished(1, True))
    text = stream.getvalue()
    assert text.count("/10 [") == draws and text.endswith("\n")
    assert as_jupyterlab_shows(text) == ["map(f): 100%|" + "#" * 24 + "| 10/10 [00:02<00:00, 4.0 it/s]"]
    assert ("\r" in text) == (kind is _Cell)  # a log gets no carriage returns


def test_auto_progress_draws_its_bar_for_a_map_that_outlasts_the_delay(monkeypatch):
    from nbmp._pool import progress
    monkeypatch.setattr(progress, "AUTO_DELAY", 0.2)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with nbmp.Pool(2) as pool:
        assert pool.map(time.sleep, [0.3] * 4, chunksize=1) == [None] * 4
    err = sys.stderr.getvalue()
    assert "map(sleep): 100%|" in err and "4/4" in err and err.endswith("\n")


def test_a_bar_that_appears_after_its_delay_counts_the_tasks_done_before(monkeypatch):
    from nbmp._pool import progress
    monkeypatch.setattr(progress, "AUTO_DELAY", 0.5)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with nbmp.Pool(2) as pool:
        pool.map(time.sleep, [0.0] * 6 + [1.5] * 2, chunksize=1)  # six done at once, two still running at 0.5 s
    first = re.search(r"(\d+)/8 \[", sys.stderr.getvalue())
    assert first is not None and int(first.group(1)) >= 1, sys.stderr.getvalue()


def test_a_closed_stderr_does_not_fail_a_map_with_a_bar(monkeypatch):
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    with nbmp.Pool(2) as pool:
        assert pool.map(abs, range(-3, 0), progress=True) == [3, 2, 1]


def test_auto_progress_prints_nothing_where_nobody_watches(capsys, monkeypatch):
    # stderr to a log or a pipe (a script's, a torch program's): as the standard Pool, nothing
    from nbmp._pool import progress
    monkeypatch.setattr(progress, "AUTO_DELAY", 0.2)
    with nbmp.Pool(2) as pool:
        assert pool.map(time.sleep, [0.3] * 4, chunksize=1) == [None] * 4
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_the_task_and_result_pipes_hold_a_whole_map_of_chunks():
    import fcntl
    with open("/proc/sys/fs/pipe-max-size") as f:
        allowed = min(int(f.read()), 1 << 20)
    with nbmp.Pool(1) as pool:
        sizes = [fcntl.fcntl(q._reader.fileno(), fcntl.F_GETPIPE_SZ) for q in (pool._inqueue, pool._outqueue)]
        assert pool.map(len, [b"x" * 200_000] * 8, chunksize=1) == [200_000] * 8  # 1.6 MB through them
    assert min(sizes) >= allowed > 1 << 16, sizes  # not the default 64 KiB


def test_bad_progress_value_is_a_type_error():
    with nbmp.Pool(1) as pool:
        with pytest.raises(TypeError, match="progress must be True, False, None"):
            pool.map(abs, [1], progress="yes")


# --------------------------------------------------------------------------
# parallel_map and input checks
# --------------------------------------------------------------------------


def test_parallel_map(start_method):
    assert nbmp.parallel_map(lambda x: x * 3, iter(range(5)), workers=2, start_method=start_method) == \
        [0, 3, 6, 9, 12]
    assert nbmp.parallel_map(abs, [], workers=1) == []


def test_parallel_map_raises_worker_lost():
    with pytest.raises(nbmp.WorkerLostError, match="SIGKILL"):
        nbmp.parallel_map(lambda x: os.kill(os.getpid(), signal.SIGKILL), [1, 2], workers=2, progress=False)


@pytest.mark.parametrize("call, error, match", [
    (lambda: nbmp.Pool(0), ValueError, "processes must be a positive int"),
    (lambda: nbmp.Pool("2"), TypeError, "processes must be a positive int or None, not '2'"),
    (lambda: nbmp.Pool(1, initializer=3), TypeError, "initializer must be a callable"),
    (lambda: nbmp.parallel_map(abs, [1], workers=0), ValueError, "workers must be a positive int"),
    (lambda: nbmp.parallel_map(3, [1]), TypeError, "fn must be callable, not 3"),
    (lambda: nbmp.parallel_map(abs, [1], start_method="threads"), ValueError, "unknown start method 'threads'"),
])
def test_bad_input_is_refused_before_any_process_starts(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bad_task_arguments_are_refused(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(TypeError, match="func must be callable"):
            pool.map(None, [1])
        with pytest.raises(ValueError, match="chunksize must be a positive int"):
            pool.map(abs, [1], chunksize=0)
        with pytest.raises(TypeError, match="func must be callable"):
            pool.apply_async(1)


def _sleep_long(_: int) -> None:
    time.sleep(3600)  # until the Pool is terminated


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["map", "get", "imap", "join"])
def test_an_interrupt_that_another_thread_takes_still_stops_a_waiting_call(call):
    # The kernel gives a process's SIGINT to any thread that does not block it. With the main
    # thread blocking it here, one of the Pool's threads takes it; Python then raises it in the
    # main thread at its next bytecode, which an untimed wait for the call never reaches
    # (this test hung until its timeout). Waiting in slices, the call raises it.
    pool = nbmp.Pool(2)  # its threads are made before the block: they take the signal
    calls = {
        "map": lambda: pool.map(_sleep_long, range(2), chunksize=1),
        "get": lambda: pool.map_async(_sleep_long, range(2), chunksize=1).get(),
        "imap": lambda: next(pool.imap(_sleep_long, range(2))),
        "join": lambda: (pool.map_async(_sleep_long, range(2), chunksize=1), pool.close(), pool.join()),
    }
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))  # blocks it too: made now
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            calls[call]()
    finally:
        timer.cancel()  # a failed call must not leave the signal to land in a later test
        timer.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        pool.terminate()
        pool.join()
    assert all(w.exitcode is not None for w in pool._pool)


@pytest.mark.parametrize("call", ["get", "imap"])
def test_an_interrupt_that_lands_as_a_wait_retakes_its_lock_is_still_an_interrupt(call, monkeypatch):
    # CPython's Condition.wait re-takes its lock in Python code, where a SIGINT can land: the
    # with-block around the wait then fails to release it, and the interrupt is only the context
    # of a RuntimeError. Here the signal "lands" there once, in the main thread.
    real = threading.Condition._acquire_restore  # type: ignore[attr-defined]

    def interrupted(self, state):
        if threading.current_thread() is not threading.main_thread():
            return real(self, state)
        monkeypatch.setattr(threading.Condition, "_acquire_restore", real)
        raise KeyboardInterrupt
    with nbmp.Pool(1) as pool:
        waits = {"get": pool.apply_async(time.sleep, (TIMEOUT,)).get, "imap": pool.imap(time.sleep, [TIMEOUT]).__next__}
        monkeypatch.setattr(threading.Condition, "_acquire_restore", interrupted)
        with pytest.raises(KeyboardInterrupt):
            waits[call]()


# --------------------------------------------------------------------------
# A context that is not nbmp's own
# --------------------------------------------------------------------------


class _FailsAtItsFourthStart:
    """A context that hands out the real context's objects, but whose fourth process fails
    to start (as a fork refused for want of memory would)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.made: List[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def Process(self, *args: Any, **kwargs: Any) -> Any:
        proc = self._real.Process(*args, **kwargs)
        self.made.append(proc)
        if len(self.made) == 4:
            def refuse() -> None:
                raise OSError("no fourth worker today")
            proc.start = refuse
        return proc


def test_a_worker_that_fails_to_start_fails_the_pool_and_stops_the_others(ctx):
    context = _FailsAtItsFourthStart(ctx)
    with pytest.raises(OSError, match="no fourth worker today"):
        nbmp.pool.Pool(5, context=context)
    assert len(context.made) == 5  # nbmp makes a Pool's workers first, then starts them
    assert [p.is_alive() for p in context.made[:3]] == [False] * 3  # stopped and joined by the Pool
    assert all(p.exitcode is not None for p in context.made[:3])
    assert [p.pid for p in context.made[3:]] == [None, None]  # the failed one and the one after it


class _StandInProcess:
    """A process object that is not one (CPython's own suite builds a Pool on such, with a
    mock context): the Pool must only start, stop and join it."""

    made: List["_StandInProcess"] = []

    def __init__(self, **kwargs: Any) -> None:
        self.name, self.exitcode, self.state = "stand-in", None, "made"
        _StandInProcess.made.append(self)

    def start(self) -> None:
        if sum(p.state != "made" for p in _StandInProcess.made) == 2:
            raise OSError("the stand-in refuses")
        self.state = "started"

    def terminate(self) -> None:
        self.state = "stopping"

    def join(self) -> None:
        self.state = "stopped" if self.state == "stopping" else self.state

    def is_alive(self) -> bool:
        return self.state in ("started", "stopping")


def test_a_pool_on_a_context_of_stand_ins_uses_them_as_the_standard_pool_does():
    import unittest.mock
    _StandInProcess.made.clear()
    with pytest.raises(OSError, match="the stand-in refuses"):
        nbmp.pool.Pool(4, context=unittest.mock.MagicMock(Process=_StandInProcess))
    assert [p.state for p in _StandInProcess.made] == ["stopped", "stopped", "made", "made"]


def test_a_pools_helper_threads_are_let_go_once_they_end(ctx):
    # CPython's suite counts Thread objects still referenced after a test as dangling.
    import weakref
    from nbmp._backend import daemons
    pool = ctx.Pool(2)
    pool._watch.watch_now()  # a fork Pool's starts at its first loss or close (Watch.start)
    refs = [weakref.ref(t) for t in list(daemons._threads)]
    assert refs, "the Pool started its watcher"
    assert pool.map(abs, [-1, -2]) == [1, 2]
    pool.terminate()  # ends the watcher, and starts the helpers that free a terminate
    pool.join()
    del pool
    wait_until(lambda: all(ref() is None for ref in refs), "the ended watcher is freed")
    # The helpers the terminate started (which may have ended before we could look) too.
    wait_until(lambda: all(t.is_alive() for t in list(daemons._threads)), "no ended helper thread is kept")


class _RacedReader:
    """A pipe's reader whose ``poll`` says "readable" after another reader took the bytes:
    the race between two drains of a Pool's task pipe (or a drain and a worker)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def fileno(self) -> int:
        return self.r

    def poll(self, timeout: float = 0.0) -> bool:
        os.write(self.w, b"sentinel")
        os.read(self.r, 100)  # the other reader
        return True


def test_a_drain_whose_bytes_another_reader_took_does_not_block() -> None:
    from nbmp._pool.watch import drain

    reader, stop = _RacedReader(), threading.Event()
    thread = threading.Thread(target=drain, args=(reader, lambda: not stop.is_set()), daemon=True)
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(5)
    stuck = thread.is_alive()
    os.write(reader.w, b"x")  # frees a blocked read (the old drain), so the thread can end
    thread.join(5)
    os.close(reader.r)
    os.close(reader.w)
    assert not stuck, "drain() waited in a read of a pipe another reader had emptied"


class _FreedMeanwhile:
    """The result lock at a terminate's end: still held when the terminate looks (a worker
    died holding it), freed by the result reader before the terminate frees it."""

    def acquire(self, timeout: float = -1) -> bool:
        return False

    def release(self) -> None:
        raise ValueError("semaphore or lock released too many times")


class _DeadWorker:
    def __init__(self, sentinel: int) -> None:
        self.pid, self.sentinel = 1, sentinel  # started (a pid), exited (a sentinel)

    def terminate(self) -> None:  # the terminate ends every worker while the result lock stays taken
        pass


class _Queue:  # a stand-in of the Pool's queues: only the parts the terminate's end looks at
    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)


def test_a_result_lock_freed_by_another_thread_first_is_no_error_at_a_terminate():
    from nbmp._pool.pool import _unblock_threads

    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    ended._state = "TERMINATE"  # the result thread's, as the terminate leaves it
    r, w = os.pipe()
    os.close(w)  # readable at once: the worker is gone
    try:
        outqueue = _Queue(_wlock=_FreedMeanwhile())
        inqueue = _Queue(_reader=None)  # not read: the task thread has ended
        _unblock_threads(inqueue, outqueue, None, [_DeadWorker(r)], ended, ended, ended)
    finally:
        os.close(r)


def test_an_interrupt_while_a_pool_lets_go_of_its_queues_is_raised_not_lost():
    # The queues' connections are freed in the caller's thread by terminate()/join(); an
    # interrupt landing in one's __del__ was printed ("Exception ignored") and lost.
    pool = nbmp.Pool(1)

    class InterruptedWhileFreed:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # Python runs the handler here, inside __del__

    pool._watch.inqueue = InterruptedWhileFreed()  # dropped by terminate(), among the queues
    with pytest.raises(KeyboardInterrupt):
        pool.terminate()
    assert pool._inqueue is None and pool._watch.inqueue is None


def test_ctrl_c_pressed_twice_during_a_map_still_stops_every_worker():
    out = run_main("""
        import os, signal, threading, time, nbmp
        def press_twice():  # the second lands while the first one's terminate() stops the workers
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGINT)
        for _ in range(3):
            threading.Thread(target=press_twice).start()
            try:
                with nbmp.Pool(2) as pool:
                    pool.map(time.sleep, [0.5] * 8, chunksize=1)
            except KeyboardInterrupt:
                pass
            settled = time.monotonic() + 1
            while time.monotonic() < settled:
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:  # the second press, raised once the first one's stop was done
                    pass
            print(len(nbmp.active_children()))
    """)
    assert out.split() == ["0", "0", "0"]
