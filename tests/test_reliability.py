"""Nothing lost under faults (docs/reliability.md): workers die with a killed parent, an
interrupt at any moment of a Pool's start is raised and leaves nothing behind, nbmp's own
threads are never taken for the user's, and Stop ends a run with an error."""

from __future__ import annotations

import errno
import gc
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any, List

import numpy as np
import psutil
import pytest

import nbmp
from conftest import START_METHODS
from helpers import sandboxed

# --------------------------------------------------------------------------
# Helpers: a script in its own session, and what of that session is still alive
# --------------------------------------------------------------------------


def _start_script(source: str, *args: str) -> subprocess.Popen:
    """``source`` run in its own session, with a temporary directory of its own (``.tmp``), in the
    suite's (a short path: it holds sockets)."""
    tmp = tempfile.mkdtemp(prefix="script-")
    env = dict(os.environ, PYTHONFAULTHANDLER="1", TMPDIR=tmp)  # SIGABRT prints every thread's stack
    script = subprocess.Popen([sys.executable, "-c", textwrap.dedent(source), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    script.tmp = tmp  # type: ignore[attr-defined]
    return script


def _session_members(sid: int) -> List[int]:
    """Live processes of session ``sid`` (the script and anything it started, wherever reparented)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except (OSError, psutil.Error):
            continue
    return found


def _wait_gone(sid: int, timeout: float) -> List[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = _session_members(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _kill_session(sid: int) -> None:
    for pid in _session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------
# 3. Pool and executor workers die with their parent
# --------------------------------------------------------------------------

BUSY_WORKERS = """
    import os, sys, threading, time
    import nbmp

    def busy(x):
        with open(os.path.join(sys.argv[2], str(os.getpid())), "w"):
            pass  # "I am busy": the test reads the pids from the directory
        time.sleep(60)

    def make():
        ctx = nbmp.get_context(sys.argv[1])
        if sys.argv[4] == "Pool":
            made.append(ctx.Pool(2))
            made[0].map_async(busy, range(2), chunksize=1)
        else:
            made.append(nbmp.ProcessPoolExecutor(2, mp_context=ctx))
            for i in range(2):
                made[0].submit(busy, i)

    made = []
    if sys.argv[3] == "thread":  # started by a thread that ends: their parent-death signal differs
        maker = threading.Thread(target=make)
        maker.start()
        maker.join()
    else:
        make()
    while len(os.listdir(sys.argv[2])) < 2:
        time.sleep(0.05)
    if sys.argv[5] == "os._exit":
        os._exit(0)  # no cleanup: neither the workers' owner's nor the interpreter's
    time.sleep(120)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("end, starter", [("SIGKILL", "main thread"), ("SIGKILL", "thread"),
                                          ("os._exit", "main thread")])
@pytest.mark.parametrize("owner", ["Pool", "ProcessPoolExecutor"])
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_die_when_their_parent_dies(method, owner, end, starter, tmp_path):
    # The standard module's workers live on after such an end (a Pool's busy, an executor's
    # blocked on its call queue).
    script = _start_script(BUSY_WORKERS, method, str(tmp_path), starter, owner, end)
    try:
        workers = _busy_workers(script, tmp_path, 2, timeout=60)
        if end == "SIGKILL":
            os.kill(script.pid, signal.SIGKILL)
        script.wait(30)
        deadline = time.monotonic() + 10
        alive = workers
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in workers if _alive(pid)]
            time.sleep(0.05)
        assert alive == [], f"{owner} workers {alive} outlived their parent ({method}, {end}, started by the {starter})"
        # The rest of the session (the resource tracker, a fork server) ends by itself and
        # cleans up after the script (its named semaphores): give it the time to, on a busy
        # machine too (a tracker killed below would leave them in /dev/shm).
        _wait_gone(script.pid, 30)
    finally:
        _kill_session(script.pid)
        script.communicate()


MANAGER = """
    import sys, threading, time
    import nbmp

    def make():
        manager = nbmp.get_context(sys.argv[1]).Manager()
        d = manager.dict()
        d["a"] = nbmp.zeros(1000)  # the server holds a shared array
        print(manager._process.pid, flush=True)
        made.append(manager)

    made = []
    if sys.argv[2] == "thread":
        maker = threading.Thread(target=make)
        maker.start()
        maker.join()
    else:
        make()
    time.sleep(120)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("starter", ["main thread", "thread"])
@pytest.mark.parametrize("method", START_METHODS)
def test_a_managers_server_dies_when_its_parent_is_killed(method, starter):
    # The standard server lives on after its parent's SIGKILL, holding what is stored in it.
    script = _start_script(MANAGER, method, starter)
    try:
        assert script.stdout is not None
        server = int(script.stdout.readline())
        time.sleep(0.5)  # started by a thread that ended: the server must outlive that thread
        assert _alive(server), f"the manager's server died with the thread that started it ({method})"
        os.kill(script.pid, signal.SIGKILL)
        script.wait(30)
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server), f"the manager's server outlived its killed parent ({method}, {starter})"
        _wait_gone(script.pid, 30)  # as above
    finally:
        _kill_session(script.pid)
        script.communicate()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", START_METHODS)
def test_workers_started_by_a_thread_outlive_the_thread(method):
    # Linux's parent-death signal follows the thread that forked: a Pool made in a thread
    # lost its workers (SIGTERM) when the thread ended, and a Pool's replacement workers,
    # which its worker-handler thread starts, died when that thread ended on close().
    made: List[Any] = []
    maker = threading.Thread(target=lambda: made.append(nbmp.get_context(method).Pool(2)))
    maker.start()
    maker.join()
    pool = made[0]
    try:
        workers = list(pool._pool)
        time.sleep(0.5)  # a signalled worker is dead well within this
        assert [w.exitcode for w in workers] == [None, None], f"the workers died with the thread that started them ({method})"
        ran_in = set(pool.map(lambda _: os.getpid(), range(8), chunksize=1))
        assert ran_in <= {w.pid for w in workers}, "the tasks ran in replacements of the first workers"
    finally:
        pool.terminate()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", START_METHODS)
def test_a_pool_whose_workers_are_replaced_joins(method):
    # CPython's test_pool_worker_lifetime_early_close hung once in 30-60 runs under spawn:
    # a replacement worker, killed as its starter thread ended, left a notice behind the
    # result thread's sentinel, and the thread waited for a message after it forever.
    ctx = nbmp.get_context(method)
    for trial in range(4):
        with ctx.Pool(3, maxtasksperchild=1) as pool:
            results = [pool.apply_async(_square_slowly, (i,)) for i in range(6)]
            pool.close()
            pool.join()
            assert [r.get(timeout=0) for r in results] == [i * i for i in range(6)], f"trial {trial}"
            assert all(w.exitcode == 0 for w in pool._pool), [(w.pid, w.exitcode) for w in pool._pool]


def _square_slowly(x: int) -> int:
    time.sleep(0.1)
    return x * x


@pytest.mark.timeout(60)
def test_a_notice_after_the_results_ends_the_result_thread_s_read():
    # The stdlib's result thread, past its sentinel, reads once for each message poll() says
    # is queued; a notice is no result, and the reader waited for one after it, forever.
    from nbmp._pool.worker import Notice
    pool = nbmp.Pool(1)
    pool.close()
    pool.join()
    here, there = nbmp.Pipe(duplex=False)
    try:
        get = pool._watch.reader(here)
        there.send(None)  # the stdlib's sentinel, then a death's notice
        there.send(Notice("bad-task", payload=ValueError("late")))
        assert get() is None
        got: List[Any] = []
        reading = threading.Thread(target=lambda: got.append(get()), daemon=True)
        reading.start()
        reading.join(10)
        assert not reading.is_alive(), "the reader waited for a message after a notice, with the Pool closed and idle"
        assert got == [None]
    finally:
        there.send(None)  # frees a reader that waits (the test has failed then)
        here.close()
        there.close()


def _busy_workers(script: subprocess.Popen, where: Any, n: int, timeout: float) -> List[int]:
    """The pids of the first ``n`` workers that report being busy; on a timeout, fail with
    every thread's stack of the script's session (faulthandler, enabled by _start_script)."""
    deadline = time.monotonic() + timeout
    while len(os.listdir(where)) < n and time.monotonic() < deadline and script.poll() is None:
        time.sleep(0.05)
    workers = [int(name) for name in os.listdir(where)]
    if len(workers) < n:
        members = _session_members(script.pid)
        for pid in members:
            os.kill(pid, signal.SIGABRT)  # faulthandler prints the stacks on stderr
        time.sleep(1)
        _kill_session(script.pid)
        _, err = script.communicate()
        pytest.fail(f"only {len(workers)} of {n} workers reported busy within {timeout} s; session "
                    f"{members}; stacks:\n{err[-20000:]}")
    return workers


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --------------------------------------------------------------------------
# 7. An interrupt right after a Pool starts
# --------------------------------------------------------------------------

INTERRUPTED_POOL = """
    import sys, time
    import nbmp
    method = sys.argv[1]
    try:
        print("ready", flush=True)  # inside the try: an interrupt from here on is the Pool's to raise
        with nbmp.get_context(method).Pool(4) as p:
            p.map(lambda x: time.sleep(1), range(40))
        print("finished without the interrupt", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", START_METHODS)
def test_an_interrupt_just_after_a_pool_starts_is_raised_and_leaves_nothing(method):
    delays = (0, 0.005, 0.01, 0.02, 0.03) if method == "fork" else (0, 0.01, 0.03)
    for delay in delays:
        script = _start_script(INTERRUPTED_POOL, method)
        try:
            assert script.stdout.readline().strip() == "ready", script.stderr.read()
            time.sleep(delay)
            os.killpg(script.pid, signal.SIGINT)  # the whole group, as a terminal or a kernel does
            sent = time.monotonic()
            try:
                out, err = script.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the script did not exit after the interrupt at {delay * 1000:.0f} ms ({method})")
            took = time.monotonic() - sent
            where = f"interrupt at {delay * 1000:.0f} ms, {method}"
            assert out.strip().splitlines()[-1:] == ["KeyboardInterrupt"], f"{where}: {out}\n{err}"
            assert took < 8, f"{where}: exit {took:.1f} s after the interrupt (the map takes 10 s)"
            assert "Traceback" not in err and "Exception ignored" not in err, f"{where}: {err}"
            assert _wait_gone(script.pid, 10) == [], f"{where}: processes left behind"
            assert os.listdir(script.tmp) == [], f"{where}: temporary files left behind"
        finally:
            _kill_session(script.pid)
            if script.returncode is None:
                script.communicate()



def _blocked_signals(q) -> None:
    with open("/proc/self/status") as f:
        q.put(next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk")))


@pytest.mark.timeout(60)
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the signal mask from /proc")
def test_a_plain_process_keeps_the_standard_sigint_after_a_pool_started_the_fork_server():
    if "forkserver" not in START_METHODS:
        pytest.skip("no forkserver here")
    ctx = nbmp.get_context("forkserver")
    with ctx.Pool(1) as pool:  # may start the fork server, with SIGINT blocked for the workers
        assert pool.apply(abs, (-1,)) == 1
    q = ctx.Queue()
    p = ctx.Process(target=_blocked_signals, args=(q,))
    p.start()
    assert q.get(timeout=30) & (1 << (signal.SIGINT - 1)) == 0, "SIGINT left blocked in a plain Process"
    p.join(30)

# --------------------------------------------------------------------------
# 4. A Pool's threads are nbmp's own, and end with its Pool
# --------------------------------------------------------------------------


def test_a_thread_whose_target_returned_is_not_a_user_thread():
    from nbmp._forking.threads import _kind
    thread = threading.Thread(target=lambda: None, name="finished-but-listed")
    thread.run()  # what the thread does before threading drops it from enumerate(): its target is deleted
    assert _kind(thread) == "finished"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["terminate", "close-join"])
def test_the_pools_threads_end_with_its_pool(ctx, ending):
    pool = ctx.Pool(2)
    assert pool.map(abs, [-1, -2]) == [1, 2]
    if ending == "terminate":
        pool.terminate()
    else:
        pool.close()
        pool.join()
    assert [t.name for t in threading.enumerate() if t.name.startswith("nbmp")] == []  # the watcher, the late reader


POOL_AFTER_POOL = """
    import threading, warnings
    import nbmp
    warnings.simplefilter("error")  # a ForkSafetyWarning about nbmp's own thread fails the script
    failures = []
    threading.excepthook = lambda a: failures.append(f"{a.thread.name}: {a.exc_type.__name__}: {a.exc_value}")
    for i in range(30):
        pool = nbmp.Pool(2)
        assert pool.map(abs, [-1, -2]) == [1, 2]
        if i % 2:
            pool.close()
            pool.join()
        else:
            with pool:
                pass
    print("thread failures:", failures)
"""


@pytest.mark.timeout(180)
def test_pool_after_pool_warns_about_no_thread_of_nbmp():
    proc = subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent(POOL_AFTER_POOL)],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "thread failures: []"
    assert "user threads" not in proc.stderr and "released memoryview" not in proc.stderr, proc.stderr


# --------------------------------------------------------------------------
# 6. An interrupted map gives back the shared memory its unread tasks held
# --------------------------------------------------------------------------


def _live_shared_memory():
    gc.collect()
    usage = nbmp.shm_usage()
    return usage.segments, usage.in_flight


@pytest.mark.timeout(120)
@pytest.mark.parametrize("carried_by", ["function", "items"])
def test_an_interrupted_map_releases_the_shared_arrays_it_carries(ctx, strategy, carried_by):
    before = _live_shared_memory()
    parent = os.getpid()
    shared = nbmp.zeros(1 << 16, dtype="uint8")
    moved = np.ones(1 << 21, dtype="uint8")  # above the threshold: copied into shared memory once per task

    def task(i, arrays=None):
        if i == 3:
            os.kill(parent, signal.SIGINT)  # the interrupt button, while the map is under way
        time.sleep(0.2)
        return int((arrays or (shared, moved))[0][0])

    with ctx.Pool(2) as pool:
        with pytest.raises(KeyboardInterrupt):
            if carried_by == "function":
                pool.map(task, range(60), chunksize=1)
            else:
                pool.starmap(task, [(i, (shared, moved)) for i in range(60)], chunksize=1)
    del shared, task
    deadline = time.monotonic() + 10
    while _live_shared_memory() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _live_shared_memory() == before, "segments or tickets of the interrupted map are still live"


# --------------------------------------------------------------------------
# 5. The dashboard's Stop ends the call with an error, carrying what finished
# --------------------------------------------------------------------------


class _ClickStopWhenFirstIsDone:
    """Presses the run's Stop button (as the widget does) once worker 0 has finished."""

    def __init__(self) -> None:
        self.run_id = None
        self.clicker = None

    def handle(self, event) -> None:
        from nbmp._base import events as _events
        from nbmp.widgets import _dashboard
        if isinstance(event, _events.RunStarted):
            self.run_id = event.run_id
        elif isinstance(event, _events.WorkerExited) and event.index == 0 and self.clicker is None:
            self.clicker = threading.Thread(target=_dashboard._stops[self.run_id])  # the Stop button's callback
            self.clicker.start()


def _first_quick_second_slow(i):
    if i == 0:
        return "done"
    time.sleep(60)
    return "late"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("join", [True, False])
def test_stop_ends_the_run_with_an_error_that_carries_the_finished_results(start_method, join):
    clicks = _ClickStopWhenFirstIsDone()
    started = time.monotonic()
    with pytest.raises(nbmp.ProcessStoppedException, match=r"stopped \(the dashboard's Stop button\)") as info:
        run = nbmp.spawn(_first_quick_second_slow, nprocs=2, join=join, start_method=start_method,
                         sinks=[clicks], dashboard="off", grace_period=1.0)
        if not join:
            while not run.join(timeout=30):
                pass
    clicks.clicker.join(30)
    error = info.value
    assert error.results == ["done", None] and error.finished == [0]
    assert error.error_index == 1 and isinstance(error, nbmp.ProcessException)
    assert time.monotonic() - started < 30  # stopped, not waited for
    again = pickle.loads(pickle.dumps(error))
    assert (again.results, again.finished, str(again)) == (error.results, error.finished, str(error))


# --------------------------------------------------------------------------
# Where no thread can start (a limit on processes, which counts threads: ulimit -u, a container's
# pids limit); a huge thread stack size makes every start fail for real, root or not.
# --------------------------------------------------------------------------

NO_THREAD_AFTER_THE_FORKS = """
    import sys, threading, psutil, nbmp
    threading.stack_size(1 << 46)  # the workers fork; then the first thread cannot start
    try:
        if sys.argv[1] == "Pool":
            nbmp.Pool(2)
        else:
            with nbmp.ProcessPoolExecutor(2) as executor:
                executor.submit(abs, -1)
    except RuntimeError as refused:
        print("raised:", refused)
    print("children:", len(psutil.Process().children()), "threads:", threading.active_count())
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("owner", ["Pool", "ProcessPoolExecutor"])
def test_workers_whose_pools_thread_cannot_start_are_stopped_and_the_error_raised(owner):
    script = _start_script(NO_THREAD_AFTER_THE_FORKS, owner)
    out, err = script.communicate(timeout=60)
    assert out.splitlines() == ["raised: can't start new thread", "children: 0 threads: 1"], err
    assert _wait_gone(script.pid, 10) == []


FORK_SERVER_WITHOUT_THREADS = """
    import sys, threading, nbmp
    if __name__ != "__main__":  # the fork server's preload: its workers cannot start a thread
        threading.stack_size(1 << 46)
    if __name__ == "__main__":
        print(nbmp.spawn(lambda i: i * 10, nprocs=2, start_method="forkserver"))
        worker = nbmp.get_context("forkserver").Process(target=print, args=("printed",))
        worker.start()
        worker.join()
        print(worker.exitcode)
"""


@pytest.mark.timeout(120)
def test_fork_server_workers_that_cannot_start_a_thread_run_as_standard_ones(tmp_path):
    # They run without the thread that watches their starter, as the stdlib's workers do.
    (path := tmp_path / "script.py").write_text(textwrap.dedent(FORK_SERVER_WITHOUT_THREADS))
    script = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    out, err = script.communicate(timeout=60)
    assert out.splitlines() == ["[0, 10]", "printed", "0"], err
    assert _wait_gone(script.pid, 10) == []


FEEDER_REFUSED = """
    import threading, psutil, nbmp
    from multiprocessing import queues
    start = threading.Thread.start
    def refused_to_feeders(thread):  # the system refuses the call queue's thread, and only that one
        if getattr(thread, "_target", None) is queues.Queue._feed:
            raise RuntimeError("can't start new thread")
        start(thread)
    threading.Thread.start = refused_to_feeders
    with nbmp.ProcessPoolExecutor(2) as executor:
        try:
            executor.submit(abs, -1).result(timeout=30)
        except Exception as error:
            print("raised:", type(error).__name__, "|", str(error.__cause__).strip().splitlines()[-2])
    print("children:", len(psutil.Process().children()), "threads:", threading.active_count())
"""


@pytest.mark.timeout(120)
def test_an_executor_whose_call_queue_thread_is_refused_breaks_and_stops_its_workers():
    script = _start_script(FEEDER_REFUSED)
    out, err = script.communicate(timeout=60)
    assert out.splitlines() == ["raised: BrokenProcessPool | RuntimeError: can't start new thread",
                                "children: 0 threads: 1"], err
    assert _wait_gone(script.pid, 10) == []


REFUSED_FORKS = """
    import os, threading, nbmp
    threading.Thread(target=print, args=("threads start",)).start()  # only forks are refused
    try:
        if (pid := os.fork()) == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("a fork is not refused")
    except BlockingIOError:
        pass
    for call in (lambda: nbmp.spawn(abs, nprocs=2), lambda: nbmp.Pool(2), nbmp.Process(target=abs, args=(1,)).start):
        try:
            call()
        except BlockingIOError as refused:
            print(refused.errno, "ulimit -u" in str(refused))
"""


@pytest.mark.timeout(120)
def test_a_refused_fork_keeps_its_error_type_and_names_the_limit():
    # A seccomp policy answers every clone (fork's system call; threads use clone3) with EAGAIN,
    # which is what a limit on processes answers.
    script = _start_script(sandboxed(REFUSED_FORKS, ["clone"], kill=False, error=errno.EAGAIN))
    out, err = script.communicate(timeout=60)
    if out.splitlines()[:1] != ["threads start"] or "not refused" in out:
        pytest.skip(f"this C library does not fork with clone alone, or starts threads with it: {out} {err[-300:]}")
    assert out.splitlines()[1:] == [f"{errno.EAGAIN} True"] * 3, err
    assert _wait_gone(script.pid, 10) == []
