"""How nbmp starts its own workers (spawn's, a Pool's) under fork: back to back, with a pidfd
sentinel and nbmp's worker bootstrap (nbmp/_backend/worker_bootstrap.py). What a worker sees
and how it ends must be what the standard bootstrap gives; no worker holds another's pipes."""

from __future__ import annotations

import fcntl
import mmap
import multiprocessing
import multiprocessing.util
import os
import select
import signal
import stat
import sys
import threading
import time

import pytest

import nbmp
from nbmp._backend import exits, popen_fork
from nbmp._spawn.supervisor import Supervisor
from conftest import TIMEOUT
from helpers import forking_beside_the_watchdog, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nbmp's worker fork is Linux's (pidfds)")


def _pipes() -> dict:
    """This process's pipe descriptors: fd -> the pipe's inode."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            info = os.stat(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
        if stat.S_ISFIFO(info.st_mode):
            found[int(name)] = info.st_ino
    return found


def test_a_worker_holds_its_own_pipes_and_no_other_workers():
    before = set(_pipes().values())

    def new_pipes(i):
        time.sleep(0.2)  # every worker is forked before any of them looks
        # Where it will announce its end, and where it will wait for the run's end after that.
        channel, _, _, held = multiprocessing.current_process().exit_channel
        pipes = {fd: inode for fd, inode in _pipes().items() if inode not in before}
        return pipes, (pipes.pop(channel, None), pipes.pop(held, None))

    found = nbmp.spawn(new_pipes, nprocs=4, start_method="fork")
    seen = [pipes for pipes, _ in found]
    for i, pipes in enumerate(seen):
        # Of the run's pipes, its own stdout's and stderr's write ends, at 1 and 2: not the parent's
        # ends of any, nor another worker's (its result pipe is a socket pair, not counted here).
        assert sorted(pipes) == [1, 2] and pipes[1] != pipes[2], f"worker {i} holds these of the run's pipes: {pipes}"
    # And the write end of the run's one exit channel (nbmp._backend.exits) and the read end of
    # its release, the same two pipes for all.
    assert len({ends for _, ends in found}) == 1 and None not in found[0][1] and len(set(found[0][1])) == 2
    inodes = [set(p.values()) for p in seen]
    assert all(not (inodes[a] & inodes[b]) for a in range(4) for b in range(a + 1, 4)), "two workers share a pipe"


def test_a_worker_is_its_own_process_object_with_its_parent_alive():
    parent = os.getpid()

    def who(i):
        me, up = multiprocessing.current_process(), multiprocessing.parent_process()
        return (me.name, me.pid == os.getpid(), up.pid, up.is_alive(), multiprocessing.active_children(),
                multiprocessing.get_start_method(), sys.stdin.read())

    seen = nbmp.spawn(who, nprocs=2, start_method="fork")
    assert [s[1:] for s in seen] == [(True, parent, True, [], "fork", "")] * 2
    assert all(name.startswith("ForkProcess-") for name, *_ in seen) and seen[0][0] != seen[1][0]


def test_a_worker_runs_the_standard_after_fork_hooks():
    class Marked:
        forked_in = 0

    def mark(obj):
        obj.forked_in = os.getpid()

    obj = Marked()
    multiprocessing.util.register_after_fork(obj, mark)
    pids = nbmp.spawn(lambda i: (obj.forked_in, os.getpid()), nprocs=2, start_method="fork")
    assert all(marked == pid for marked, pid in pids)
    assert obj.forked_in == 0  # not in the parent


@pytest.mark.parametrize("code, expected", [(3, 3), ("bye", 1)])
def test_a_workers_sys_exit_is_its_exit_code(code, expected, capfd):
    with pytest.raises(nbmp.ProcessExitedException) as raised:
        nbmp.spawn(lambda i: sys.exit(code), nprocs=1, start_method="fork")
    assert raised.value.exit_code == expected
    if isinstance(code, str):
        assert "[0] bye" in capfd.readouterr().err  # the standard bootstrap writes the message


def test_a_worker_waits_for_its_threads_and_flushes_its_queue():
    queue = nbmp.Queue()

    def late(i):
        def after():
            time.sleep(0.3)
            print("thread done", flush=True)
        threading.Thread(target=after).start()  # not a daemon: the worker waits for it
        queue.put(b"x" * (1 << 20))  # more than a pipe holds: the feeder must flush it at exit
        return "returned"

    with_output = []
    sink = type("Sink", (), {"handle": lambda self, e: with_output.append(getattr(e, "line", None))})()
    run = nbmp.spawn(late, nprocs=1, start_method="fork", sinks=[sink], join=False)
    assert queue.get(timeout=TIMEOUT) == b"x" * (1 << 20)  # read while it runs: it waits for that
    assert run.join(timeout=TIMEOUT) and run.results == ["returned"]
    assert "thread done" in with_output
    queue.close()
    queue.join_thread()


def test_pool_workers_start_back_to_back_and_serve():
    with nbmp.Pool(3) as pool:
        names = pool.map(lambda x: multiprocessing.current_process().name, range(30), chunksize=1)
        parents = set(pool.map(lambda x: multiprocessing.parent_process().pid, range(6), chunksize=1))
        sentinels = [w.sentinel for w in pool._pool]
    assert parents == {os.getpid()}
    assert all(name.startswith("ForkPoolWorker-") for name in names)
    if popen_fork.FORKS_WORKERS:  # a pidfd each: readable once its worker has ended
        assert len(set(sentinels)) == 3


def test_a_failed_fork_leaves_no_worker_and_says_so(monkeypatch):
    forks = []
    real_fork = os.fork

    def fork_twice():
        if len(forks) == 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(popen_fork.os, "fork", fork_twice)
    with pytest.raises(BlockingIOError):
        nbmp.spawn(lambda i: time.sleep(TIMEOUT), nprocs=4, start_method="fork")
    assert len(forks) == 2  # the two forked were stopped (the leak guard checks none is left)


def _hold_a_lock(i, path):
    """Holds an flock on ``path`` until the process ends."""
    held = open(path, "w")
    fcntl.flock(held, fcntl.LOCK_EX)
    _hold_a_lock.kept = held
    return os.getpid()


def _seen_at_its_end(seen):
    """A sink that notes, as each worker's end is reported, whether its process still exists."""
    def handle(event):
        if type(event).__name__ == "WorkerExited":
            seen.append((event, os.path.exists(f"/proc/{event.pid}")))
    return type("Sink", (), {"handle": staticmethod(handle)})()


def _private_pages(size):
    """``size`` bytes of written private pages, in small pages (their page tables a fork copies)."""
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    pages.madvise(mmap.MADV_NOHUGEPAGE)
    pages[::4096] = b"\x01" * (size // 4096)
    return pages


def test_a_run_ends_on_its_workers_word_and_reaps_them_after(tmp_path):
    # spawn(join=True) ends once each worker said it ends (nbmp._backend.exits): by then it has
    # closed every descriptor (its lock is free); the kernel is still tearing it down (this
    # parent's 512 MiB of pages make the page tables its fork copies take ~10 ms to free).
    path, seen = tmp_path / "lock", []
    parent_pages = _private_pages(512 << 20)
    try:
        (pid,) = nbmp.spawn(_hold_a_lock, args=(str(path),), nprocs=1, start_method="fork",
                            sinks=[_seen_at_its_end(seen)])
        with open(path, "w") as mine:
            fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the worker still held it
    finally:
        parent_pages.close()
    ((exited, existed),) = seen
    assert existed, "the worker's end was reported only once it was reaped"
    assert exited.pid == pid and exited.exitcode == 0 and exited.rss > 0  # its peak, as it announced it
    supervisor = [t for t in threading.enumerate() if t.name.startswith("nbmp-spawn-")]
    for thread in supervisor:
        thread.join(TIMEOUT)  # it reaps the worker, then ends
    assert not os.path.exists(f"/proc/{pid}") and not any(t.is_alive() for t in supervisor)


def _grow(i, size):
    _grow.kept = _private_pages(size)  # its own memory, given back by its exit
    return os.getpid()


def test_a_worker_with_much_memory_of_its_own_is_waited_for():
    # Past exits.PRIVATE_LIMIT a worker says nothing: spawn returns once its memory is given back.
    seen = []
    (pid,) = nbmp.spawn(_grow, args=(256 << 20,), nprocs=1, start_method="fork", sinks=[_seen_at_its_end(seen)])
    ((exited, existed),) = seen
    assert not existed and exited.rss >= 256 << 20  # reaped first (wait4's peak)
    assert 256 << 10 > exits.PRIVATE_LIMIT


def _exit_with(i, code):
    sys.exit(code)


@pytest.mark.parametrize("code", [3, 300, -1])
def test_an_announced_exit_code_is_the_one_waitpid_gives(code):
    # join=True: the code the worker announced; join=False: the one its reaping gives (no channel).
    with pytest.raises(nbmp.ProcessExitedException) as announced:
        nbmp.spawn(_exit_with, args=(code,), nprocs=1, start_method="fork")
    context = nbmp.spawn(_exit_with, args=(code,), nprocs=1, start_method="fork", join=False)
    with pytest.raises(nbmp.ProcessExitedException) as reaped:
        context.join(TIMEOUT)
    assert announced.value.exit_code == reaped.value.exit_code == code & 0xFF


def _gone(pid):
    """Process ``pid`` (a child of this one, reaped by its run's thread) no longer exists."""
    return not os.path.exists(f"/proc/{pid}")


def _ends_first(i, flag, fail):
    # Worker 0 ends at once; worker 1 until the test has looked at worker 0 (the flag), then ends or fails.
    if i == 1:
        wait_until(lambda: os.path.exists(flag), "the test has looked at worker 0", TIMEOUT)
        if fail:
            raise ValueError("worker 1 fails")
    return os.getpid()


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]  # R, S, Z...


@pytest.mark.parametrize("fail", [False, True])
def test_an_ended_worker_waits_until_its_caller_has_the_outcome(tmp_path, monkeypatch, fail):
    # After its record (nbmp._backend.exits) a worker with little memory of its own waits, its
    # teardown out of the way of the run, until spawn has its outcome; then it exits at once, as
    # a batch process that preempts no one (here the wait's own limit is 60 s, inherited by fork).
    monkeypatch.setattr(exits, "PARK_LIMIT", 60.0)
    flag, seen, kept = tmp_path / "looked", {}, []
    start = Supervisor.start
    monkeypatch.setattr(Supervisor, "start", lambda self: (kept.append(self), start(self))[1])  # no release when collected

    def handle(event):
        if type(event).__name__ == "WorkerExited" and event.index == 0:
            seen["policy"] = os.sched_getscheduler(event.pid)
            time.sleep(0.3)
            seen["state"], seen["pid"] = _state(event.pid), event.pid  # still there, asleep
            flag.touch()

    sink = type("Sink", (), {"handle": staticmethod(handle)})()
    if fail:
        with pytest.raises(nbmp.ProcessRaisedException, match="worker 1 fails"):
            nbmp.spawn(_ends_first, args=(str(flag), True), nprocs=2, start_method="fork", sinks=[sink])
    else:
        assert nbmp.spawn(_ends_first, args=(str(flag), False), nprocs=2, start_method="fork",
                          sinks=[sink])[0] == seen["pid"]
    assert seen["policy"] == os.SCHED_BATCH and seen["state"] == "S"
    wait_until(lambda: _gone(seen["pid"]), "the worker exits after the run's end (not its 60 s limit)", 10)


def test_an_ended_worker_left_waiting_exits_on_its_own(monkeypatch):
    # A run whose end never comes (here: the channel is never closed) keeps a worker PARK_LIMIT s at most.
    monkeypatch.setattr(exits, "PARK_LIMIT", 0.5)
    channel = exits.ExitChannel()
    process = type("Process", (), {})()
    channel.attach(process)
    with forking_beside_the_watchdog():
        pid = os.fork()
    if pid == 0:
        exits.announce(process.exit_channel, 7)
        os._exit(7)
    try:
        channel.forked()
        assert select.select([channel.fileno()], [], [], TIMEOUT)[0], "no record came"
        (ending,) = channel.read()
        assert (ending.token, ending.code) == (1, 7)
        _, status = os.waitpid(pid, 0)  # its own limit ends the wait (pytest-timeout guards a hang)
    finally:
        channel.close()
    assert os.waitstatus_to_exitcode(status) == 7


def test_ended_workers_are_let_go_when_an_interrupt_stops_the_run_as_it_starts(monkeypatch):
    # The interrupt is raised once the run has started (spawn defers it): the workers have
    # ended and wait by then, and spawn's way out through the interrupt lets them go too.
    monkeypatch.setattr(exits, "PARK_LIMIT", 60.0)
    kept, pids = [], []
    start = Supervisor.start

    def start_then_interrupt(self):
        kept.append(self)  # no release when collected
        start(self)
        wait_until(lambda: all(w.process._popen.ended for w in self.workers), "every worker has said it ends", TIMEOUT)
        pids.extend(w.process.pid for w in self.workers)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Supervisor, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        nbmp.spawn(_ends_first, args=("unused", False), nprocs=1, start_method="fork")
    assert pids
    wait_until(lambda: all(_gone(pid) for pid in pids), "the workers exit after the interrupted run", 10)
