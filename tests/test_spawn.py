"""nbmp.spawn / start_processes, modelled on torch's test_multiprocessing_spawn.py,
once per start method, plus nbmp's extensions (return values, lambdas, events)."""

from __future__ import annotations

import concurrent.futures
import faulthandler
import json
import os
import pickle
import re
import signal
import sys
import threading
import time

import psutil
import pytest

import nbmp
from conftest import TIMEOUT


def _square(i):
    return i * i


def _put_index(i, queue):
    queue.put(i)


def _raise_in(i, which):
    if i == which:
        raise ValueError(f"legitimate exception from process {i}")
    time.sleep(TIMEOUT)


def _raise_always(i):
    raise ValueError(f"legitimate exception from process {i}")


def _signal_self(i, signum):
    if i == 0:
        faulthandler.disable()  # pytest's faulthandler would print a dump of an intended SIGSEGV
        os.kill(os.getpid(), signum)
    time.sleep(TIMEOUT)


def _exit_with(i, code):
    if i == 0:
        sys.exit(code)
    time.sleep(TIMEOUT)


def _succeed_then_raise(i):
    if i == 0:
        return
    time.sleep(0.1)
    raise ValueError("legitimate exception")


def _sleep_forever(i):
    while True:
        time.sleep(1)


def _wait_for(i, event):
    event.wait(TIMEOUT)
    return i


class Recorder:
    """A sink that keeps every event."""

    def __init__(self):
        self.events = []

    def handle(self, event):
        self.events.append(event)

    def of(self, kind):
        return [e for e in self.events if type(e).__name__ == kind]


def test_success_returns_values_ordered_by_index(start_method):
    assert nbmp.spawn(_square, nprocs=4, start_method=start_method) == [0, 1, 4, 9]


def test_start_processes_is_the_same_call(start_method):
    assert nbmp.start_processes(_square, nprocs=2, start_method=start_method) == [0, 1]


def test_lambda_closure_and_args(start_method):
    offset = 100
    assert nbmp.spawn(lambda i, a, b: (i + offset, a, b), args=(1, "x"), nprocs=2,
                      start_method=start_method) == [(100, 1, "x"), (101, 1, "x")]


def test_default_start_method_is_nbmps_default():
    recorder = Recorder()
    nbmp.spawn(_square, nprocs=1, sinks=[recorder])
    assert recorder.of("RunStarted")[0].start_method == nbmp.get_start_method() == "fork"


def test_first_argument_is_the_index(ctx, start_method):
    queue = ctx.SimpleQueue()
    nbmp.start_processes(_put_index, args=(queue,), nprocs=2, start_method=start_method)
    assert sorted([queue.get(), queue.get()]) == [0, 1]
    del queue


def test_success_non_blocking(start_method):
    context = nbmp.start_processes(_square, nprocs=2, join=False, start_method=start_method)
    assert isinstance(context, nbmp.ProcessContext)
    assert context.pids() == [p.pid for p in context.processes]
    while not context.join(timeout=TIMEOUT):
        pass
    assert context.join(timeout=None) is True
    assert context.results == [0, 1]


def test_join_with_timeout_returns_false_while_running(ctx, start_method):
    event = ctx.Event()
    context = nbmp.spawn(_wait_for, args=(event,), nprocs=2, join=False, start_method=start_method)
    assert context.join(timeout=0.05) is False
    assert context.results is None
    event.set()
    while not context.join(timeout=TIMEOUT):
        pass
    assert context.results == [0, 1]
    del event


def test_workers_carry_their_index(start_method):
    context = nbmp.spawn(_square, nprocs=3, join=False, start_method=start_method)
    context.join(TIMEOUT)
    assert [(p.launch.index, p.launch.nprocs, p.launch.worker) for p in context.processes] == [(0, 3, True), (1, 3, True), (2, 3, True)]


@pytest.mark.parametrize("which", [0, 1])
def test_exception_single(start_method, which):
    with pytest.raises(nbmp.ProcessRaisedException,
                       match=f"\nValueError: legitimate exception from process {which}$") as info:
        nbmp.start_processes(_raise_in, args=(which,), nprocs=2, start_method=start_method)
    error = info.value
    assert f"-- Process {which} terminated with the following error:" in str(error)
    assert "Traceback (most recent call last):" in str(error)
    assert error.error_index == which
    assert error.pid == error.error_pid
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == f"legitimate exception from process {which}"


def test_exception_all(start_method):
    with pytest.raises(nbmp.ProcessRaisedException, match="\nValueError: legitimate exception from process (0|1)$"):
        nbmp.start_processes(_raise_always, nprocs=2, start_method=start_method)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM])
def test_terminate_signal(start_method, signum):
    name = signal.Signals(signum).name
    # torch's line first, then the likely cause (the same words the Pool and the dashboard use)
    with pytest.raises(nbmp.ProcessExitedException, match=f"^process 0 terminated with signal {name}\nLikely cause: "
                                                          f"{re.escape(nbmp._base.ends.likely_cause(-signum))}") as info:
        nbmp.start_processes(_signal_self, args=(signum,), nprocs=2, start_method=start_method)
    assert (info.value.exit_code, info.value.signal_name, info.value.error_index) == (-signum, name, 0)
    assert isinstance(info.value, nbmp.NbmpError)


def test_terminate_exit(start_method):
    with pytest.raises(nbmp.ProcessExitedException, match="^process 0 terminated with exit code 123\nLikely cause: "
                                                          r"the worker ended its process \(sys.exit\(123\)") as info:
        nbmp.start_processes(_exit_with, args=(123,), nprocs=2, start_method=start_method)
    assert info.value.exit_code == 123
    assert info.value.signal_name is None


def test_success_first_then_exception(start_method):
    with pytest.raises(nbmp.ProcessRaisedException, match="ValueError: legitimate exception"):
        nbmp.start_processes(_succeed_then_raise, nprocs=2, start_method=start_method)


def test_signal_from_outside_raises_exited(start_method):
    context = nbmp.spawn(_sleep_forever, nprocs=1, join=False, start_method=start_method)
    for pid in context.pids():
        os.kill(pid, signal.SIGTERM)
    with pytest.raises(nbmp.ProcessExitedException, match="terminated with signal SIGTERM"):
        context.join(TIMEOUT)
    with pytest.raises(nbmp.ProcessExitedException):  # and on every later call
        context.join(TIMEOUT)


def test_others_are_terminated(start_method):
    recorder = Recorder()
    with pytest.raises(nbmp.ProcessRaisedException):
        nbmp.spawn(_raise_in, args=(0,), nprocs=3, start_method=start_method, sinks=[recorder])
    exits = {e.index: e for e in recorder.of("WorkerExited")}
    assert exits[0].exitcode == 1 and not exits[0].killed_by_us
    for i in (1, 2):
        assert exits[i].exitcode == -signal.SIGTERM and exits[i].killed_by_us


def _ignore_sigterm_then_raise(i):
    if i == 0:
        time.sleep(0.5)
        raise RuntimeError("boom")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(TIMEOUT)


def test_others_are_killed_after_the_grace_period(start_method):
    recorder = Recorder()
    with pytest.raises(nbmp.ProcessRaisedException, match="RuntimeError: boom$"):
        nbmp.spawn(_ignore_sigterm_then_raise, nprocs=2, start_method=start_method, grace_period=0.2,
                   sinks=[recorder])
    exits = {e.index: e.exitcode for e in recorder.of("WorkerExited")}
    assert exits == {0: 1, 1: -signal.SIGKILL}


def _exit_then_others_finish(i, code):
    if i == 0:
        sys.exit(code)
    time.sleep(1.0)  # ends on its own, given the time


def test_a_failure_is_logged_as_torch_logs_it_for_each_worker_it_stops(start_method, caplog):
    # torch's ProcessContext.join logs "Terminating process <pid> via signal SIGTERM" for each
    # worker it stops after a failure (PyTorch's test_terminate_exit looks for it).
    context = nbmp.start_processes(_exit_with, args=(123,), nprocs=2, start_method=start_method, join=False)
    with caplog.at_level("WARNING"), pytest.raises(nbmp.ProcessExitedException, match="exit code 123"):
        while not context.join(TIMEOUT):
            pass
    survivor = context.processes[1]
    assert survivor.exitcode == -signal.SIGTERM
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("torch.multiprocessing.spawn", f"Terminating process {survivor.pid} via signal SIGTERM")]


def test_join_grace_period_lets_the_others_end_on_their_own_as_torchs(start_method, caplog):
    context = nbmp.start_processes(_exit_then_others_finish, args=(7,), nprocs=3, start_method=start_method,
                                   join=False)
    with caplog.at_level("WARNING"), pytest.raises(nbmp.ProcessExitedException, match="exit code 7"):
        while not context.join(grace_period=TIMEOUT):
            pass
    assert [p.exitcode for p in context.processes] == [7, 0, 0]  # not signalled: they finished
    assert caplog.records == []


def test_join_grace_period_then_sigterm_then_sigkill(start_method, caplog):
    context = nbmp.spawn(_ignore_sigterm_then_raise, nprocs=2, start_method=start_method, join=False)
    with caplog.at_level("WARNING"), pytest.raises(nbmp.ProcessRaisedException, match="RuntimeError: boom$"):
        while not context.join(grace_period=0.2):
            pass
    pid = context.processes[1].pid
    assert context.processes[1].exitcode == -signal.SIGKILL
    assert [r.getMessage() for r in caplog.records] == [
        f"Terminating process {pid} via signal SIGTERM",
        f"Unable to shutdown process {pid} via SIGTERM , forcefully exiting via SIGKILL"]


def test_a_failure_nobody_joins_still_stops_the_others(start_method):
    recorder = Recorder()
    context = nbmp.spawn(_raise_in, args=(0,), nprocs=2, start_method=start_method, join=False, sinks=[recorder])
    assert context._supervisor.done.wait(TIMEOUT), "the run never ended: the survivor was not stopped"
    exits = {e.index: e for e in recorder.of("WorkerExited")}
    assert exits[1].exitcode == -signal.SIGTERM and exits[1].killed_by_us
    with pytest.raises(nbmp.ProcessRaisedException):
        context.join(TIMEOUT)


def test_join_grace_period_is_checked():
    context = nbmp.spawn(_square, nprocs=1, join=False)
    with pytest.raises(TypeError, match="grace_period must be a number of seconds"):
        context.join(grace_period="soon")
    with pytest.raises(ValueError, match=">= 0"):
        context.join(grace_period=-1)
    while not context.join(TIMEOUT):
        pass


def test_process_exit_code(start_method):
    with pytest.raises(nbmp.ProcessExitedException) as info:
        nbmp.spawn(lambda i: sys.exit(12), nprocs=1, start_method=start_method)
    assert info.value.exit_code == 12


def test_sys_exit_zero_is_success_with_no_value(start_method):
    assert nbmp.spawn(lambda i: sys.exit(0) if i else "ok", nprocs=2, start_method=start_method) == ["ok", None]


def test_exceptions_pickle():
    raised = nbmp.ProcessRaisedException("msg", 1, 1234)
    exited = nbmp.ProcessExitedException("process 2 terminated with signal SIGKILL", 2, 99, -9, "SIGKILL")
    for error in (raised, exited, nbmp.ProcessException("m", 0, 5)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert (copy.error_index, copy.error_pid, copy.pid) == (error.error_index, error.error_pid, error.pid)
    copy = pickle.loads(pickle.dumps(exited))
    assert (copy.exit_code, copy.signal_name) == (-9, "SIGKILL")
    assert issubclass(nbmp.ProcessRaisedException, nbmp.ProcessException)
    assert issubclass(nbmp.ProcessExitedException, nbmp.ProcessException)


def test_caught_exceptions_pickle(start_method):
    with pytest.raises(nbmp.ProcessRaisedException) as info:
        nbmp.spawn(_raise_always, nprocs=1, start_method=start_method)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.error_index == 0


def test_cell_defined_exception_type_is_the_cause(start_method):
    class Custom(Exception):
        pass

    def fail(i):
        raise Custom("mine")

    with pytest.raises(nbmp.ProcessRaisedException, match="Custom: mine$") as info:
        nbmp.spawn(fail, nprocs=1, start_method=start_method)
    assert type(info.value.__cause__).__name__ == "Custom"


def test_unpicklable_return_value_is_reported(start_method):
    import threading
    with pytest.raises(nbmp.ProcessRaisedException, match="the return value"):
        nbmp.spawn(lambda i: threading.Lock(), nprocs=1, start_method=start_method)


def test_workers_ignore_sigint(start_method):
    def interrupt_self(i):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        return "survived"

    assert nbmp.spawn(interrupt_self, nprocs=2, start_method=start_method) == ["survived", "survived"]


def test_daemon_flag(start_method):
    context = nbmp.spawn(_square, nprocs=2, daemon=True, join=False, start_method=start_method)
    assert all(p.daemon for p in context.processes)
    context.join(TIMEOUT)


def test_events_of_a_run(start_method):
    recorder = Recorder()
    nbmp.spawn(lambda i: print("hi", i), nprocs=2, start_method=start_method, output="none", sinks=[recorder])
    kinds = [type(e).__name__ for e in recorder.events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished" and recorder.events[-1].ok
    assert recorder.events[0].nprocs == 2 and recorder.events[0].start_method == start_method
    run_ids = {e.run_id for e in recorder.events}
    assert len(run_ids) == 1
    for i in (0, 1):
        mine = [e for e in recorder.events if getattr(e, "index", None) == i]
        assert [type(e).__name__ for e in mine] == ["WorkerStarted", "WorkerOutput", "WorkerExited"]
        assert mine[1].line == f"hi {i}" and mine[1].stream == "stdout"


class Value:
    """A return value the test can hold a weak reference to."""

    def __init__(self, i):
        self.i = i


@pytest.mark.parametrize("dashboard", ["off", "text"])
def test_a_finished_run_keeps_nothing_alive(start_method, dashboard):
    # Freed by reference counting alone: a cycle through the run's records (its Stop
    # button held its supervisor, which held the button) kept every worker's value until
    # the next garbage collection -- or for as long as a shown dashboard kept its button.
    import gc
    import weakref
    gc.collect()
    gc.disable()
    try:
        values = nbmp.spawn(lambda i: Value(i), nprocs=2, start_method=start_method, dashboard=dashboard)
        assert [v.i for v in values] == [0, 1]
        refs = [weakref.ref(v) for v in values]
        del values
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_worker_raised_event(start_method):
    recorder = Recorder()
    with pytest.raises(nbmp.ProcessRaisedException):
        nbmp.spawn(_raise_always, nprocs=1, start_method=start_method, sinks=[recorder])
    (raised,) = recorder.of("WorkerRaised")
    assert (raised.index, raised.exc_type, raised.message) == (0, "ValueError", "legitimate exception from process 0")
    assert raised.traceback.rstrip().endswith("ValueError: legitimate exception from process 0")
    assert not recorder.events[-1].ok


def test_a_failing_sink_does_not_break_the_run():
    class Broken:
        def handle(self, event):
            raise RuntimeError("display problem")

    with pytest.warns(RuntimeWarning, match="Broken.*failed on RunStarted.*display problem"):
        assert nbmp.spawn(_square, nprocs=2, sinks=[Broken()]) == [0, 1]


# --------------------------------------------------------------------------
# Workers die with their parent
# --------------------------------------------------------------------------


def _nested_child(i, ready):
    ready.send(os.getpid())
    time.sleep(TIMEOUT * 4)


def _nested_parent(i, pids, start_method):
    # Pipes, not queues: a SIGKILLed process would leave a queue's named semaphores behind.
    ready_r, ready_w = nbmp.Pipe(duplex=False)
    nbmp.spawn(_nested_child, args=(ready_w,), nprocs=2, join=False, start_method=start_method)
    pids.send([ready_r.recv(), ready_r.recv()])  # both children have called prctl by now
    os.kill(os.getpid(), signal.SIGKILL)


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids):
    deadline = time.monotonic() + TIMEOUT
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if not _gone(pid)]


def _write_ends(i):
    """The pipes this worker's stdout and stderr are relayed through, and every pipe or socket
    this worker can write into, as ``pipe:[inode]``s."""
    own = {os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")}
    ends = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with open(f"/proc/self/fdinfo/{fd}") as info:
                flags = int(next(line for line in info if line.startswith("flags:")).split()[1], 8)
        except OSError:  # the listing's own fd, gone already
            continue
        if target.startswith(("pipe:", "socket:")) and flags & os.O_ACCMODE != os.O_RDONLY:
            ends.add(target)
    return sorted(own), sorted(ends)


@pytest.mark.skipif(not os.path.exists("/proc/self/fdinfo"), reason="reads /proc/self/fdinfo")
def test_a_worker_holds_no_other_workers_pipe_ends(start_method):
    # Every worker's pipes are made before the first fork: a worker that kept the later
    # workers' write ends open would hide their exit (no end of file) until it ended itself.
    found = nbmp.spawn(_write_ends, nprocs=3, start_method=start_method)
    for i, (own, _) in enumerate(found):
        assert len(own) == 2 and all(end.startswith("pipe:") for end in own), own
        for j, (_, ends) in enumerate(found):
            if j != i:
                assert not set(own) & set(ends), f"worker {j} can write into worker {i}'s output pipes"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd (Linux)")
def test_a_run_keeps_no_descriptor_open_once_it_returned(start_method):
    # A worker the run reaped but the standard module still counted as a child kept its sentinel
    # pipe open until the next process started.
    nbmp.spawn(abs, nprocs=1, start_method=start_method)  # whatever a first run opens for good (a fork server)
    before = set(os.listdir("/proc/self/fd"))
    assert nbmp.spawn(abs, nprocs=3, start_method=start_method) == [0, 1, 2]
    assert set(os.listdir("/proc/self/fd")) <= before


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal needs Linux prctl(2)")
def test_nested_workers_die_with_their_parent(start_method):
    pids_r, pids_w = nbmp.Pipe(duplex=False)
    with pytest.raises(nbmp.ProcessExitedException, match="signal SIGKILL"):
        nbmp.spawn(_nested_parent, args=(pids_w, start_method), nprocs=1, start_method=start_method)
    assert pids_r.poll(TIMEOUT)
    assert _wait_gone(pids_r.recv()) == []


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal needs Linux prctl(2)")
def test_workers_die_when_the_parent_is_killed(start_method):
    import subprocess
    script = f"""
import os, sys, time, nbmp
def sleeper(i):
    time.sleep({TIMEOUT * 4})
if __name__ == "__main__":
    ctx = nbmp.spawn(sleeper, nprocs=2, join=False, start_method={start_method!r})
    print(*ctx.pids(), flush=True)
    time.sleep({TIMEOUT * 4})
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        # Let both run their prctl: a worker that is sleeping is past it.
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not all(_sleeping(pid) for pid in pids):
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert _wait_gone(pids) == []


def test_workers_outlive_the_thread_that_started_them(start_method):
    # The kernel's parent-death signal follows the thread that forked: workers that a thread
    # started were killed (SIGTERM) when it ended, their parent alive.
    started: list = []
    starter = threading.Thread(target=lambda: started.append(
        nbmp.spawn(_sleep_then_rank, args=(1.0,), nprocs=2, join=False, start_method=start_method)))
    starter.start()
    starter.join()
    context = started[0]
    try:
        while not context.join(timeout=TIMEOUT):
            pass
    finally:
        for process in context.processes:
            process.kill()
            process.join()
    assert context.results == [0, 1]


def test_workers_forked_from_an_executors_thread_end_with_exit_code_0(start_method):
    # `loop.run_in_executor(None, nbmp.spawn, ...)`: a child forked by a ThreadPoolExecutor's thread
    # joined that thread, itself, at exit, and failed with exit code 1 after a good run (CPython gh-88110).
    def in_thread():
        ctx = nbmp.get_context(start_method)
        process = ctx.Process(target=abs, args=(-1,))
        process.start()
        process.join(TIMEOUT)
        with ctx.Pool(1) as pool:
            mapped = pool.map(abs, [-1, -2])
        return nbmp.spawn(_sleep_then_rank, args=(0.0,), nprocs=2, start_method=start_method), process.exitcode, mapped

    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        assert executor.submit(in_thread).result(TIMEOUT) == ([0, 1], 0, [1, 2])


def _sleep_then_rank(i, seconds):
    time.sleep(seconds)
    return i


def _sleeping(pid):
    try:
        process = psutil.Process(pid)
        return process.status() == psutil.STATUS_SLEEPING and "sleeper" not in process.cmdline()
    except psutil.NoSuchProcess:
        return False


# --------------------------------------------------------------------------
# Bad input: a clear error before any process starts
# --------------------------------------------------------------------------


@pytest.mark.parametrize("nprocs, error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), ("4", TypeError),
                                           (True, TypeError), (None, TypeError)])
def test_bad_nprocs(nprocs, error):
    with pytest.raises(error, match=re.escape(f"nprocs must be a positive int")) as info:
        nbmp.spawn(_square, nprocs=nprocs)
    assert repr(nprocs) in str(info.value) or str(nprocs) in str(info.value)
    assert nbmp.active_children() == []


def test_fn_not_callable():
    with pytest.raises(TypeError, match="fn must be callable, got 42"):
        nbmp.spawn(42, nprocs=2)


def test_unknown_start_method():
    with pytest.raises(ValueError, match="unknown start method 'threads'.*'fork'"):
        nbmp.spawn(_square, nprocs=2, start_method="threads")


def test_args_must_be_a_sequence():
    with pytest.raises(TypeError, match=r"args=\(x,\)"):
        nbmp.spawn(_square, args="abc", nprocs=1)


def test_bad_output_mode():
    with pytest.raises(ValueError, match="(?s)unknown output mode 'loud'.*'prefix'.*'raw'.*'none'"):
        nbmp.spawn(_square, nprocs=1, output="loud")


def test_bad_grace_period_and_sinks():
    with pytest.raises(ValueError, match="grace_period"):
        nbmp.spawn(_square, nprocs=1, grace_period=-1)
    with pytest.raises(TypeError, match="handle"):
        nbmp.spawn(_square, nprocs=1, sinks=[object()])


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver") if m in nbmp.get_all_start_methods()])
def test_unpicklable_argument_is_named(method):
    import threading
    with pytest.raises(nbmp.PicklingError, match=r"args\[1\].*'spawn'|args\[1\].*'forkserver'") as info:
        nbmp.spawn(lambda i, a, b: None, args=(1, threading.Lock()), nprocs=2, start_method=method)
    assert "args[1]" in str(info.value) and isinstance(info.value, TypeError)
    assert nbmp.active_children() == []


def test_unpicklable_argument_is_fine_under_fork():
    import threading
    lock = threading.Lock()
    assert nbmp.spawn(lambda i, lk: lk.locked(), args=(lock,), nprocs=1, start_method="fork") == [False]


@pytest.mark.torch
def test_torch_tensors_come_back(start_method):
    # torch passes a tensor's shared memory as a file descriptor that the parent fetches
    # from the worker while unpickling: the worker must still be there.
    torch = pytest.importorskip("torch")
    values = nbmp.spawn(lambda i, t: t * i, args=(torch.ones(3),), nprocs=2, start_method=start_method)
    assert [v.tolist() for v in values] == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


# -- the fork server's preload ----------------------------------------------------

SERVER_HAS_NUMPY = """
import json, os, sys
{imports}
import nbmp
{setup}

def numpy_in_the_server(i):
    # A forkserver worker's OS parent is the fork server: what it had loaded when it forked this worker.
    with open(f"/proc/{{os.getppid()}}/maps") as maps:
        return "_multiarray_umath" in maps.read()

if __name__ == "__main__":
    print(json.dumps(nbmp.spawn(numpy_in_the_server, nprocs=2, start_method="forkserver")))
"""

needs_forkserver = pytest.mark.skipif("forkserver" not in nbmp.get_all_start_methods() or not os.path.exists("/proc/self/maps"),
                                      reason="forkserver, and /proc to look into the server")


@needs_forkserver
@pytest.mark.parametrize("imports, setup, expected", [
    ("import numpy", "", [True, True]),  # the parent's frameworks are loaded once, in the server
    ("", "", [False, False]),  # never one the parent has not imported
    ("import numpy", "nbmp.set_forkserver_preload(['__main__'])", [False, False]),  # a user's list stands
], ids=["parent-has-numpy", "parent-without-numpy", "user-preload"])
def test_the_fork_server_preloads_the_parents_frameworks(imports, setup, expected):
    from helpers import run_main
    out = run_main(SERVER_HAS_NUMPY.format(imports=imports, setup=setup))
    assert json.loads(out.strip().splitlines()[-1]) == expected


def _run_main_module(tmp_path, source, *argv, **env):
    """Run ``source`` as ``python -m`` runs a module: a forkserver worker imports such a main module
    itself, before its first step, where these tests look at what the worker has. (A main *file*
    the fork server imports once, before its preload, from 3.14 on: never in the workers.)"""
    import subprocess
    (tmp_path / "main_module.py").write_text(source)
    proc = subprocess.run([sys.executable, "-m", "main_module", *argv], capture_output=True, text=True,
                          timeout=TIMEOUT * 2, env={**os.environ, **env, "PYTHONPATH": f"{tmp_path}:{os.getcwd()}"})
    assert proc.returncode == 0, proc.stderr
    return proc


SERVER_READIED = """
import gc, json
if __name__ != "__main__":  # a forkserver worker importing the main module, before nbmp's first step there
    FROZEN_AT_IMPORT = gc.get_freeze_count()
import numpy
import nbmp
{setup}

def readied_by_the_server(i):
    import __main__  # in the worker: this module, imported there
    return __main__.FROZEN_AT_IMPORT

if __name__ == "__main__":
    print(json.dumps(nbmp.spawn(readied_by_the_server, nprocs=1, start_method="forkserver")))
"""


@needs_forkserver
@pytest.mark.parametrize("setup, ready", [("", True), ("nbmp.set_forkserver_preload(['__main__'])", False)],
                         ids=["nbmps-preload", "user-preload"])
def test_the_fork_server_readies_itself_for_its_workers_before_it_forks(tmp_path, setup, ready):
    # Frozen in the server: a worker's collection never examines (so never copies) the server's
    # objects, even one that comes before nbmp's first step in the worker (this module's import).
    proc = _run_main_module(tmp_path, SERVER_READIED.format(setup=setup))
    count, = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (count > 10_000) == ready, count


SERVER_LAYERS = """
import json, sys
if __name__ != "__main__":  # a forkserver worker importing the main module, before it unpickles its task
    LOADED_AT_IMPORT = sorted(m for m in ("nbmp._spawn", "nbmp._pool", "nbmp.widgets") if m in sys.modules)
import nbmp

def loaded_at_import(i):
    import __main__
    return __main__.LOADED_AT_IMPORT

if __name__ == "__main__":
    print(json.dumps(nbmp.spawn(loaded_at_import, nprocs=1, start_method="forkserver")))
"""


@needs_forkserver
def test_the_fork_server_preloads_the_layers_the_parent_uses(tmp_path):
    # ``import nbmp`` loads spawn's and the Pool's layers on first use: the server loads them once
    # for its workers, as the parent had them, not the dashboard the parent's run made.
    proc = _run_main_module(tmp_path, SERVER_LAYERS)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [["nbmp._pool", "nbmp._spawn"]]


LAZY_SERVER = """
import sys
if __name__ != "__main__":  # a forkserver worker importing the main module, before its first step
    NUMPY_AT_IMPORT = sum(name.split(".")[0] == "numpy" for name in sys.modules)
import nbmp
{imports}

def numpy_at_import(i):
    import __main__
    return __main__.NUMPY_AT_IMPORT

if __name__ == "__main__":
    print(nbmp.spawn(numpy_at_import, nprocs=1, start_method="forkserver")[0])
"""


@needs_forkserver
@pytest.mark.skipif(not hasattr(sys, "lazy_modules"), reason="lazy imports (PEP 810) are new in 3.15")
@pytest.mark.parametrize("imports, mode", [("lazy import numpy", "normal"), ("import numpy\nnumpy.zeros(1)", "all")],
                         ids=["lazy-import", "all-imports-lazy"])
def test_the_fork_server_loads_what_the_parent_imports_lazily_in_full(tmp_path, imports, mode):
    # A framework the parent imported lazily is preloaded, and all of it: under lazy_imports=all
    # importing numpy loads about half its modules, the rest on first use, in each worker.
    import subprocess
    pytest.importorskip("numpy")
    eager = subprocess.run([sys.executable, "-c", "import sys, numpy; print(sum(n.split('.')[0] == 'numpy' for n in sys.modules))"],
                           capture_output=True, text=True, timeout=TIMEOUT, check=True)
    proc = _run_main_module(tmp_path, LAZY_SERVER.format(imports=imports), PYTHON_LAZY_IMPORTS=mode)
    assert int(proc.stdout.strip().splitlines()[-1]) >= int(eager.stdout), proc.stdout


PRELOAD_ON_ERROR = """
import nbmp
nbmp.set_forkserver_preload(["nbmp_no_such_module"], on_error={on_error!r})
p = nbmp.get_context("forkserver").Process(target=print)
try:
    p.start()
    p.join()
    print("started", p.exitcode)
except Exception as error:
    print("failed", type(error).__name__)
"""


@needs_forkserver
@pytest.mark.skipif(sys.version_info < (3, 15), reason="set_forkserver_preload(on_error=) is new in 3.15")
@pytest.mark.parametrize("on_error, out, err", [("ignore", "started 0", ""), ("warn", "started 0", "ImportWarning"),
                                                ("fail", "failed", "nbmp_no_such_module")])
def test_the_fork_server_preloads_with_the_users_on_error(on_error, out, err):
    import subprocess
    # ImportWarning is hidden by default; -W reaches the server, which starts with this interpreter's flags
    proc = subprocess.run([sys.executable, "-W", "always::ImportWarning", "-c", PRELOAD_ON_ERROR.format(on_error=on_error)], capture_output=True,
                          text=True, timeout=TIMEOUT * 2)
    assert proc.stdout.strip().startswith(out), proc.stdout + proc.stderr
    assert err in proc.stderr


# -- torch's parallel start of forkserver workers (TORCH_MP_PARALLEL_START) ---------

SLOW_MAIN = """
import json, os, sys, time
if __name__ != "__main__":  # a forkserver worker loading the main module, before its process object
    with open(os.environ["IMPORTS_LOG"], "a") as log:
        log.write(json.dumps([os.getpid(), time.monotonic(), time.monotonic() + 0.3]) + "\\n")
    time.sleep(0.3)

def length(i, payload):
    return len(payload) + i

if __name__ == "__main__":
    import nbmp
    os.environ[nbmp.ENV_VAR_PARALLEL_START] = sys.argv[1]
    # more than a pipe holds: each start waits until its worker has read it, after that import
    print(nbmp.spawn(length, args=(b"x" * (1 << 20),), nprocs=3, start_method="forkserver"))
"""


@needs_forkserver
@pytest.mark.parametrize("parallel", ["1", "0"])
def test_torchs_parallel_start_switch_starts_forkserver_workers_at_once(tmp_path, parallel):
    log = tmp_path / "imports.log"
    proc = _run_main_module(tmp_path, SLOW_MAIN, parallel, IMPORTS_LOG=str(log))
    assert proc.stdout.strip().splitlines()[-1] == str([1 << 20, (1 << 20) + 1, (1 << 20) + 2])
    spans = sorted(json.loads(line)[1:] for line in log.read_text().splitlines())
    assert len(spans) == 3
    # One by one, a worker is forked only once the one before has read its process object,
    # after its import; at once, the workers load the main module side by side.
    overlapping = any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert overlapping == (parallel == "1"), spans
