"""Shared memory's lifetime: freed when the last process lets go, whatever kills whom, under both
strategies; no leak warnings; thousands of arrays in flight without running out of descriptors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main, wait_until
from nbmp._sharing import _janitor


def nbmp_names(pid: int) -> list:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"nbmp-{pid}-")]


def janitor_alive(root: int) -> bool:
    """Whether a janitor serving the tree of process ``root`` runs (its address holds the tree's
    secret, so it is found by its command line, which names the root)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if _janitor.__file__ in cmdline and cmdline[-1] == str(root):
            return True
    return False


def hold_then(q, how):
    held = q.get()  # a shared array and a moved copy: this process now holds both
    assert held[0][0] == 1 and held[1][0] == 2
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("worker failed while holding shared memory")


@pytest.mark.parametrize("how", ["sigkill", "exception"])
def test_worker_dying_while_holding_shared_memory_frees_it(ctx, strategy, how):
    a = nbmp.zeros(1 << 20, dtype="uint8")
    a[0] = 1
    moved = np.full(1 << 20, 2, dtype="uint8")
    q = ctx.Queue()
    p = ctx.Process(target=hold_then, args=(q, how))
    p.start()
    q.put((a, moved))
    p.join(TIMEOUT)
    assert p.exitcode == (-signal.SIGKILL if how == "sigkill" else 1)
    wait_until(lambda: nbmp.shm_usage().segments == 1, "the dead worker's holds are released")
    del a
    wait_until(lambda: nbmp.shm_usage().segments == 0, "the last holder let go")
    assert not nbmp_names(os.getpid())


def killed_while_creating() -> None:
    from nbmp._sharing import _space
    nbmp.set_sharing_strategy("file_system")
    _space.reserve = lambda *args: os.kill(os.getpid(), signal.SIGKILL)  # after the file exists
    nbmp.zeros(1 << 20, dtype="uint8")


def test_a_process_killed_between_creating_a_file_and_announcing_it_leaves_nothing():
    # Found by the parent-kill trials (file_system): a process killed after creating a
    # segment's file but before telling the janitor left an empty file in /dev/shm for good.
    nbmp.zeros(1, dtype="uint8")  # the tree's janitor runs (the child's is then ours)
    p = nbmp.get_context("fork").Process(target=killed_while_creating)
    p.start()
    p.join(TIMEOUT)
    assert p.exitcode == -signal.SIGKILL
    wait_until(lambda: not nbmp_names(p.pid), "the dead process's half-made file is unlinked", timeout=10)


def first_elements(i, shared, moved):
    return int(shared[0]), int(moved[0])


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_checking_that_spawn_args_pickle_holds_no_memory(method):
    # spawn checks that fn and args pickle before any process starts: that check must
    # not leave a reference (or a moved copy) that no process will ever take.
    shared = nbmp.zeros(1 << 20, dtype="uint8")
    shared[0] = 1
    moved = np.full(1 << 20, 2, dtype="uint8")
    assert nbmp.spawn(first_elements, args=(shared, moved), nprocs=2, start_method=method) == [(1, 2)] * 2
    del shared
    wait_until(lambda: nbmp.shm_usage().segments == 0 and nbmp.shm_usage().in_flight == 0,
               "every segment and ticket is released")


# Pipes only: the stdlib's Queue semaphores would be named (and left by a SIGKILL) under spawn.
PARENT_KILLED = """
    import os, signal, sys, time
    import numpy as np
    import nbmp

    def hold(conn):
        kept = conn.recv()
        print("worker", os.getpid(), flush=True)
        conn.send("ready")
        nbmp.parent_process().join()        # outlive the parent a little, holding the memory

    if __name__ == "__main__":
        print("root", os.getpid(), flush=True)
        nbmp.set_sharing_strategy({strategy!r})
        ctx = nbmp.get_context({method!r})
        a = nbmp.zeros(1 << 22, dtype="float32")
        mine, theirs = ctx.Pipe()
        unread, _ = ctx.Pipe()
        p = ctx.Process(target=hold, args=(theirs,), daemon=True)
        p.start()
        mine.send((a, np.ones(1 << 20, dtype="float64")))
        unread.send(np.ones(1 << 20, dtype="float64"))   # a moved copy nobody will ever read
        assert mine.recv() == "ready"
        print("usage", nbmp.shm_usage().segments, flush=True)
        {ending}
"""

ENDINGS = {
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "exception": "raise RuntimeError('the notebook cell failed')",
    "success": "print('done')",
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("method", nbmp.get_all_start_methods())
def test_nothing_is_left_after_the_parent_ends(strategy, method, ending):
    source = PARENT_KILLED.format(strategy=strategy, method=method, ending=ENDINGS[ending])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                          timeout=TIMEOUT * 2)
    lines = proc.stdout.splitlines()
    root, worker = (int(next(line.split()[1] for line in lines if line.startswith(word))) for word in ("root", "worker"))
    assert "usage 3" in lines, proc.stdout + proc.stderr
    expected = {"sigkill": -signal.SIGKILL, "exception": 1, "success": 0}[ending]
    assert proc.returncode == expected, proc.stderr
    # (the stdlib's own Queue semaphores may be reported by its tracker after a SIGKILL: not ours)
    assert "shared_memory" not in proc.stderr and "nbmp" not in proc.stderr, proc.stderr
    wait_until(lambda: not janitor_alive(root), "the janitor exits with its root")
    wait_until(lambda: not nbmp_names(root) and not nbmp_names(worker), "/dev/shm is clean")
    wait_until(lambda: not os.path.exists(f"/proc/{worker}"), "the orphaned worker exits")


def test_thousands_of_arrays_in_flight_need_no_descriptors():
    out = run_main("""
        import resource
        import numpy as np
        import nbmp

        def consume(q, out):
            kept = [q.get() for _ in range(3000)]          # 3000 moved arrays, all mapped at once
            shared = q.get()                               # and 3000 shared ones in one message
            for s in shared:
                s[0] = 5
            out.put((sum(float(k[0]) for k in kept), len(shared)))

        if __name__ == "__main__":
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
            nbmp.set_sharing_threshold(0)                  # every array goes through shared memory
            ctx = nbmp.get_context("spawn")
            q, out = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=consume, args=(q, out))
            p.start()
            keep = [nbmp.zeros(16) for _ in range(3000)]
            for i in range(3000):
                q.put(np.full(512, i, dtype="float64"))
            q.put(keep)
            print(out.get(timeout=120), all(k[0] == 5 for k in keep))
            p.join()
            print(len(__import__("os").listdir("/proc/self/fd")) < 64)
    """, timeout=240)
    assert out.split("\n")[:2] == [f"({float(sum(range(3000)))}, 3000) True", "True"]


def test_no_leak_warning_with_a_spawned_pool_under_file_system():
    proc = subprocess.run([sys.executable, "-W", "always", "-c", textwrap.dedent("""
        import numpy as np, nbmp
        if __name__ == "__main__":
            nbmp.set_sharing_strategy("file_system")
            a = nbmp.zeros((4, 1 << 18))
            with nbmp.get_context("spawn").Pool(2) as pool:
                out = pool.map(lambda r: r * 0 + np.ones(1 << 18), [a[i] for i in range(4)])
            print(sum(float(o.sum()) for o in out))
    """)], capture_output=True, text=True, timeout=TIMEOUT * 2)
    assert proc.returncode == 0 and proc.stdout.strip() == str(float(4 << 18)), proc.stderr
    assert proc.stderr == ""


def test_a_pool_thread_letting_go_of_its_queues_as_the_interpreter_exits_leaves_no_warning():
    # A terminate's helper thread is the last to hold a spawned Pool's queues when it ends
    # after the script's last line (seen under CI load). Their locks are named semaphores:
    # the thread removes each name, then tells the resource tracker. Made certain here by
    # slowing both steps; a thread the exit stopped between them left the tracker warning
    # "1 leaked semaphore" about a name it could not find.
    proc = subprocess.run([sys.executable, "-W", "always", "-c", textwrap.dedent("""
        import threading, time, nbmp
        import nbmp._pool.pool as pool_module
        from multiprocessing import resource_tracker
        unregister, drain = resource_tracker.unregister, pool_module.drain
        def slow_unregister(name, rtype):
            if threading.current_thread() is not threading.main_thread():
                time.sleep(0.2)
            unregister(name, rtype)
        def slow_drain(*args):
            time.sleep(0.3)
            return drain(*args)
        resource_tracker.unregister, pool_module.drain = slow_unregister, slow_drain
        if __name__ == "__main__":
            with nbmp.get_context("spawn").Pool(2) as pool:
                print(pool.map(abs, [-1, -2]))
            time.sleep(0.35)  # the helper thread lets go of the queues while the script ends
    """)], capture_output=True, text=True, timeout=TIMEOUT * 2)
    assert proc.returncode == 0 and proc.stdout.strip() == "[1, 2]", proc.stderr
    assert proc.stderr == ""
