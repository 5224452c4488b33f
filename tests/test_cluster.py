"""nbmp on a real Dask cluster: ``LocalCluster(processes=True)`` started and stopped here.

The module's cluster is shared by the tests that leave its workers alone; a test that kills
a Dask worker (whose Nanny then starts a new process) brings its own cluster, so that the
leak guard never mistakes a restarted worker for a leftover. The module checks at the end
that nothing the cluster ran is left.
"""

from __future__ import annotations

import gc
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402  (installed with distributed)

import nbmp  # noqa: E402
from conftest import TIMEOUT  # noqa: E402
from helpers import wait_until  # noqa: E402
from leaks import child_pids  # noqa: E402



def _cluster(n_workers: int = 2):
    # dashboard_address=":0": a free port. With the default (8787, often taken by another
    # cluster) tornado leaves the socket it failed to bind to the garbage collector.
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                    dashboard_address=":0", silence_logs=40)


def _closed(cluster, client, before, last: bool) -> None:
    """Close the cluster and check that its processes (and, for the ``last`` one, the threads
    it ran in this process, which a later fork would inherit) are gone."""
    client.close()
    cluster.close()
    deadline = time.monotonic() + 30
    while (child_pids() - before or (last and _dask_threads())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not child_pids() - before, f"the cluster left processes behind: {child_pids() - before}"
    assert not (last and _dask_threads()), f"the clusters left threads behind: {_dask_threads()}"


def _dask_threads():
    # The in-process scheduler hands graphs to Dask's module-wide offload thread, which lives
    # as long as the process: shut it down with the cluster (a new one starts its thread lazily).
    from concurrent.futures import ThreadPoolExecutor
    if any(t.name.startswith("Dask-Offload") for t in threading.enumerate()):
        distributed.utils._offload_executor.shutdown(wait=True)
        distributed.utils._offload_executor = ThreadPoolExecutor(1, thread_name_prefix="Dask-Offload")
    gc.collect()  # the in-process scheduler's profiler thread (3.12+) ends once its event loop is collected
    return [t.name for t in threading.enumerate() if t.name.startswith("Dask") or t.name in ("IO loop", "Profile")]


def _running_cluster(last: bool):
    before = child_pids()
    cluster = _cluster()
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    _closed(cluster, client, before, last)


@pytest.fixture(scope="module")
def module_client():
    yield from _running_cluster(last=True)


@pytest.fixture
def client(module_client):
    """The module's cluster, with both its workers up (a test before may have had one restarted)."""
    _wait_for_workers(module_client, 2)
    return module_client


@pytest.fixture
def own_client():
    """A cluster of its own, for a test that kills a Dask worker (the module's cluster runs meanwhile)."""
    yield from _running_cluster(last=False)


# -- spawn -------------------------------------------------------------------------------------------


def test_spawn_returns_ordered_values_and_runs_one_rank_per_worker(client):
    def where(rank, base):
        return rank + base, os.getppid()
    values = nbmp.spawn(where, args=(10,), nprocs=2, cluster=client, dashboard=False)
    assert [v for v, _ in values] == [10, 11]
    worker_pids = set(client.run(os.getpid).values())
    assert {ppid for _, ppid in values} == worker_pids  # each rank is a child of a different Dask worker


def test_no_nbmp_thread_outlives_a_cluster_spawn(client):
    # The run's watch thread ends just after it sets the run done: the call waits for that too.
    for _ in range(30):
        assert nbmp.spawn(lambda rank: rank, nprocs=2, cluster=client, dashboard=False) == [0, 1]
        assert not [t.name for t in threading.enumerate() if t.name.startswith("nbmp")]


def test_spawn_accepts_a_scheduler_address(client):
    assert nbmp.spawn(lambda rank: rank * 3, nprocs=2, cluster=client.scheduler.address, dashboard=False) == [0, 3]
    nbmp._cluster.close_owned_clients()


def test_output_is_relayed_whole_line_with_the_rank(client, capfd):
    def talk(rank):
        for k in range(3):
            print(f"line {k} of rank {rank}", flush=True)
        os.write(1, f"fd-level {rank}\n".encode())
        print("to stderr", rank, file=sys.stderr)
    nbmp.spawn(talk, nprocs=2, cluster=client, dashboard=False)
    out, err = capfd.readouterr()
    for rank in (0, 1):
        assert [line for line in out.splitlines() if line.startswith(f"[{rank}] line")] == \
            [f"[{rank}] line {k} of rank {rank}" for k in range(3)]
        assert f"[{rank}] fd-level {rank}" in out.splitlines()
        assert f"[{rank}] to stderr {rank}" in err.splitlines()


def test_a_ranks_progress_bar_reaches_the_sinks_as_status_then_as_its_line(client):
    from nbmp._base import WorkerOutput

    class Sink:
        def __init__(self):
            self.seen = []

        def handle(self, event):
            if isinstance(event, WorkerOutput):
                self.seen.append((event.index, event.line, event.status))

    def bar(rank):
        for k in range(4):
            sys.stderr.write(f"\rstep {k}/3")
            sys.stderr.flush()
            time.sleep(0.3)
        sys.stderr.write("\n")
    sink = Sink()
    nbmp.spawn(bar, nprocs=2, cluster=client, dashboard=False, output="none", sinks=[sink])
    for rank in (0, 1):
        mine = [(line, status) for index, line, status in sink.seen if index == rank]
        assert ("step 1/3", True) in mine and mine[-1] == ("step 3/3", False)


def test_a_ranks_lines_that_come_after_its_task_ended_are_still_printed(client, capfd, monkeypatch):
    # The ranks' messages and their tasks' ends travel apart: under load the messages (its
    # "started" among them) may come after the end. Delayed here by a second each, in order, as
    # Dask delivers one worker's events.
    from nbmp._cluster.inbox import Inbox
    on_time, delayed = Inbox._on_rank, queue.Queue()

    def deliver():
        while (item := delayed.get()) is not None:
            inbox, event, due = item
            time.sleep(max(0.0, due - time.monotonic()))
            on_time(inbox, event)
    courier = threading.Thread(target=deliver)
    courier.start()
    monkeypatch.setattr(Inbox, "_on_rank", lambda self, event: delayed.put((self, event, time.monotonic() + 1.0)))
    try:
        assert nbmp.spawn(lambda rank: print("late line of rank", rank) or rank, nprocs=2, cluster=client,
                          dashboard=False) == [0, 1]
    finally:
        delayed.put(None)
        courier.join()
    out = capfd.readouterr().out.splitlines()
    assert "[0] late line of rank 0" in out and "[1] late line of rank 1" in out


def test_a_client_refreshing_its_cached_scheduler_info_loses_no_rank(client):
    # A Client refreshes its cached scheduler info on its own loop, and that refresh carries no
    # workers: read at the wrong moment, the cache said every worker was gone.
    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}), \
            distributed.Client(client.scheduler.address, set_as_default=False) as busy:
        for _ in range(10):
            assert nbmp.spawn(lambda rank: rank, nprocs=2, cluster=busy, dashboard=False) == [0, 1]


def test_a_raising_rank_stops_the_others_and_raises_with_its_traceback(client):
    def work(rank):
        if rank == 1:
            raise KeyError("no such key")
        time.sleep(60)
    start = time.monotonic()
    with pytest.raises(nbmp.ProcessRaisedException) as info:
        nbmp.spawn(work, nprocs=2, cluster=client, dashboard=False)
    assert time.monotonic() - start < 20  # rank 0 was stopped, not waited for
    assert info.value.error_index == 1
    assert "-- Process 1 terminated with the following error:" in str(info.value)
    assert 'raise KeyError("no such key")' in str(info.value)  # the source line
    assert str(info.value).rstrip().endswith("KeyError: 'no such key'")
    assert isinstance(info.value.__cause__, KeyError)
    assert nbmp.spawn(lambda rank: "usable", nprocs=2, cluster=client, dashboard=False) == ["usable"] * 2


def test_a_rank_that_exits_raises_process_exited(client):
    with pytest.raises(nbmp.ProcessExitedException) as info:
        nbmp.spawn(lambda rank: os._exit(3) if rank == 0 else time.sleep(60), nprocs=2, cluster=client,
                   dashboard=False)
    assert (info.value.error_index, info.value.exit_code) == (0, 3)
    assert "process 0 terminated with exit code 3" in str(info.value)


def test_a_rank_killed_by_a_signal_names_it(client):
    with pytest.raises(nbmp.ProcessExitedException) as info:
        nbmp.spawn(lambda rank: os.kill(os.getpid(), signal.SIGKILL), nprocs=1, cluster=client, dashboard=False)
    assert info.value.signal_name == "SIGKILL"


@pytest.mark.timeout(120)
def test_a_rank_placed_on_a_worker_that_left_before_the_run_began_is_lost(client, monkeypatch):
    # The scheduler may still list a worker that has just died (a rank killed it): a rank placed
    # there got no "remove-worker" event, since it came before the run subscribed, and waited forever.
    from nbmp._cluster import placement
    monkeypatch.setattr(placement, "ranks_to_workers", lambda client, nprocs: [("127.0.0.1", "tcp://127.0.0.1:9")])
    with pytest.raises(nbmp.ProcessExitedException, match="was lost"):
        nbmp.spawn(lambda rank: rank, nprocs=1, cluster=client, dashboard=False)


def test_join_false_gives_a_context(client):
    context = nbmp.spawn(lambda rank: rank + 1, nprocs=2, join=False, cluster=client, dashboard=False)
    deadline = time.monotonic() + 30
    while not context.join(timeout=0.5):
        assert time.monotonic() < deadline
    assert context.results == [1, 2]
    assert len(context.workers) == 2 and all(pid > 0 for pid in context.pids())


def test_interrupt_stops_every_rank_and_leaves_the_client_usable(client):
    marker = f"/tmp/nbmp-cluster-interrupt-{os.getpid()}"

    def sleeper(rank):
        open(f"{marker}-{rank}", "w").close()
        time.sleep(120)

    timer = threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            nbmp.spawn(sleeper, nprocs=2, cluster=client, dashboard=False)
    finally:
        timer.cancel()
        for rank in (0, 1):
            if os.path.exists(f"{marker}-{rank}"):
                os.unlink(f"{marker}-{rank}")
    assert time.monotonic() - start < 20
    assert _busy(client) == {}, "a rank was still running on its worker"
    assert nbmp.spawn(lambda rank: rank, nprocs=2, cluster=client, dashboard=False) == [0, 1]


def _busy(client):
    def running(dask_worker=None):
        return [str(k) for k, t in dask_worker.state.tasks.items() if t.state == "executing"]
    deadline = time.monotonic() + 10
    while True:
        busy = {w: keys for w, keys in client.run(running).items() if keys}
        if not busy or time.monotonic() > deadline:
            return busy
        time.sleep(0.1)


def test_ranks_get_their_own_seeds_and_nbmp_seed_repeats_them(client):
    import random
    draw = lambda rank: random.random()  # noqa: E731
    nbmp.seed(7)
    try:
        first = nbmp.spawn(draw, nprocs=2, cluster=client, dashboard=False)
        nbmp.seed(7)
        again = nbmp.spawn(draw, nprocs=2, cluster=client, dashboard=False)
    finally:
        nbmp.seed(None)
    assert first == again and first[0] != first[1]


# -- bad input fails before anything is submitted ------------------------------------------------


def test_too_many_ranks_is_a_clear_error(client):
    with pytest.raises(ValueError, match=r"nprocs=3 is more than the 2 worker.*pass nprocs=2"):
        nbmp.spawn(lambda rank: rank, nprocs=3, cluster=client, dashboard=False)
    assert not client.who_has()  # nothing was submitted


def test_an_unpicklable_argument_is_named(client):
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"args\[1\]"):
        nbmp.spawn(lambda rank, a, b: None, args=(1, lock), nprocs=1, cluster=client, dashboard=False)


def test_no_scheduler_at_the_address_is_a_clear_error():
    start = time.monotonic()
    with pytest.raises(OSError, match=r"cluster='tcp://127.0.0.1:9'.*no Dask scheduler"):
        nbmp.spawn(lambda rank: rank, nprocs=1, cluster="tcp://127.0.0.1:9", dashboard=False)
    assert time.monotonic() - start < 30


def test_a_cluster_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(TypeError, match="cluster must be a distributed.Client or a scheduler address"):
        nbmp.spawn(lambda rank: rank, nprocs=1, cluster=42)


# -- Pool ------------------------------------------------------------------------------------------


def test_pool_api_on_the_cluster(client):
    scale = 3
    with nbmp.Pool(2, cluster=client) as pool:
        assert pool.map(lambda x: x * scale, range(10)) == [x * scale for x in range(10)]
        assert pool.starmap(lambda a, b: a - b, [(3, 1), (5, 2)]) == [2, 3]
        assert list(pool.imap(lambda x: x + 1, range(5))) == [1, 2, 3, 4, 5]
        assert sorted(pool.imap_unordered(lambda x: -x, range(5))) == [-4, -3, -2, -1, 0]
        assert pool.apply_async(pow, (2, 10)).get(timeout=30) == 1024
        assert pool.apply(divmod, (7, 2)) == (3, 1)
        with pytest.raises(ZeroDivisionError):
            pool.map(lambda x: 1 / x, [1, 0])
    assert nbmp.parallel_map(lambda x: x * x, range(6), cluster=client) == [0, 1, 4, 9, 16, 25]


def test_a_map_pickles_its_function_once(client):
    class Counted:
        def __init__(self):
            self.count = 0

        def __reduce__(self):
            self.count += 1
            return (int, (0,))
    counted = Counted()
    with nbmp.Pool(2, cluster=client) as pool:
        pool.map(lambda x, c=counted: x, range(100), chunksize=5)
    assert counted.count == 1


def test_pool_reports_progress(client):
    class Sink:
        def __init__(self):
            self.events = []

        def handle(self, event):
            self.events.append(event)
    sink = Sink()
    with nbmp.Pool(2, cluster=client) as pool:
        pool.map(lambda x: x, range(40), chunksize=4, progress=sink)
    progress = [e for e in sink.events if type(e).__name__ == "TaskProgress"]
    assert progress[-1].done == progress[-1].total == 40
    assert type(sink.events[-1]).__name__ == "RunFinished" and sink.events[-1].ok


# -- a Dask worker that dies -----------------------------------------------------------------------


def test_a_dead_pool_worker_raises_worker_lost(own_client):
    with nbmp.Pool(2, cluster=own_client) as pool:
        start = time.monotonic()
        with pytest.raises(nbmp.WorkerLostError, match="died"):
            pool.map(lambda x: os._exit(1) if x == 3 else time.sleep(0.2), range(8), chunksize=1)
        assert time.monotonic() - start < 30
    _wait_for_workers(own_client, 2)
    assert nbmp.parallel_map(abs, [-1, -2], cluster=own_client) == [1, 2]


def test_a_dead_dask_worker_raises_process_exited(own_client):
    def kill_my_worker(rank):
        if rank == 1:
            os.kill(os.getppid(), signal.SIGKILL)  # the rank's parent is its Dask worker
        time.sleep(60)
    with pytest.raises(nbmp.ProcessExitedException) as info:
        nbmp.spawn(kill_my_worker, nprocs=2, cluster=own_client, dashboard=False)
    assert info.value.error_index == 1 and "Dask worker" in str(info.value)
    _wait_for_workers(own_client, 2)


def test_ranks_starting_at_once_change_no_process_wide_state_of_their_dask_worker():
    # Two ranks start at once on one Dask worker (two task threads) while a thread of that
    # worker watches: its daemon flag and warning filters stay as they were throughout.
    before = child_pids()
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0",
                                       silence_logs=40)
    client = distributed.Client(cluster, set_as_default=False)

    def watch(dask_worker=None):
        import multiprocessing
        import warnings
        config = multiprocessing.current_process()._config
        start, changed, stop = (config.get("daemon"), list(warnings.filters)), [], threading.Event()

        def look():
            while not stop.wait(0.0002):
                now = (config.get("daemon"), list(warnings.filters))
                if now != start:
                    changed.append(now)

        thread = threading.Thread(target=look, daemon=True)
        thread.start()

        def done():
            stop.set()
            thread.join(TIMEOUT)
            return start[0], changed, list(warnings.filters) == start[1]
        dask_worker.nbmp_test_watch = done

    try:
        client.run(watch)
        for _ in range(3):
            runs = [nbmp.spawn(lambda rank: time.sleep(0.2), nprocs=1, cluster=client, join=False, dashboard=False)
                    for _ in range(2)]
            for run in runs:
                while not run.join():
                    pass
        (daemon, changed, filters_kept), = client.run(lambda dask_worker=None: dask_worker.nbmp_test_watch()).values()
    finally:
        _closed(cluster, client, before, last=False)
    assert daemon is True  # Dask's Nanny starts its worker as a daemonic process
    assert changed == [] and filters_kept


def _wait_for_workers(client, n):
    # A worker restarted after a rank's death comes back under a new address, and the scheduler
    # may list the dead one beside it for a moment: wait until it lists exactly the live ones.
    client.wait_for_workers(n, timeout=60)
    wait_until(lambda: len(client.nthreads()) == n, "the scheduler lists only live workers",
               timeout=60)


# -- Dask only when a cluster is used ------------------------------------------------------------


def test_import_nbmp_does_not_import_dask():
    code = ("import sys, nbmp; nbmp.spawn(lambda i: i, nprocs=1); "
            "assert not {'dask', 'distributed'} & set(sys.modules), sorted(m for m in sys.modules if 'dask' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_default_cluster(client):
    nbmp.set_cluster(client)
    try:
        assert nbmp.get_cluster() is client
        assert nbmp.spawn(lambda rank: os.getppid(), nprocs=2, dashboard=False) != [os.getpid()] * 2
        # cluster=False: here (spawn: this process runs the cluster's threads, a fork would warn)
        assert nbmp.spawn(lambda rank: os.getppid(), nprocs=1, cluster=False, start_method="spawn") == [os.getpid()]
    finally:
        nbmp.set_cluster(None)
    assert nbmp.get_cluster() is None


# -- in a notebook ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nb(kernel, module_client):
    kernel.run(f"%load_ext nbmp\nimport nbmp\naddress = {module_client.scheduler.address!r}").raise_for_error()
    yield kernel
    kernel.run("%unload_ext nbmp").raise_for_error()  # closes the kernel's client for the address


@pytest.mark.kernel
def test_cell_magic_runs_on_the_cluster(nb, client):
    nb.run("base = 100").raise_for_error()
    cell = nb.run(f"%%nbmp -n 2 --cluster {client.scheduler.address} -o got\n"
                  "print('hi from', rank)\nbase + rank * world_size")
    cell.raise_for_error()
    assert cell.result == "[100, 102]"
    assert "[0] hi from 0" in cell.stdout.splitlines() and "[1] hi from 1" in cell.stdout.splitlines()


@pytest.mark.kernel
def test_default_cluster_in_a_notebook_and_cell_source_in_tracebacks(nb):
    nb.run("nbmp.set_cluster(address)\n"
           "def fails(rank):\n    raise KeyError('from a cell')  # visible source line").raise_for_error()
    try:
        assert nb.run("%%nbmp\nworld_size").result == "[2, 2]"  # -n: the cluster's worker count
        cell = nb.run("nbmp.spawn(fails, nprocs=2, dashboard=False)")
        assert cell.error is not None and cell.error["ename"] == "ProcessRaisedException"
        text = "\n".join(cell.error["traceback"])
        assert "# visible source line" in text and "Cell In[" in text
    finally:
        nb.run("nbmp.set_cluster(None)").raise_for_error()


# -- the dashboard -----------------------------------------------------------------------------------


def test_the_dashboard_shows_each_rank_with_its_host_and_stop_works(client):
    import io
    board = nbmp.Dashboard("text", stream=io.StringIO())
    try:
        context = nbmp.spawn(lambda rank: time.sleep(60), nprocs=2, join=False, cluster=client, dashboard=False)
        deadline = time.monotonic() + 30
        while not _ranks_measured(board) and time.monotonic() < deadline:
            time.sleep(0.1)
        [run] = board.state.runs.values()
        assert run.start_method == "dask"
        workers = [run.workers[r] for r in (0, 1)]
        assert all(w.host and w.pid and w.rss for w in workers), workers  # host, pid, memory from the workers
        assert f"{workers[0].pid}@{workers[0].host}" in board.summary()
        board._stop_for(run.run_id)()  # the Stop button
        with pytest.raises(nbmp.ProcessStoppedException, match="stopped"):
            context.join(timeout=30)
        assert {w.state for w in workers} == {"killed"}
    finally:
        board.close()
    assert _busy(client) == {}


def _ranks_measured(board):
    runs = list(board.state.runs.values())
    return runs and all(w.rss for w in runs[0].workers.values())


def test_interrupting_a_pool_map_restarts_the_workers_whose_tasks_cannot_stop(own_client):
    timer = threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with nbmp.Pool(2, cluster=own_client) as pool:
            with pytest.raises(KeyboardInterrupt):
                pool.map(time.sleep, [60] * 4, chunksize=1)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 30
    assert _busy(own_client) == {}
    _wait_for_workers(own_client, 2)
    assert nbmp.parallel_map(abs, [-3], cluster=own_client) == [3]


# -- arrays ------------------------------------------------------------------------------------------


def test_a_shared_array_crosses_as_a_handle_on_the_clients_host(client, strategy):
    shared = nbmp.zeros(4)

    def fill(rank, a):
        a[rank] = rank + 1
        return nbmp.is_shared(a)
    assert nbmp.spawn(fill, args=(shared,), nprocs=2, cluster=client, dashboard=False) == [True, True]
    assert shared.tolist() == [1.0, 2.0, 0.0, 0.0]  # the ranks wrote into the client's pages


def test_a_big_array_goes_once_per_host_to_another_host(client, monkeypatch):
    import numpy as np
    monkeypatch.setattr(nbmp._cluster.connect, "is_local_host", lambda host: False)
    scattered = []
    real_scatter = client.scatter
    monkeypatch.setattr(client, "scatter", lambda data, **kw: scattered.append(kw) or real_scatter(data, **kw))
    big = np.ones(1 << 18)  # 2 MiB: above the inline limit

    def use(rank, a):
        a[0] = -1  # a copy of the client's array: the client does not see this
        return float(a.sum()), nbmp.is_shared(a)
    assert nbmp.spawn(use, args=(big,), nprocs=2, cluster=client, dashboard=False) == [(len(big) - 2.0, False)] * 2
    assert len(scattered) == 1  # both ranks' workers are on one host: sent there once
    assert big[0] == 1.0


def test_pool_workers_get_nbmp_seeds_and_thread_caps(client):
    import random
    nbmp.seed(11)
    try:
        with nbmp.Pool(2, cluster=client) as pool:
            settled = client.run(lambda: (random.random(), os.environ.get("OMP_NUM_THREADS")))
            assert pool.map(abs, [-1]) == [1]
        again = client.run(lambda: random.random())
    finally:
        nbmp.seed(None)
    draws = [d for d, _ in settled.values()]
    assert len(set(draws)) == 2  # each worker its own stream
    budget = max(1, (os.cpu_count() or 1) // 2)
    dasks = dask.config.get("distributed.nanny.pre-spawn-environ", {}).get("OMP_NUM_THREADS")  # a smaller one stays
    assert {threads for _, threads in settled.values()} == {str(min(budget, int(dasks or budget)))}
    assert again  # the workers live on


def test_without_dask_an_address_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'nbmp\[dask\]'"):
        nbmp.spawn(lambda rank: rank, nprocs=1, cluster="tcp://127.0.0.1:9")
