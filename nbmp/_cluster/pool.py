"""``nbmp.Pool(processes, cluster=...)`` and ``parallel_map(..., cluster=...)``: the Pool
API on a Dask cluster.

A map's function is pickled once by nbmp's pickler (lambdas and cell functions by
value) and scattered once; its items go in chunks, one Dask task each. A worker that
dies while it holds one of the map's tasks makes the call raise ``WorkerLostError`` at
once (the scheduler says which tasks it held), instead of Dask's silent retries. An
interrupt cancels every task and restarts the workers whose task could not stop.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence

from .._backend import pickling as _pickling
from .._backend.posix import INTERRUPT_SLICE, wait_slice
from .._base import RunFinished, RunStarted, TaskProgress, checks as _checks, new_run_id
from .._pool import WorkerLostError
from .._pool import progress as _progress
from . import connect, placement, plugin, tasks
from .inbox import Inbox

__all__ = ["ClusterPool", "parallel_map_on_cluster"]

INTERRUPT_GRACE = 2.0  # seconds a cancelled task may take to end before its worker is restarted
_keys = itertools.count()


class ClusterPool:
    """The Pool API (map, starmap, imap, imap_unordered, apply, apply_async, ...) on a Dask cluster.

    Example::

        >>> with nbmp.Pool(4, cluster=client) as pool:
        ...     pool.map(lambda x: x * x, range(4))
        [0, 1, 4, 9]
    """

    def __init__(self, processes: Optional[int] = None, initializer: Optional[Callable[..., Any]] = None,
                 initargs: Iterable[Any] = (), maxtasksperchild: Optional[int] = None, context: Any = None, *,
                 cluster: Any = None) -> None:
        if processes is not None:
            processes = _checks.worker_count(processes, "processes", "nbmp.Pool(4, cluster=client)", none_ok=True)
        if initializer is not None:
            raise ValueError("nbmp.Pool(..., cluster=) takes no initializer: a Dask worker serves many pools; "
                             "set workers up with client.register_plugin(...) or at the top of the mapped function")
        self.client = connect.client_for(cluster)
        per_host = placement.ranks_per_host(connect.worker_hosts(self.client))
        self.workers = list(per_host)
        self._processes = processes or len(self.workers) or 1
        plugin.register(self.client, max(per_host.values(), default=1))
        self._prefix = f"nbmp-pool-{id(self):x}-{time.time_ns():x}"
        self._closed = False

    # -- the blocking calls ------------------------------------------------------------------------

    def map(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = None,
            progress: Any = None) -> List[Any]:
        """``[func(x) for x in iterable]`` on the cluster; ``progress`` as in ``nbmp.Pool.map``."""
        return self._run(func, iterable, chunksize, False, progress)

    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]], chunksize: Optional[int] = None,
                progress: Any = None) -> List[Any]:
        """``[func(*args) for args in iterable]`` on the cluster."""
        return self._run(func, iterable, chunksize, True, progress)

    def apply(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Any = {}) -> Any:
        return self.apply_async(func, args, kwds).get()

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = 1) -> Iterator[Any]:
        """Results in order, each as soon as it and those before it are done."""
        return self._start(func, iterable, chunksize, False).ordered()

    def imap_unordered(self, func: Callable[..., Any], iterable: Iterable[Any],
                       chunksize: Optional[int] = 1) -> Iterator[Any]:
        """Results as they are done."""
        return self._start(func, iterable, chunksize, False).unordered()

    # -- the asynchronous calls ---------------------------------------------------------------------

    def map_async(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = None,
                  callback: Optional[Callable[..., Any]] = None,
                  error_callback: Optional[Callable[..., Any]] = None) -> "ClusterResult":
        return ClusterResult(self._start(func, iterable, chunksize, False), False, callback, error_callback)

    def starmap_async(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                      chunksize: Optional[int] = None, callback: Optional[Callable[..., Any]] = None,
                      error_callback: Optional[Callable[..., Any]] = None) -> "ClusterResult":
        return ClusterResult(self._start(func, iterable, chunksize, True), False, callback, error_callback)

    def apply_async(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Any = {},
                    callback: Optional[Callable[..., Any]] = None,
                    error_callback: Optional[Callable[..., Any]] = None) -> "ClusterResult":
        """``func(*args, **kwds)`` on a worker; ``.get()`` raises ``WorkerLostError`` if that worker dies."""
        self._check_running()
        _checks.function(func)
        args = _checks.arguments(args, "args", "pool.apply_async(f, args=(x,))")
        _checks.keywords(kwds, "kwds")
        pickled = _by_value(func)
        key = f"{self._prefix}-apply-{next(_keys)}"
        future = self.client.submit(tasks.run_apply, pickled, tuple(args), dict(kwds), key=key, pure=False)
        return ClusterResult(_Run(self, [future], [1], key), True, callback, error_callback)

    # -- lifetime ---------------------------------------------------------------------------------------

    def close(self) -> None:
        self._closed = True

    def terminate(self) -> None:
        """Cancel this pool's tasks, restarting the workers of those that cannot stop."""
        self._closed = True
        cancel(self.client, self._prefix, [])

    def join(self) -> None:
        if not self._closed:
            raise ValueError("Pool is still running: call close() or terminate() before join()")

    def __enter__(self) -> "ClusterPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<nbmp.Pool on Dask {self.client.scheduler.address}: {self._processes} processes, {state}>"

    # -- inside -------------------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._closed:
            raise ValueError("Pool not running: it was closed or terminated; create a new one")

    def _start(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int],
               star: bool) -> "_Run":
        self._check_running()
        _checks.function(func)
        _checks.items(iterable, "iterable", "pool.map(f, range(10))")
        items = list(iterable)
        if chunksize is not None:
            _checks.positive_int(chunksize, "chunksize", "chunksize=16")
        size = chunksize or max(1, -(-len(items) // (4 * self._processes)))
        key = f"{self._prefix}-map-{next(_keys)}"
        [shipped] = self.client.scatter([_by_value(func)], hash=False)  # once per map, whatever the chunks
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        futures = [self.client.submit(tasks.run_chunk, shipped, key, chunk, star, key=f"{key}-{n}", pure=False)
                   for n, chunk in enumerate(chunks)]
        return _Run(self, futures, [len(c) for c in chunks], key)

    def _run(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int], star: bool,
             progress: Any) -> List[Any]:
        sink = _progress.resolve(_progress.check(progress))
        run = self._start(func, iterable, chunksize, star)
        return run.collect(sink, f"{'starmap' if star else 'map'}({getattr(func, '__name__', 'task')})")


class _Run:
    """One call's futures, read in the caller's thread; a lost worker or an interrupt ends it."""

    def __init__(self, pool: ClusterPool, futures: List[Any], sizes: List[int], key: str) -> None:
        self.pool, self.futures, self.sizes, self.key = pool, futures, sizes, key
        self.inbox = Inbox(pool.client, None, pool.workers)
        self.total = sum(sizes)

    def collect(self, sink: Any, target: str) -> List[Any]:
        run_id, done = new_run_id(), 0
        if sink is not None:
            sink.handle(RunStarted(run_id, target, "dask", self.pool._processes))
            sink.handle(TaskProgress(run_id, None, 0, self.total))
        ok = False
        try:
            for n in self._finished_in_any_order():
                done += self.sizes[n]
                if sink is not None:
                    sink.handle(TaskProgress(run_id, None, done, self.total))
            ok = True
        finally:
            if sink is not None:
                sink.handle(RunFinished(run_id, ok))
        return [x for future in self.futures for x in future.result()]

    def ordered(self) -> Iterator[Any]:
        ready: set[int] = set()
        following = 0
        for n in self._finished_in_any_order():
            ready.add(n)
            while following in ready:
                yield from self.futures[following].result()
                following += 1

    def unordered(self) -> Iterator[Any]:
        for n in self._finished_in_any_order():
            yield from self.futures[n].result()

    def _finished_in_any_order(self) -> Iterator[int]:
        """Indices of futures as each finishes; raises a task's error, WorkerLostError, or an interrupt."""
        pending = set(range(len(self.futures)))
        index = {future.key: n for n, future in enumerate(self.futures)}
        try:
            with self.inbox:
                for n, future in enumerate(self.futures):
                    self.inbox.watch(future, n)
                while pending:
                    message = wait_slice(self.inbox.get, INTERRUPT_SLICE)  # an interrupt is raised within one
                    if message is None:
                        continue
                    if message[0] == "lost":
                        self._check_lost(message[1], message[2], index, pending)
                    elif message[0] == "done" and message[1] in pending:
                        pending.discard(message[1])
                        _raise_if_failed(message[2], message[1])
                        yield message[1]
        except KeyboardInterrupt:
            cancel(self.pool.client, self.key, self.futures)
            raise
        except BaseException:
            self.pool.client.cancel(self.futures, force=True)
            raise

    def _check_lost(self, address: str, keys: List[str], index: Any, pending: set[int]) -> None:
        held = [k for k in keys if k in index and index[k] in pending]
        if held:
            raise WorkerLostError(f"the Dask worker {address} died (or was removed from the cluster) while it ran "
                                  f"task {held[0]} of this call; the other tasks were cancelled. Its log on the "
                                  f"worker's host says why (e.g. memory: see the cluster's dashboard)", task=held[0])


def _raise_if_failed(future: Any, n: int) -> None:
    if future.status == "error":
        exc = future.exception()
        if type(exc).__name__ == "KilledWorker":
            raise WorkerLostError(f"Dask gave up on task {future.key}: the workers that ran it died ({exc})", task=str(future.key)) from exc
        future.result()  # raises the task's own exception, with the worker's traceback
    if future.status == "cancelled":
        raise WorkerLostError(f"task {future.key} was cancelled on the cluster (the client or another caller "
                              f"cancelled it, or the cluster restarted)", task=str(future.key))


def cancel(client: Any, prefix: str, futures: Sequence[Any]) -> None:
    """Cancel ``futures``; restart the workers still executing a task of ``prefix`` after a grace period
    (a running Dask task cannot be stopped any other way)."""
    if futures:
        client.cancel(list(futures), force=True)
    deadline = time.monotonic() + INTERRUPT_GRACE
    while True:
        stuck = [w for w, keys in client.run(tasks.executing, prefix).items() if keys]
        if not stuck:
            return
        if time.monotonic() > deadline:
            client.restart_workers(stuck, raise_for_error=False)
            return
        time.sleep(0.1)


class ClusterResult:
    """``AsyncResult``'s API (get, wait, ready, successful) over a call's futures."""

    def __init__(self, run: _Run, single: bool, callback: Optional[Callable[..., Any]],
                 error_callback: Optional[Callable[..., Any]]) -> None:
        self._run, self._single = run, single
        self._callback, self._error_callback = callback, error_callback

    def get(self, timeout: Optional[float] = None) -> Any:
        self.wait(timeout)
        if not self.ready():
            raise TimeoutError(f"the call's tasks were not done within {timeout} seconds")
        try:
            values = self._run.collect(None, "")
        except Exception as exc:
            if self._error_callback is not None:
                self._error_callback(exc)
            raise
        value = values[0] if self._single else values
        if self._callback is not None:
            self._callback(value)
        return value

    def wait(self, timeout: Optional[float] = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.01)

    def ready(self) -> bool:
        return all(f.done() for f in self._run.futures)

    def successful(self) -> bool:
        if not self.ready():
            raise ValueError("the call is not ready yet")
        return all(f.status == "finished" for f in self._run.futures)


def _by_value(func: Any) -> bytes:
    """``func`` pickled once, by value (cloudpickle): every worker of the map unpickles the
    same bytes, so they hold no single-use shared-memory handle; a failure names the culprit."""
    try:
        return _pickling.dumps_plain(func)
    except Exception as exc:
        raise _pickling.unpicklable(exc, {"func": func}, "send it to the Dask cluster") from exc


def parallel_map_on_cluster(fn: Callable[[Any], Any], iterable: Iterable[Any], workers: Optional[int] = None,
                            progress: Any = None, chunksize: Optional[int] = None,
                            start_method: Optional[str] = None, *, cluster: Any = None) -> List[Any]:
    """``nbmp.parallel_map`` on a Dask cluster."""
    with ClusterPool(workers, cluster=cluster) as pool:
        return pool.map(fn, iterable, chunksize, progress=progress)
