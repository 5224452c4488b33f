"""How nbmp's own workers (spawn's, a Pool's) live and end: through the standard bootstrap, so
that what a worker sees, what patches it (coverage, profilers), its finalizers, its signal
handlers and its threads are what the standard module gives; no worker holds another's pipes."""

from __future__ import annotations

import errno
import multiprocessing
import multiprocessing.util
import os
import platform
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nbmp
from nbmp._backend import popen_fork
from conftest import TIMEOUT
from helpers import run_main, sandboxed, wait_until

pytestmark = pytest.mark.timeout(120)


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
        return {fd: inode for fd, inode in _pipes().items() if inode not in before}

    seen = nbmp.spawn(new_pipes, nprocs=4, start_method="fork")
    outputs = [{pipes[1], pipes[2]} for pipes in seen]  # each worker's own stdout and stderr
    assert all(len(o) == 2 for o in outputs)
    for i, pipes in enumerate(seen):
        # A worker holding another's output pipe would keep that one's output open past its end.
        others = set().union(*(outputs[j] for j in range(4) if j != i))
        assert not set(pipes.values()) & others, f"worker {i} holds another worker's output pipe: {pipes}"


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


def test_pool_workers_are_forked_by_the_pool_and_serve():
    with nbmp.Pool(3) as pool:
        names = pool.map(lambda x: multiprocessing.current_process().name, range(30), chunksize=1)
        parents = set(pool.map(lambda x: multiprocessing.parent_process().pid, range(6), chunksize=1))
    assert parents == {os.getpid()}
    assert all(name.startswith("ForkPoolWorker-") for name in names)


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




# --------------------------------------------------------------------------
# A guest in the user's process: what programs that embed nbmp rely on
# --------------------------------------------------------------------------


def test_what_patches_the_standard_bootstrap_runs_in_every_worker():
    # coverage (concurrency = multiprocessing), pytest-cov and VizTracer patch
    # BaseProcess._bootstrap: every nbmp worker must go through it.
    out = run_main("""
        import multiprocessing.process, os, sys
        import nbmp
        seen = nbmp.SimpleQueue()
        real = multiprocessing.process.BaseProcess._bootstrap
        def patched(self, *args, **kwargs):
            seen.put(self.name)
            return real(self, *args, **kwargs)
        multiprocessing.process.BaseProcess._bootstrap = patched
        import time
        nbmp.spawn(lambda i: i, nprocs=2, start_method="fork")
        with nbmp.get_context("fork").Pool(2) as pool:
            pool.map(abs, range(4))
            pool.close()  # each worker ends on its own: a terminate could end one still starting
            pool.join()
        with nbmp.ProcessPoolExecutor(2, mp_context=nbmp.get_context("fork")) as executor:
            list(executor.map(time.sleep, [0.2] * 4))  # busy: the executor starts its second worker
        print(sorted(seen.get().split("-")[0] for _ in range(6)))
    """)  # (spawned children run the standard bootstrap of a fresh interpreter, which a tool patches there)
    assert "['ForkPoolWorker', 'ForkPoolWorker', 'ForkProcess', 'ForkProcess', 'ForkProcess', 'ForkProcess']" in out, out


def test_coverage_sees_the_workers_of_a_pool_its_with_block_terminated(tmp_path):
    # coverage (concurrency = multiprocessing, sigterm = true) saves a worker's data from the SIGTERM
    # handler it installs as the worker starts; a worker that reset SIGTERM to its default there
    # ended at the `with` block's terminate without saving: coverage missed every task it ran.
    coverage = pytest.importorskip("coverage")
    (tmp_path / "cov.ini").write_text("[run]\nconcurrency = multiprocessing\nparallel = true\nsigterm = true\n")
    (tmp_path / "started").mkdir()
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        import nbmp

        def task(directory):
            open(os.path.join(directory, str(os.getpid())), "w").close()  # runs in the workers only
            time.sleep(60)

        if __name__ == "__main__":
            # The parent's own coverage handler, inherited by a forked worker, would run there after
            # the worker's and save the parent's data from it: coverage's quirk, not the subject here.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            with nbmp.get_context(sys.argv[1]).Pool(2) as pool:
                pool.map_async(task, ["started"] * 2, chunksize=1)  # both workers busy: none ends on its own
                while len(os.listdir("started")) < 2:
                    time.sleep(0.01)
                print(*os.listdir("started"))
    """))

    for method in nbmp.get_all_start_methods():
        for old in [*tmp_path.glob(".coverage*"), *(tmp_path / "started").iterdir()]:
            old.unlink()
        ran = subprocess.run([sys.executable, "-m", "coverage", "run", "--rcfile=cov.ini", "prog.py", method], cwd=tmp_path,
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert ran.returncode == 0, ran.stderr
        for pid in ran.stdout.split():
            saved = list(tmp_path.glob(f".coverage.*pid{pid}.*"))
            assert len(saved) == 1, f"{method}: coverage saved {len(saved)} data files from worker {pid}"
            data = coverage.CoverageData(basename=str(saved[0]))
            data.read()
            assert 6 in data.lines(str(tmp_path / "prog.py")), f"{method}: coverage has nothing from worker {pid}"


def test_a_sigterm_handler_the_parent_had_does_not_keep_a_pools_forked_worker_alive():
    # A forked worker inherits its parent's handlers; one that does not exit (a service's, a kernel's)
    # would make the terminate at the end of `with Pool()` wait for ever, as it does for the standard Pool.
    # The Pool's start holds the program's handlers (a shielded step): the worker must still get the
    # program's handler as the one to drop, not the step's recorder: a worker's SIGTERM ends it.
    out = run_main("""
        import signal
        import nbmp
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        with nbmp.get_context("fork").Pool(2) as pool:
            print(pool.map(abs, [-1, -2]), pool.apply(signal.getsignal, (signal.SIGTERM,)) == signal.SIG_DFL)
    """)
    assert out.strip() == "[1, 2] True"


def test_an_event_loops_signal_handlers_neither_keep_spawns_workers_alive_nor_hear_their_signals(tmp_path):
    # asyncio's add_signal_handler installs a no-op Python handler and a wake-up fd, which a forked
    # worker inherited: a sibling's failure sent it a SIGTERM it ignored (SIGKILL 3 s later), and each
    # signal it caught (a SIGINT, which workers ignore) woke the parent's loop as if sent to the parent.
    out = run_main(f"""
        import asyncio, os, signal, time
        import nbmp

        def work(i, folder):
            open(os.path.join(folder, str(i)), "w").close()
            if i == 0:
                while len(os.listdir(folder)) < 3:
                    time.sleep(0.01)
                raise ValueError("failed")
            time.sleep(60)

        async def main():
            loop, heard = asyncio.get_running_loop(), []
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, heard.append, signum)
            run = nbmp.spawn(work, args=({str(tmp_path)!r},), nprocs=2, join=False)
            while len(os.listdir({str(tmp_path)!r})) < 2:
                time.sleep(0.01)
            time.sleep(0.2)  # both workers past their first step
            os.kill(run.pids()[1], signal.SIGINT)
            open(os.path.join({str(tmp_path)!r}, "go"), "w").close()
            try:
                run.join(60)
            except nbmp.ProcessRaisedException:
                pass
            await asyncio.sleep(0.5)  # the loop reads its wake-up fd
            print(heard, [p.exitcode for p in run.processes])

        asyncio.run(main())
    """)
    assert out.strip() == f"[] [1, -{int(signal.SIGTERM)}]"


def test_a_sigterm_the_parent_blocks_stops_its_workers_all_the_same():
    # A program that waits for its signals (sigwait, signalfd) blocks them, and its workers inherited
    # the mask: a Pool's terminate waited for the running tasks, a failed run's stop for a SIGKILL.
    out = run_main("""
        import signal, time
        import nbmp

        def work(i):
            if i == 0:
                time.sleep(0.5)
                raise ValueError("failed")
            time.sleep(60)

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        run = nbmp.spawn(work, nprocs=2, join=False)
        try:
            run.join(60)
        except nbmp.ProcessRaisedException:
            pass
        ended = []
        for method in nbmp.get_all_start_methods():
            with nbmp.get_context(method).Pool(2) as pool:
                pool.map_async(time.sleep, [60, 60], chunksize=1)
                time.sleep(0.5)
                started = time.monotonic()
            ended.append(time.monotonic() - started < 10)
        print([p.exitcode for p in run.processes], ended)
    """)
    assert out.strip() == f"[1, -{int(signal.SIGTERM)}] [True, True, True]"


@pytest.mark.parametrize("context", ["nbmp's", "the standard module's"])
def test_a_signal_a_pool_worker_catches_does_not_wake_its_parents_event_loop(context):
    # A forked worker inherits the parent's wake-up fd (asyncio's add_signal_handler sets one): each
    # signal the worker caught, a SIGINT it ignores included, ran the parent's handler for it. A
    # standard context's worker starts with the standard bootstrap, so its Pool loop drops the fd.
    out = run_main(f"""
        import asyncio, multiprocessing, os, signal
        import nbmp

        async def main():
            loop, heard = asyncio.get_running_loop(), []
            loop.add_signal_handler(signal.SIGINT, heard.append, signal.SIGINT)
            ctx = {"nbmp" if context == "nbmp's" else "multiprocessing"}.get_context("fork")
            with nbmp.pool.Pool(1, context=ctx) as pool:
                pid = pool.apply(os.getpid)
                os.kill(pid, signal.SIGINT)
                alive = pool.apply(os.getpid) == pid
            await asyncio.sleep(0.5)  # the loop reads its wake-up fd
            print(heard, alive)

        asyncio.run(main())
    """)
    assert out.strip() == "[] True"


@pytest.mark.parametrize("reaping", ["SIGCHLD ignored", "a reaper of its own"])
def test_a_program_that_reaps_its_children_itself_runs_every_kind_of_worker(reaping):
    # A daemon ignores SIGCHLD (the kernel reaps its children) or waits for them from a handler: their
    # exit statuses never come. An executor's shutdown and spawn waited for them for ever, each
    # Pool's join a second per worker; a worker that died without a value gave None.
    out = run_main(f"""
        import os, signal
        import nbmp

        def reap(signum, frame):
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass

        signal.signal(signal.SIGCHLD, signal.SIG_IGN if {reaping == "SIGCHLD ignored"} else reap)
        ctx = nbmp.get_context("fork")
        with ctx.Pool(2) as pool:
            assert pool.map(abs, [-1, -2]) == [1, 2]
        with nbmp.ProcessPoolExecutor(2, mp_context=ctx) as executor:
            assert list(executor.map(abs, [-3])) == [3]
        assert nbmp.spawn(lambda i: i, nprocs=2, start_method="fork") == [0, 1]
        process = ctx.Process(target=abs, args=(1,))
        process.start()
        process.join()
        print(process.exitcode, process.is_alive())
        try:
            print(nbmp.spawn(lambda i: os._exit(3), nprocs=1, start_method="fork"))
        except nbmp.ProcessExitedException:
            print("failed")
    """)
    assert out.split() == ["0", "False", "failed"]


def test_a_program_that_restores_sigpipes_default_is_not_ended_by_spawn():
    # Command-line tools restore SIGPIPE's default (so that `| head` ends them quietly): the receipt
    # spawn sends a worker that had already gone raised SIGPIPE there, which ended the whole program.
    out = run_main("""
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        import nbmp
        for _ in range(10):
            assert nbmp.spawn(lambda i: i, nprocs=4, start_method="fork") == [0, 1, 2, 3]
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_program_that_restores_sigpipes_default_survives_a_worker_gone_before_its_receipt():
    # A value that passes a descriptor keeps its worker waiting for the parent's receipt; this worker
    # is gone before the parent, slow to unpickle the value, writes it: EPIPE, not SIGPIPE.
    out = run_main("""
        import os, signal, threading, time
        from multiprocessing import reduction
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        import nbmp

        def slowly():
            time.sleep(1)
            return "value"

        class Slow:
            def __reduce__(self):
                return slowly, ()

        def fn(i):
            reduction.DupFd(os.dup(0))  # served from this process: the worker waits for the receipt
            threading.Timer(0.2, os._exit, (0,)).start()
            return Slow()

        print(nbmp.spawn(fn, nprocs=1, start_method="fork"))
    """)
    assert out.strip() == "['value']"


def test_a_program_started_with_its_standard_streams_closed_gets_every_workers_result(tmp_path):
    # A daemon starts with fds 0-2 closed, so a run's first pipes are made there; a worker's
    # redirection of fds 1 and 2 overwrote its own result pipe, and its value came back as None.
    # A later worker's fd 1 or 2 can be its start's own pipe (under spawn, the end whose closing tells
    # the parent it has exited): the sleep lets the parent take an early close for the worker's end.
    script = textwrap.dedent("""
        import sys, time
        import nbmp
        results = [nbmp.spawn(lambda i: (i, print("line", i), time.sleep(0.3))[:2], nprocs=3, start_method=method)
                   for method in nbmp.get_all_start_methods()]
        with open(sys.argv[1], "w") as out:
            out.write(repr(results))
    """)
    found = tmp_path / "results"
    subprocess.run(["/bin/sh", "-c", 'exec "$0" -c "$1" "$2" <&- >&- 2>&-', sys.executable, script, str(found)],
                   check=True, timeout=TIMEOUT)
    assert found.read_text() == repr([[(0, None), (1, None), (2, None)]] * len(nbmp.get_all_start_methods()))


def test_a_signal_handler_that_raises_while_workers_start_leaves_no_worker_and_no_thread():
    # A program's SIGALRM timeout raises at whatever bytecode runs: right after a fork it left that
    # worker started and unrecorded (never stopped, never reaped), and spawn's supervisor crashed.
    # Now it is raised once the start is complete, and the run or Pool it cut short is stopped.
    out = run_main("""
        import os, signal, threading
        import nbmp

        class Timeout(BaseException):
            pass

        def timeout(signum, frame):
            raise Timeout()

        signal.signal(signal.SIGALRM, timeout)
        nbmp.register_fork_handler(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGALRM))
        for start in (lambda: nbmp.spawn(lambda i: i, nprocs=3), lambda: nbmp.Pool(3)):
            try:
                start()
            except Timeout:
                with open(f"/proc/self/task/{os.getpid()}/children") as f:
                    print(f.read().split(), threading.active_count(), signal.getsignal(signal.SIGALRM) is timeout)
    """)
    assert out.splitlines() == ["[] 1 True"] * 2


def test_a_program_with_a_small_thread_stack_size_runs_fork_server_workers(tmp_path):
    # The fork server imports the program's main module, which set threading.stack_size; a worker it
    # starts watches its starter from a thread, on whose stack select()'s descriptor tables overflowed.
    script = tmp_path / "small_stacks.py"
    script.write_text(textwrap.dedent("""
        import sys, threading
        # 3.14+ matches no exception tuple on a stack of 64 KiB or less (its own threads' included)
        threading.stack_size((32 if sys.version_info < (3, 14) else 96) * 1024)
        import nbmp

        if __name__ == "__main__":
            print(nbmp.spawn(abs, nprocs=2, start_method="forkserver"))
            with nbmp.get_context("forkserver").Pool(2) as pool:
                print(pool.map(abs, [-1, -2]))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.stdout.split("\n")[:2] == ["[0, 1]", "[1, 2]"], done.stderr


SECCOMP = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"),
                             reason="a seccomp filter for Linux on x86_64 or aarch64")


@SECCOMP
def test_a_sandbox_that_kills_on_scheduling_and_realtime_signal_calls_runs_every_kind_of_worker():
    # A hardened service's policy (systemd's @resources) kills a process that changes scheduling or
    # priorities or sends real-time signals: the standard module makes none of these calls.
    out = run_main(sandboxed("""
        import nbmp
        for method in nbmp.get_all_start_methods():
            ctx = nbmp.get_context(method)
            with ctx.Pool(2) as pool:
                assert pool.map(abs, [-1, -2]) == [1, 2]
            with nbmp.ProcessPoolExecutor(2, mp_context=ctx) as executor:
                assert list(executor.map(abs, [-3])) == [3]
            assert nbmp.spawn(lambda i: i, nprocs=2, start_method=method) == [0, 1]
        print("ok")
    """, ["sched_setscheduler", "sched_setattr", "sched_setaffinity", "setpriority", "rt_sigqueueinfo",
          "rt_tgsigqueueinfo", "ioprio_set"], kill=True))
    assert out.strip() == "ok"


@SECCOMP
@pytest.mark.parametrize("imported_first", [False, True])
def test_a_sandbox_that_refuses_memfd_create_leaves_pools_and_shared_arrays_working(imported_first):
    # memfd_create refused (EPERM), as a sandbox may: a Pool's slots and shared arrays use files in a
    # directory instead, as where there is no memfd_create at all. A service that imports first and
    # then locks itself down keeps the strategy it had, its files unlinked as soon as they are made.
    out = run_main(("import nbmp\n" if imported_first else "") + sandboxed("""
        import nbmp
        for method in ("fork", "spawn"):
            with nbmp.get_context(method).Pool(2) as pool:
                assert pool.map(abs, [-1, -2]) == [1, 2]
            assert nbmp.spawn(lambda i, a: float(a.sum()), args=(nbmp.zeros(1 << 18) + 1,), nprocs=2,
                              start_method=method) == [float(1 << 18)] * 2
        print(nbmp.get_sharing_strategy())
    """, ["memfd_create"], kill=False))
    assert out.strip() == ("file_descriptor" if imported_first else "file_system")


@SECCOMP
def test_a_sandbox_that_refuses_fallocate_still_shares_arrays():
    # fallocate refused (EPERM) is no full /dev/shm: the segment is sized as where fallocate does not exist.
    out = run_main(sandboxed("""
        import nbmp
        for strategy in ("file_descriptor", "file_system"):
            nbmp.set_sharing_strategy(strategy)
            print(nbmp.spawn(lambda i, a: float(a.sum()), args=(nbmp.zeros(1 << 18) + 1,), nprocs=2))
    """, ["fallocate"], kill=False))
    assert out.split("\n")[:2] == [str([float(1 << 18)] * 2)] * 2


@SECCOMP
@pytest.mark.parametrize("error", [errno.EPERM, errno.EAFNOSUPPORT])  # a seccomp filter's; systemd's RestrictAddressFamilies=none
def test_a_sandbox_that_refuses_sockets_runs_spawn_as_it_runs_the_standard_pool(error):
    # A service without network access may make no socket, not even a local pair; the standard
    # Pool and torch's spawn talk to their workers through pipes.
    out = run_main(sandboxed("""
        import nbmp
        for method in ("fork", "spawn"):
            print(nbmp.spawn(lambda i: i * 10, nprocs=2, start_method=method))
            with nbmp.get_context(method).Pool(2) as pool:
                print(pool.map(abs, [-1, -2]))
        import numpy as np
        big = np.ones(1 << 18)  # 2 MiB, above the sharing threshold: by value here, as the standard Pool sends it
        with nbmp.Pool(2) as pool:
            print(float(pool.apply(np.sum, (big,))), float(pool.apply(np.ones, (1 << 18,)).sum()))
        try:
            nbmp.zeros(4)
        except PermissionError as refused:
            print(refused)
    """, ["socket", "socketpair"], kill=False, error=error))
    lines = out.split("\n")
    assert lines[:5] == ["[0, 10]", "[1, 2]"] * 2 + ["262144.0 262144.0"]
    assert "may not open a Unix socket" in lines[5] and "nbmp.zeros" in lines[5]


def test_a_pools_end_runs_its_workers_finalizers_and_their_sigterm_handlers(tmp_path):
    # The standard Pool's idle workers get their stop (a sentinel, or SIGTERM at a terminate):
    # a finalizer registered in the worker runs, or the SIGTERM handler its initializer set.
    def initializer(directory):
        import multiprocessing.util
        import signal

        def note(kind):
            open(os.path.join(directory, f"{kind}-{os.getpid()}"), "w").close()

        def on_sigterm(signum, frame):
            note("sigterm")
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_sigterm)
        multiprocessing.util.Finalize(None, note, args=("finalizer",), exitpriority=10)

    for method in nbmp.get_all_start_methods():
        directory = tmp_path / method
        directory.mkdir()
        with nbmp.get_context(method).Pool(2, initializer=initializer, initargs=(str(directory),)) as pool:
            pids = set(pool.map(lambda x: (time.sleep(0.05), os.getpid())[1], range(8), chunksize=1))
        wait_until(lambda: all(not os.path.exists(f"/proc/{pid}") for pid in pids), "the workers have exited")
        ended = {int(name.split("-")[1]) for name in os.listdir(directory)}
        assert ended == pids, f"{method}: of workers {pids} these ran a cleanup: {sorted(os.listdir(directory))}"


def test_a_workers_threads_keep_their_descriptors_until_it_exits(tmp_path):
    # A daemon thread of the worker's (a logger, a progress monitor, a prefetcher) writes on
    # until the worker's exit: nothing closes its file under it meanwhile.
    log, errors = tmp_path / "log", tmp_path / "errors"

    def fn(i):
        out = open(log, "a")

        def keep_writing():
            while True:
                try:
                    out.write("x")
                    out.flush()
                except OSError as e:
                    with open(errors, "a") as record:  # a closed descriptor: note it
                        record.write(f"{e.errno} ")
                    return
                time.sleep(0.002)
        threading.Thread(target=keep_writing, daemon=True).start()
        time.sleep(0.05)
        return i

    for method in ("fork", "spawn"):
        assert nbmp.spawn(fn, nprocs=2, start_method=method) == [0, 1]
        with nbmp.get_context(method).Pool(2) as pool:
            assert pool.map(fn, range(4), chunksize=1) == [0, 1, 2, 3]
    assert not errors.exists(), f"a worker's thread lost its file: errno {errors.read_text()}"


def test_a_programs_handler_of_a_real_time_signal_is_its_own_in_the_workers():
    # A program whose runtime uses a real-time signal (a GC's suspend signal, a profiler's
    # timer) and handles it: its workers inherit the handler, and the signal changes nothing.
    out = run_main("""
        import os, signal
        import nbmp
        if hasattr(signal, "SIGRTMIN"):
            seen = []
            for signum in range(signal.SIGRTMIN, signal.SIGRTMIN + 10):
                signal.signal(signum, lambda signum, frame: seen.append(signum))
            def task(x):
                seen.clear()
                for signum in range(signal.SIGRTMIN, signal.SIGRTMIN + 10):
                    os.kill(os.getpid(), signum)
                return len(seen)
            with nbmp.Pool(2) as pool:
                print(pool.map(task, range(4), chunksize=1))
            print(nbmp.spawn(lambda i: task(i), nprocs=2))
        else:
            print([10] * 4); print([10] * 2)
    """)
    assert out.split("\n")[:2] == ["[10, 10, 10, 10]", "[10, 10]"], out
