"""Fork safety (API.md section 5): handlers and their order, per-worker seeds, thread caps,
torch after fork, CUDA/JAX stand-ins, nbmp's own threads quiesced, doctor()."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import nbmp
from nbmp._forking import Launch
from conftest import TIMEOUT
from helpers import forking_beside_the_watchdog, run_main

# torch is checked in fresh interpreters (importing it in every spawned test worker is slow).
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch")


@pytest.fixture(autouse=True)
def default_settings(monkeypatch):
    # Workers keep a thread variable smaller than their budget, and the suite's process may hold
    # some another library set (a Dask LocalCluster sets three of them to 1 in its client's).
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                 "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    yield
    nbmp.seed(None)
    nbmp.set_worker_threads(None)


def run_workers(ctx, target, n, *, ranked=True):
    """Start ``n`` processes of ``ctx`` running ``target(q, k)``; return their puts ordered by k."""
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(q, k)) for k in range(n)]
    for k, p in enumerate(procs):
        if ranked:  # what spawn() and Pool set (tests/interfaces)
            p.launch = Launch(index=k, nprocs=n)
        p.start()
    out = dict(q.get(timeout=TIMEOUT) for _ in procs)
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    q.close()
    q.join_thread()
    return [out[k] for k in range(n)]


# -- the garbage collector --------------------------------------------------------


def collection_faults(i):
    """A worker's full collection: the pages it faulted, and how many objects are frozen."""
    import gc
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    gc.collect()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, gc.get_freeze_count()


def test_a_forked_workers_collections_leave_the_parents_objects_alone():
    held = [[i] for i in range(300_000)]  # ~4,700 pages of containers that a worker inherits
    (faults, frozen), = nbmp.spawn(collection_faults, nprocs=1, start_method="fork")
    assert frozen >= len(held)
    assert faults < 1500, f"a collection in the worker faulted {faults} pages: it examined the parent's objects"
    with nbmp.Pool(1) as pool:
        faults, frozen = pool.apply(collection_faults, (0,))
    assert frozen >= len(held) and faults < 1500
    import multiprocessing
    with forking_beside_the_watchdog(), multiprocessing.get_context("fork").Pool(1) as pool:  # a plain fork: left as without nbmp
        faults, frozen = pool.apply(collection_faults, (0,))
    assert frozen == 0 and faults > 3000
    assert held[-1] == [299_999]


def test_a_fork_servers_workers_collections_leave_the_servers_objects_alone():
    # The server preloaded nbmp and the frameworks imported here (numpy's objects alone are
    # tens of thousands); its workers inherit them as a forked worker inherits its parent's.
    (faults, frozen), = nbmp.spawn(collection_faults, nprocs=1, start_method="forkserver")
    assert frozen > 10_000, f"only {frozen} objects frozen in the fork server's worker"
    assert faults < 500, f"a collection in the worker faulted {faults} pages: it examined the server's objects"
    (_, frozen), = nbmp.spawn(collection_faults, nprocs=1, start_method="spawn")
    assert frozen == 0  # a fresh interpreter inherits nothing: its objects are collected as usual


def test_a_workers_collection_runs_no_finalizer_of_the_parents_garbage(tmp_path):
    import gc
    marker = tmp_path / "finalized"

    class Cyclic:
        def __init__(self):
            self.me = self

        def __del__(self):
            marker.write_text(str(os.getpid()))

    gc.disable()
    try:
        Cyclic()  # garbage in a cycle: the parent's next collection finalizes it
        finalized_in_worker = nbmp.spawn(lambda i: (gc.collect(), marker.exists())[1], nprocs=1, start_method="fork")
    finally:
        gc.enable()
    assert finalized_in_worker == [False]  # unfrozen, the worker's collection ran __del__ there
    gc.collect()
    assert marker.read_text() == str(os.getpid())  # once, in the process that made it


def test_a_collection_due_as_nbmp_forks_runs_in_the_parent_not_in_the_worker():
    # A library's at-fork hook allocates in the child: a collection nearly due at the fork would
    # come there, before the worker's freeze, and finalize the parent's garbage in the worker.
    out = run_main("""
        import gc, os
        import nbmp

        class Cyclic:
            def __init__(self):
                self.me = self

            def __del__(self):
                print("finalized in the", "parent" if os.getpid() == parent else "worker", flush=True)

        parent, held = os.getpid(), []
        os.register_at_fork(after_in_child=lambda: held.extend([] for _ in range(300)))

        def nearly_due():
            gc.set_threshold(100_000)
            held.extend([] for _ in range(1000))
            Cyclic()
            gc.set_threshold(gc.get_count()[0] + 30)  # the parent's own steps up to the fork stay under it

        nbmp.register_fork_handler(before=nearly_due)
        print(nbmp.spawn(lambda i: i, nprocs=1))
    """)
    assert out.splitlines() == ["finalized in the parent", "[0]"], out


def test_a_handler_can_give_a_worker_back_its_inherited_objects():
    import gc
    held = [[i] for i in range(300_000)]
    with nbmp.register_fork_handler(after_in_child=gc.unfreeze):
        (faults, frozen), = nbmp.spawn(collection_faults, nprocs=1, start_method="fork")
    assert frozen == 0
    assert faults > 3000  # the collection examined (and so copied) every page of `held`
    assert held[-1] == [299_999]


# -- seeds ------------------------------------------------------------------------


def draw(q, k):
    q.put((k, [random.random(), float(np.random.rand())]))


def test_draws_are_distinct_and_reproducible_after_seed(ctx):
    nbmp.seed(1234)
    first = run_workers(ctx, draw, 3)
    nbmp.seed(1234)
    again = run_workers(ctx, draw, 3)
    nbmp.seed(99)
    other = run_workers(ctx, draw, 3)
    assert first == again
    assert other != first
    for column in zip(*first):  # each generator: no two workers draw the same number
        assert len(set(column)) == 3


def test_draws_are_distinct_without_a_seed(ctx):
    rows = run_workers(ctx, draw, 3, ranked=False)
    for column in zip(*rows):
        assert len(set(column)) == 3


def test_unranked_processes_are_reproducible_by_start_order(ctx):
    nbmp.seed(5)
    first = run_workers(ctx, draw, 2, ranked=False)
    nbmp.seed(5)
    assert run_workers(ctx, draw, 2, ranked=False) == first


LAZY_NUMPY_RANDOM = """
import sys, numpy, nbmp                      # NumPy 2 imports numpy.random lazily: not here
assert "numpy.random" not in sys.modules
def untouched(i):
    return "numpy.random" in sys.modules     # nbmp must not import it in every worker
def draw(i):
    import numpy.random
    return int(numpy.random.randint(2**31))
print(nbmp.spawn(untouched, nprocs=2))
nbmp.seed(7); first = nbmp.spawn(draw, nprocs=3)
nbmp.seed(7); again = nbmp.spawn(draw, nprocs=3)
print(first == again, len(set(first)))
"""


def test_numpy_random_first_imported_in_a_worker_is_seeded_there():
    assert run_main(LAZY_NUMPY_RANDOM).split("\n")[:2] == ["[False, False]", "True 3"]


TORCH_FIRST_IMPORTED_IN_A_WORKER = """
import nbmp

def imports_torch(i):
    import torch  # which imports numpy part-way through its own import: numpy's hook runs inside it
    return torch.get_num_threads() >= 1

if __name__ == "__main__":
    print(nbmp.spawn(imports_torch, nprocs=1, start_method="spawn"))
"""


def test_torch_first_imported_in_a_spawned_worker_trips_no_fork_handler():
    pytest.importorskip("torch")
    pytest.importorskip("threadpoolctl")
    script = subprocess.run([sys.executable, "-c", TORCH_FIRST_IMPORTED_IN_A_WORKER], capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert (script.stdout, script.returncode) == ("[True]\n", 0), script.stderr
    assert "Exception ignored" not in script.stderr, script.stderr


def test_seed_rejects_non_integers():
    with pytest.raises(TypeError, match="nbmp.seed"):
        nbmp.seed(1.5)


# -- thread caps --------------------------------------------------------------------


def report_threads(q, k):
    from threadpoolctl import threadpool_info
    pools = {info["internal_api"]: info["num_threads"] for info in threadpool_info()}
    pools["env"] = int(os.environ["OMP_NUM_THREADS"])
    q.put((k, pools))


def test_workers_times_threads_fit_the_cores(ctx, start_method):
    pytest.importorskip("threadpoolctl")
    cores = len(os.sched_getaffinity(0))
    for pools in run_workers(ctx, report_threads, 2):
        if start_method != "spawn":  # OpenBLAS's pool, stopped by the fork, is not started to be capped
            pools.pop("openblas", None)
        assert pools and all(2 * n <= max(cores, 2) for n in pools.values()), pools
        assert pools["env"] == max(1, cores // 2)


def test_a_forked_worker_starts_no_blas_thread_unless_the_budget_is_explicit():
    # Setting OpenBLAS's count in a forked child starts the pool the fork stopped, and each of its
    # threads busy-waits for work: a worker that never calls BLAS would pay for it.
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_info
    if max((p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"), default=1) < 2:
        pytest.skip("needs an OpenBLAS pool of 2 or more threads")
    threads = lambda i: len(os.listdir("/proc/self/task"))  # noqa: E731
    assert nbmp.spawn(threads, nprocs=2, start_method="fork") == [1, 1]
    nbmp.set_worker_threads(1)  # asked for: capped, at the price of the restarted pool
    openblas = lambda i: [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]  # noqa: E731
    assert nbmp.spawn(openblas, nprocs=1, start_method="fork") == [[1]]


def _product_then_openblas(i):
    """In a worker: a matrix product (which starts OpenBLAS's pool), then the pool's count."""
    from threadpoolctl import threadpool_info
    a = np.ones((400, 400))
    a @ a
    return os.getpid(), [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]


def test_a_pool_worker_caps_openblas_once_a_task_has_started_it():
    # Capping a running pool starts nothing: from its next task on, a worker that multiplies
    # matrices stays within the budget, and one that never does keeps a single thread.
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import threadpool_info
    inherited = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
    if max(inherited, default=1) < 2:
        pytest.skip("needs an OpenBLAS pool of 2 or more threads")
    budget = max(1, len(os.sched_getaffinity(0)) // 2)
    with nbmp.get_context("fork").Pool(2) as pool:
        assert pool.map(lambda i: len(os.listdir("/proc/self/task")), range(8), chunksize=1) == [1] * 8
    with nbmp.get_context("fork").Pool(2) as pool:
        seen = pool.map(_product_then_openblas, range(8), chunksize=1)
    first = {}
    for pid, counts in seen:  # a worker takes its tasks in order: its first result comes first
        assert counts == (inherited if first.setdefault(pid, counts) is counts else [min(budget, inherited[0])]), seen


# With GNU OpenMP loaded (torch is), forked workers get 1 OpenMP thread whatever the setting, and say so.
@pytest.mark.filterwarnings("ignore:worker threads are set to:nbmp.ForkSafetyWarning")
def test_worker_threads_setting_is_seen_inside_workers(ctx):
    pytest.importorskip("threadpoolctl")
    nbmp.set_worker_threads(2)
    for pools in run_workers(ctx, report_threads, 2):
        assert pools["openblas"] == 2 and pools["env"] == 2


# With GNU OpenMP loaded (torch is), forked workers get 1 OpenMP thread whatever the setting, and say so.
@pytest.mark.filterwarnings("ignore:worker threads are set to:nbmp.ForkSafetyWarning")
def test_worker_threads_from_the_environment(ctx, monkeypatch):
    monkeypatch.setenv("NBMP_WORKER_THREADS", "3")
    assert [p["env"] for p in run_workers(ctx, report_threads, 1)] == [3]


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def test_forked_workers_get_the_thread_variables_and_the_parent_keeps_its_own(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    seen = nbmp.spawn(lambda i: [os.environ.get(name) for name in THREAD_VARIABLES], nprocs=2, start_method="fork")
    budget = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert seen == [[budget] * 3] * 2
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ
    assert "OPENBLAS_NUM_THREADS" not in os.environ


WITHOUT_THREADPOOLCTL = """
import sys
sys.modules["threadpoolctl"] = None  # as if the nbmp[fork-safety] extra were not installed
import os, numpy, nbmp
nbmp.set_worker_threads(1)
print(nbmp.spawn(lambda i: os.environ["OPENBLAS_NUM_THREADS"], nprocs=2, start_method="fork", output="inherit"),
      "threadpoolctl is not installed" in str(nbmp.doctor()))
"""


def test_without_threadpoolctl_workers_get_the_variables_and_doctor_says_so():
    assert run_main(WITHOUT_THREADPOOLCTL).strip() == "['1', '1'] True"


SMALLER_THAN_THE_BUDGET = """
import os
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"  # the user's own, before numpy loads
import numpy, nbmp
from threadpoolctl import threadpool_info
nbmp.set_worker_threads(None)
print(nbmp.spawn(lambda i: ({p["internal_api"]: p["num_threads"] for p in threadpool_info()},
                            os.environ["OPENBLAS_NUM_THREADS"], os.environ["OMP_NUM_THREADS"]), nprocs=1))
"""


def test_a_smaller_thread_count_the_user_set_is_kept_in_workers():
    # The budget caps; it does not raise a pool the user kept small (which also restarted
    # OpenBLAS's threads in every worker for nothing).
    pytest.importorskip("threadpoolctl")
    assert run_main(SMALLER_THAN_THE_BUDGET).strip() == "[({'openblas': 1}, '1', '1')]"


ENVIRONMENT_KEPT = """
import os
os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
import numpy, nbmp
seen = lambda i: os.environ.get("KMP_DUPLICATE_LIB_OK")
with nbmp.Pool(2) as pool:
    workers = pool.map(seen, range(2))
workers += nbmp.spawn(seen, nprocs=1, start_method="spawn")
str(nbmp.doctor())
print(workers, seen(0))
"""


def test_looking_at_the_thread_pools_leaves_the_environment_as_it_was():
    # threadpoolctl's import sets KMP_DUPLICATE_LIB_OK, which every later program would inherit.
    pytest.importorskip("threadpoolctl")
    assert run_main(ENVIRONMENT_KEPT).strip() == "[None, None, None] None"


def _threads_then_nested_run(i):
    """In a worker: its thread variables and BLAS pools before and after a run of its own,
    started while another of its threads is alive."""
    from threadpoolctl import threadpool_info

    def state():
        return [os.environ.get(name) for name in THREAD_VARIABLES], \
            sorted((p["filepath"], p["num_threads"]) for p in threadpool_info())

    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait, daemon=True)
    waiter.start()
    before = state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nbmp.ForkSafetyWarning)  # the waiting thread is a user thread
        inner = nbmp.spawn(lambda j: os.environ.get("OMP_NUM_THREADS"), nprocs=1, start_method="fork")
    stop.set()
    waiter.join(TIMEOUT)
    return before, state(), inner


def test_a_worker_running_workers_of_its_own_keeps_its_thread_limits(monkeypatch):
    # A worker's own run leaves it the limits it was given.
    pytest.importorskip("threadpoolctl")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    (before, after, inner), = nbmp.spawn(_threads_then_nested_run, nprocs=1, start_method="fork")
    assert before[0] == [str(max(1, len(os.sched_getaffinity(0))))] * 3
    assert after == before
    assert inner == [before[0][0]]
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_a_run_leaves_the_parents_import_hooks_as_they_were():
    import sys
    from nbmp._forking import on_import
    hooks_before, path_before = dict(on_import._watcher.pending), list(sys.meta_path)
    assert nbmp.spawn(lambda i: i, nprocs=2, start_method="fork") == [0, 1]
    assert dict(on_import._watcher.pending) == hooks_before and sys.meta_path == path_before


def test_set_worker_threads_rejects_bad_values():
    # The rule for every argument check: a wrong type is a TypeError, a wrong value a ValueError.
    for bad, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)):
        expected = r"set_worker_threads\(n\) must be a positive int or None, not " + re.escape(repr(bad))
        with pytest.raises(error, match=expected):
            nbmp.set_worker_threads(bad)


TORCH_IN_WORKERS = """
import nbmp
from nbmp._forking import Launch
def work(q, k):
    import torch                       # imported late: nbmp resets it the moment it appears
    q.put((k, (float(torch.rand(1)), torch.get_num_threads())))
def run(threads):
    nbmp.seed(7)
    nbmp.set_worker_threads(threads)
    ctx = nbmp.get_context({method!r})
    q = ctx.Queue()
    ps = [ctx.Process(target=work, args=(q, k)) for k in range(2)]
    for k, p in enumerate(ps):
        p.launch = Launch(index=k, nprocs=2)
        p.start()
    out = dict(q.get(timeout=60) for _ in ps)
    for p in ps: p.join(60)
    return [out[0], out[1]]
first, again, two = run(None), run(None), run(2)
print(first == again, first[0][0] != first[1][0], [t for _, t in first], [t for _, t in two])
"""


@needs_torch
def test_torch_generator_and_threads_in_workers(start_method):
    out = run_main(TORCH_IN_WORKERS.format(method=start_method), timeout=100).strip()
    cores = len(os.sched_getaffinity(0))
    auto = max(1, cores // 2)
    # The default generator: reproducible and distinct. Intra-op threads: cores // workers, or the setting.
    assert out == f"True True [{auto}, {auto}] [2, 2]"


TORCH_POOLS_GIVEN_BACK = """
import os
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "2"  # whatever the suite's process set
import nbmp, numpy, torch
from threadpoolctl import threadpool_info
torch.set_num_threads(2)
(torch.randn(300, 300) @ torch.randn(300, 300)).sum()  # OpenMP (libgomp) has run a team
def sizes():
    return {p["filepath"]: p["num_threads"] for p in threadpool_info()}
before = sizes()
found = nbmp.spawn(lambda i: (sorted(sizes().values()), torch.get_num_threads()), nprocs=2, output="inherit")
print(sorted(before.values()), found, sizes() == before, torch.get_num_threads())
"""


@needs_torch
def test_the_parent_gets_its_openmp_and_torch_thread_counts_back():
    # Each worker caps its own OpenMP and torch threads (OpenBLAS's, stopped by the fork, stays
    # unstarted); the parent's stay as they were.
    pytest.importorskip("threadpoolctl")
    out = run_main(TORCH_POOLS_GIVEN_BACK, timeout=100).strip()
    assert out == "[2, 2] [([1, 2], 1), ([1, 2], 1)] True 2", out


# -- the torch case: fork after compute ---------------------------------------------

TORCH_AFTER_COMPUTE = """
import nbmp, torch
torch.set_num_threads(2)
a = torch.randn(600, 600)
(a @ a).sum()                      # the parent's OpenMP team is now running
ctx = nbmp.get_context({method!r})
q = ctx.Queue()
def child(q):
    b = torch.randn(600, 600)
    q.put(torch.get_num_threads())  # the matmul hangs forever with plain multiprocessing under fork
    q.put(float((b @ b).sum()))
for threads in (None, 2):           # by default, and even when 2 threads per worker are asked for
    nbmp.set_worker_threads(threads)
    ps = [ctx.Process(target=child, args=(q,)) for _ in range(2)]
    for p in ps: p.start()
    out = [q.get(timeout=60) for _ in range(4)]
    for p in ps: p.join(60)
    print(sorted(out[i] for i in range(4) if isinstance(out[i], int)), [p.exitcode for p in ps])
"""


@needs_torch
def test_torch_matmul_after_a_parallel_matmul_in_the_parent_finishes(start_method):
    out = run_main(TORCH_AFTER_COMPUTE.format(method=start_method), timeout=100)
    # Under fork GNU OpenMP allows a forked child one thread only; fresh interpreters get 2.
    asked = 1 if start_method == "fork" else 2
    assert out.split("\n")[:2] == ["[1, 1] [0, 0]", f"[{asked}, {asked}] [0, 0]"]


# -- stress: many forks while the parent is busy --------------------------------------

STRESS = """
import faulthandler, logging, os, queue, signal, sys, threading, time, warnings, numpy as np, nbmp
warnings.simplefilter("always")
logging.basicConfig(level=logging.INFO, filename="/dev/null")
log = logging.getLogger("churn")
try:
    import torch
    torch.set_num_threads(2)
    t = torch.randn(300, 300); (t @ t).sum()
except ImportError:
    torch = None
m = np.random.rand(300, 300); m @ m                 # OpenBLAS pool started
lock, stop = threading.Lock(), threading.Event()
def churn():
    while not stop.is_set():
        with lock:
            log.info("churning %s", 1)
threading.Thread(target=churn, name="churner", daemon=True).start()
q = nbmp.Queue()
faulthandler.register(signal.SIGUSR1, all_threads=True)   # inherited: a hung child can show its stacks
def hung(p, k, where):
    print(f"fork {k}: the child (pid {p.pid}) hung {where}; its threads:", file=sys.stderr, flush=True)
    os.kill(p.pid, signal.SIGUSR1); time.sleep(1)
    print("the parent's threads:", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os.kill(p.pid, signal.SIGKILL)
    os._exit(3)
def child(q, k):
    logging.getLogger("churn").info("child %d", k)
    x = np.random.rand(100, 100); x @ x
    if torch is not None:
        y = torch.randn(100, 100); (y @ y).sum()
    q.put(lambda: k)                                  # nbmp pickling, and a feeder thread
with warnings.catch_warnings(record=True) as caught:
    for k in range(200):
        p = nbmp.get_context("fork").Process(target=child, args=(q, k))
        p.start()
        try:
            assert q.get(timeout=20)() == k
        except queue.Empty:
            hung(p, k, "before putting its result")
        p.join(20)
        if p.exitcode is None:
            hung(p, k, "at exit")
        assert p.exitcode == 0, (k, p.exitcode)
stop.set()
print(sorted({w.category.__name__ for w in caught}), sum("churner" in str(w.message) for w in caught))
"""


def test_two_hundred_forks_while_a_thread_churns_locks_and_logging():
    out = run_main(STRESS, timeout=90)  # under pytest's faulthandler_timeout: a hang shows its own report
    # Zero hangs, no generic DeprecationWarning, one warning naming the real hazard.
    assert out.strip() == "['ForkSafetyWarning'] 1"


def _cpu_seconds():
    usage = __import__("resource").getrusage(__import__("resource").RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_round_of_forks_leaves_the_parents_blas_pool_alone():
    # Workers cap their pools themselves: a thread of the parent, watching its BLAS pools while
    # spawn and Pool rounds fork, never sees their counts change, and no pool spins after.
    pytest.importorskip("threadpoolctl")
    from threadpoolctl import ThreadpoolController
    blas = ThreadpoolController().select(user_api="blas")
    counts = tuple(info["num_threads"] for info in blas.info())
    if max(counts, default=1) < 2:
        pytest.skip("needs a BLAS pool of 2 or more threads (the workers get 1)")
    nbmp.set_worker_threads(1)
    seen, stop = set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(tuple(info["num_threads"] for info in blas.info()))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nbmp.ForkSafetyWarning)  # the watcher is a user thread
            for _ in range(5):
                assert nbmp.spawn(lambda i: i, nprocs=2, start_method="fork") == [0, 1]
                with nbmp.get_context("fork").Pool(2) as pool:
                    assert pool.map(abs, range(4)) == [0, 1, 2, 3]
    finally:
        stop.set()
        watcher.join(TIMEOUT)
    assert seen == {counts}
    start = _cpu_seconds()
    time.sleep(0.3)
    assert _cpu_seconds() - start < 0.05, "a BLAS pool is spinning in the parent"


# -- handlers ---------------------------------------------------------------------------

calls: list = []


def report_calls(q, k):
    q.put((k, list(calls)))


def test_handlers_run_in_os_register_at_fork_order(ctx, start_method):
    calls.clear()
    handles = [nbmp.register_fork_handler(before=lambda i=i: calls.append(f"before{i}"),
                                          after_in_parent=lambda i=i: calls.append(f"parent{i}"),
                                          after_in_child=lambda i=i: calls.append(f"child{i}"))
               for i in (1, 2, 3)]
    try:
        in_child = run_workers(ctx, report_calls, 1)[0]
    finally:
        for handle in handles:
            handle.remove()
    if start_method == "fork":
        assert calls == ["before3", "before2", "before1", "parent1", "parent2", "parent3"]
        assert in_child == ["before3", "before2", "before1", "child1", "child2", "child3"]
    else:  # no fork of this process: nothing to run (as with os.register_at_fork)
        assert calls == [] and in_child == []


def _calls_then_nested(i):
    seen = list(calls)
    nbmp.spawn(_square, nprocs=2, start_method="fork", output="inherit")  # this worker's own round
    return seen, list(calls)


def _square(i):
    return i * i


def test_a_round_of_forks_runs_the_handlers_once():
    # spawn and Pool fork their workers in one round: before once, after_in_parent once,
    # and each child's after_in_child once; a worker's own forks run its handlers again.
    calls.clear()
    with nbmp.register_fork_handler(before=lambda: calls.append("before"),
                                    after_in_parent=lambda: calls.append("parent"),
                                    after_in_child=lambda: calls.append("child")):
        found = nbmp.spawn(_calls_then_nested, nprocs=3, start_method="fork", output="inherit")
        assert calls == ["before", "parent"]
        calls.clear()
        with nbmp.get_context("fork").Pool(3) as pool:
            assert pool.map(_square, range(6)) == [0, 1, 4, 9, 16, 25]
        assert calls == ["before", "parent"]
    for seen, after_nested in found:
        assert seen == ["before", "child"]
        assert after_nested == ["before", "child", "before", "parent"]


def test_plain_multiprocessing_does_not_run_nbmp_handlers():
    import multiprocessing
    calls.clear()
    with nbmp.register_fork_handler(before=lambda: calls.append("before")):
        p = multiprocessing.get_context("fork").Process(target=int)
        with forking_beside_the_watchdog():
            p.start()
        p.join(TIMEOUT)
    assert calls == []


def test_a_failing_handler_is_reported_and_the_fork_goes_on(capfd):
    def boom():
        raise RuntimeError("handler bug")
    with nbmp.register_fork_handler(before=boom):
        p = nbmp.get_context("fork").Process(target=int)
        p.start()
        p.join(TIMEOUT)
    assert p.exitcode == 0
    assert "handler bug" in capfd.readouterr().err


def test_register_fork_handler_rejects_bad_input():
    with pytest.raises(TypeError, match="after_in_child"):
        nbmp.register_fork_handler(after_in_child="not callable")
    with pytest.raises(TypeError, match="at least one"):
        nbmp.register_fork_handler()


def test_an_error_filter_fails_every_fork_the_hazard_is_there_for():
    stop = threading.Event()
    holder = threading.Thread(target=stop.wait, name="hazard-holder")
    holder.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", nbmp.ForkSafetyWarning)
            for _ in range(2):
                with pytest.raises(nbmp.ForkSafetyWarning, match="hazard-holder"):
                    nbmp.spawn(lambda i: i, nprocs=1)
        with pytest.warns(nbmp.ForkSafetyWarning, match="hazard-holder"):  # never shown yet: shown now
            assert nbmp.spawn(lambda i: i, nprocs=1) == [0]
    finally:
        stop.set()
        holder.join(TIMEOUT)


# -- nbmp's own threads -------------------------------------------------------------------


def test_a_running_spawn_is_no_hazard_to_the_next_one():
    # The first run's supervising thread is nbmp's own: not a "user thread" to warn about.
    first = nbmp.spawn(lambda i: time.sleep(0.5), nprocs=1, join=False)
    try:
        assert [t.name for t in threading.enumerate() if t.name.startswith("nbmp-spawn-")]
        with warnings.catch_warnings():
            warnings.simplefilter("error", nbmp.ForkSafetyWarning)
            assert nbmp.spawn(lambda i: i, nprocs=2) == [0, 1]
    finally:
        assert first.join(TIMEOUT)


@pytest.mark.filterwarnings("ignore::nbmp.ForkSafetyWarning")  # the stand-in thread lives in this test module
def test_nbmp_threads_are_at_a_safe_point_at_every_fork():
    lock = nbmp._forking.ForkLock("test worker")
    state = {"mid_update": False, "stop": False}

    def busy():  # an nbmp background thread: work inside its ForkLock, never blocking there
        while not state["stop"]:
            with lock:
                state["mid_update"] = True
                sum(range(200))
                state["mid_update"] = False

    thread = threading.Thread(target=busy)
    thread.start()
    q = nbmp.SimpleQueue()

    def child():
        with lock:  # a fresh lock: never inherited held
            q.put(state["mid_update"])

    try:
        for _ in range(20):
            p = nbmp.get_context("fork").Process(target=child)
            p.start()
            assert q.get() is False
            p.join(TIMEOUT)
    finally:
        state["stop"] = True
        thread.join(TIMEOUT)


def test_an_interrupt_cannot_leave_a_fork_lock_held(python_sigint):
    # Found by the fault campaign (shm-transfer, 1 trial in 300): an interrupt as a Queue.put's
    # ``with`` took the queue-pickling ForkLock -- after the lock's acquire, before the block --
    # left it held by the main thread, and a Pool's task thread then waited on it for good.
    # The interrupt here comes at the return of any ``acquire`` a Python __enter__ makes.
    import signal
    import sys
    lock = nbmp._forking.ForkLock("interrupted")
    fired = []

    def profile(frame, event, arg):
        if event == "c_return" and not fired and getattr(arg, "__name__", None) == "acquire":
            fired.append(True)
            signal.raise_signal(signal.SIGINT)

    sys.setprofile(profile)
    try:
        with lock:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    taken = []

    def take():
        taken.append(lock.acquire(timeout=2))
        if taken[0]:
            lock.release()

    other = threading.Thread(target=take)
    other.start()
    other.join(TIMEOUT)
    assert taken == [True], "the interrupted with-statement left the ForkLock held"


@pytest.mark.filterwarnings("ignore:forking while user threads:nbmp.ForkSafetyWarning")
def test_a_thread_stuck_in_its_fork_lock_is_reported_not_waited_for(monkeypatch):
    lock = nbmp._forking.ForkLock("stuck relay")
    monkeypatch.setattr(nbmp._forking.ForkLock, "HOLD_TIMEOUT", 0.2)
    release = threading.Event()
    holder = threading.Thread(target=lambda: (lock.__enter__(), release.wait(TIMEOUT), lock.__exit__(None, None, None)))  # 3.15's RLock.__exit__ takes its 3 arguments
    holder.start()
    time.sleep(0.1)
    try:
        with pytest.warns(nbmp.ForkSafetyWarning, match="stuck relay"):
            p = nbmp.get_context("fork").Process(target=int)
            p.start()
        p.join(TIMEOUT)
        assert p.exitcode == 0
    finally:
        release.set()
        holder.join(TIMEOUT)


# -- CUDA and JAX (stand-ins: no GPU, no JAX here) -------------------------------------------

CUDA_STAND_IN = """
import warnings, nbmp, torch
torch.cuda.is_initialized = lambda: True   # stand-in: this process "initialised CUDA"
torch.set_default_device("meta")           # stand-in for a CUDA default device
q = nbmp.Queue()
def child(q):
    q.put(torch.empty(1).device.type)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ps = [nbmp.Process(target=child, args=(q,)) for _ in range(2)]
    for p in ps: p.start()
    print(sorted(q.get(timeout=30) for _ in ps))
    for p in ps: p.join(30)
messages = [str(w.message) for w in caught if issubclass(w.category, nbmp.ForkSafetyWarning)]
print(len(messages), "start_method='spawn'" in messages[0], "CUDA" in messages[0])
"""


@needs_torch
def test_cuda_initialised_parent_gives_cpu_workers_and_one_warning():
    assert run_main(CUDA_STAND_IN).split("\n")[:2] == ["['cpu', 'cpu']", "1 True True"]


JAX_STAND_IN = """
import sys, types, warnings, nbmp
jax, bridge = types.ModuleType("jax"), types.ModuleType("jax._src.xla_bridge")
bridge._backends = {"cpu": object()}       # stand-in: JAX's backends are initialised
sys.modules.update({"jax": jax, "jax._src.xla_bridge": bridge})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        p = nbmp.Process(target=int); p.start(); p.join(30)
messages = [str(w.message) for w in caught if issubclass(w.category, nbmp.ForkSafetyWarning)]
print(len(messages), "JAX" in messages[0], "start_method='spawn'" in messages[0])
"""


def test_jax_initialised_parent_gets_one_warning_with_the_fix():
    assert run_main(JAX_STAND_IN).strip() == "1 True True"


# -- the 3.12+ DeprecationWarning -------------------------------------------------------------

THREADED_FORK = """
import multiprocessing, threading, warnings, numpy as np, nbmp
warnings.simplefilter("always")
m = np.random.rand(300, 300); m @ m          # BLAS threads: the process is multi-threaded
q = nbmp.Queue(); q.put(1); q.get()          # and a queue feeder thread
def fork_with(make):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = make(target=int); p.start(); p.join(30)
    return sorted(w.category.__name__ for w in caught)
print(fork_with(nbmp.get_context("fork").Process))
print(fork_with(multiprocessing.get_context("fork").Process))
stop = threading.Event()
threading.Thread(target=stop.wait, name="user-poller").start()
print(fork_with(nbmp.get_context("fork").Process), fork_with(nbmp.get_context("fork").Process))
stop.set()
"""


@pytest.mark.skipif(__import__("sys").version_info < (3, 12), reason="the fork DeprecationWarning is 3.12+")
def test_generic_fork_warning_is_replaced_by_one_for_real_hazards():
    nbmp_idle, stdlib, nbmp_user_thread = run_main(THREADED_FORK).strip().split("\n")
    assert nbmp_idle == "[]"                       # nbmp's and idle library threads: no noise
    assert stdlib == "['DeprecationWarning']"      # the standard module is untouched
    assert nbmp_user_thread == "['ForkSafetyWarning'] []"  # a live user thread: warned once


# -- doctor ---------------------------------------------------------------------------------


def test_doctor_reports_threads_pools_shm_and_versions():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="doctor-test-thread")
    thread.start()
    try:
        report = nbmp.doctor()
    finally:
        stop.set()
        thread.join(TIMEOUT)
    kinds = {t.name: t.kind for t in report.threads}
    assert kinds["doctor-test-thread"] == "user"
    assert any("doctor-test-thread" in h for h in report.hazards)
    assert report.start_method == nbmp.get_start_method()
    assert report.shm_total and report.shm_free is not None
    assert report.python.count(".") == 2 and report.cores >= 1
    assert report.cuda_initialized in (None, False)
    assert report.jax_initialized is None
    text = str(report)
    assert "doctor-test-thread" in text and "/dev/shm" in text and "hazard" in text
    if __import__("importlib").util.find_spec("threadpoolctl"):
        assert any(p["internal_api"] == "openblas" and p["num_threads"] >= 1 for p in report.threadpools)
        # A pool forked workers keep as it is says how to cap it.
        kept = any(p["internal_api"] == "openblas" and p["num_threads"] > 1 for p in report.threadpools)
        assert ("forked workers keep it unless nbmp.set_worker_threads(n)" in text) == kept
        nbmp.set_worker_threads(1)
        assert "forked workers keep it" not in str(nbmp.doctor())


def test_doctor_says_when_threadpoolctl_is_missing_and_what_that_costs():
    out = run_main("""
        import sys
        sys.modules["threadpoolctl"] = None      # as if not installed
        import numpy, nbmp
        report = nbmp.doctor()
        print(report.threadpoolctl)
        print(report)
    """)
    assert out.startswith("False\n")
    assert "threadpoolctl is not installed" in out and "oversubscribe" in out and "nbmp[fork-safety]" in out


def test_doctor_says_whether_python_is_a_free_threaded_build():
    import sys, sysconfig
    report = nbmp.doctor()
    assert report.free_threaded == bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert ("free-threaded" in str(report)) == report.free_threaded


@pytest.mark.parametrize("gil", [True, False], ids=["gil-enabled", "gil-disabled"])
def test_doctor_on_a_free_threaded_build_says_what_its_gil_does(monkeypatch, gil):
    import sys, sysconfig
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1 if name == "Py_GIL_DISABLED" else real(name))
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil, raising=False)
    report = nbmp.doctor()
    assert report.free_threaded and report.gil_enabled == gil
    assert f"free-threaded, GIL {'enabled' if gil else 'disabled'}" in str(report)


@pytest.mark.kernel
def test_notebook_user_sees_no_noise_from_the_kernels_threads_and_one_warning_for_theirs(kernel):
    cell = kernel.run("import nbmp, threading\n"
                      "report = nbmp.doctor()\n"
                      "p = nbmp.Process(target=print, args=('child ran',)); p.start(); p.join()\n"
                      "report.hazards, report.ipykernel is not None")
    cell.raise_for_error()
    assert cell.result == "([], True)" and "Warning" not in cell.stderr
    cell = kernel.run("stop = threading.Event()\n"
                      "threading.Thread(target=stop.wait, name='my-poller').start()\n"
                      "for _ in range(2):\n"
                      "    p = nbmp.Process(target=int); p.start(); p.join()\n"
                      "stop.set()")
    cell.raise_for_error()
    assert cell.stderr.count("ForkSafetyWarning") == 1 and "my-poller" in cell.stderr, cell.stderr


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_fork_safety_notebook_shows_its_results():
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    import run_notebook
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = "".join(run_notebook.cell_texts(run_notebook.execute(os.path.join(root, "notebooks", "fork_safety.ipynb"))))
    assert "distinct across workers: True" in text and "reproducible after nbmp.seed(1234): True" in text
    assert "spawn matches fork: True" in text
    if HAVE_TORCH:
        assert "exit codes [0, 0]" in text


def test_gnu_openmp_not_loaded_is_looked_for_again_only_after_an_import(monkeypatch):
    # Each round of forks asks whether libgomp is loaded; reading /proc/self/maps for a "no"
    # every time would cost a parent without torch at every round. A library comes with an import.
    import io
    import sys
    import types
    from nbmp._forking.handlers import thread_pools

    reads: list = []
    maps = ["7f00-7f01 r-xp 0 00:00 0 /usr/lib/libc.so.6\n"]

    def fake_open(path: str, *args: object, **kwargs: object) -> io.StringIO:
        reads.append(path)
        return io.StringIO(maps[0])

    monkeypatch.setattr(thread_pools, "_gomp_seen", False)
    monkeypatch.setattr(thread_pools, "_gomp_looked_at", -1)
    monkeypatch.setattr(thread_pools, "open", fake_open, raising=False)
    assert thread_pools.gnu_openmp_loaded() is False
    assert thread_pools.gnu_openmp_loaded() is False
    assert reads == ["/proc/self/maps"]
    maps[0] += "7f02-7f03 r-xp 0 00:00 0 /usr/lib/libgomp.so.1\n"
    monkeypatch.setitem(sys.modules, "nbmp_test_brings_libgomp", types.ModuleType("nbmp_test_brings_libgomp"))
    assert thread_pools.gnu_openmp_loaded() is True
    assert thread_pools.gnu_openmp_loaded() is True
    assert len(reads) == 2


@pytest.mark.parametrize("other_thread", [False, True])
def test_a_line_printed_just_before_a_fork_appears_once(other_thread):
    # Printed after the start's flush (by a fork handler here; another thread in a program): a
    # forked child that ends the standard way flushes its copy of the buffer, and the line
    # would appear twice, once from each process. Alone, the parent flushes again; with another
    # thread alive, the child drops its copy.
    out = run_main(f"""
        import io, sys, threading
        import nbmp
        if {other_thread}:
            threading.Thread(target=threading.Event().wait, args=(60,), daemon=True).start()
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))  # buffered, even under PYTHONUNBUFFERED
        nbmp.register_fork_handler(before=lambda: print("printed just before the fork"))
        p = nbmp.Process(target=int)
        p.start()
        p.join()
        print("exit code", p.exitcode)
        with nbmp.Pool(1) as pool:
            pool.map(abs, [1])
            pool.close()
            pool.join()
    """)
    assert out.splitlines().count("printed just before the fork") == 2, out  # one per round of forks
