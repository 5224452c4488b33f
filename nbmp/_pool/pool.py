"""nbmp's Pool: the standard Pool, with cloudpickle, that never hangs on a dead worker.

The stdlib's threads and result objects are kept; overridden: pickling (its context's
``SimpleQueue`` pickles with cloudpickle), the worker factory (``Watch.make_worker``: a worker that
dies holding a task fails that task's call with :class:`~nbmp.WorkerLostError`, see docs/pool.md),
``progress=`` on ``map``/``starmap``, an interrupt that terminates the Pool, a map's function
pickled once per map (``Prepickled``), and input checked before anything is queued.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
import weakref
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing import pool as _stdpool
from typing import Any, Callable, Deque, Iterable, List, Optional, Tuple, TypeVar

from . import progress as _progress
from .._backend import daemons as _daemons, default_context, interrupts as _interrupts, plugin as _plugin, posix as _posix, register_factory
from .._backend.main_module import Initializer
from .._backend.popen_fork import fork_round
from .._base import RunFinished, RunStarted, TaskProgress, WorkerExited, checks as _checks, new_run_id
from .._base.checks import check_int
from .._base.exceptions import raised_at_caller
from .._base.events import TaskRan, WorkerStarted
from .errors import WorkerLostError
from .frames import FrameReader, StreamCut
from .results import sliced
from .sending import Prepickled
from .watch import WATCHES, Watch, drain, release_lock, watch_of
from .worker import PHASE, SENDING, Timed

__all__ = ["Pool", "parallel_map"]

_T = TypeVar("_T")


class Pool(_stdpool.Pool):
    """``multiprocessing.Pool`` with cloudpickle, crash detection and progress.

    A worker killed mid-task (SIGKILL, segfault, ``os._exit``, the OOM killer)
    makes the waiting call raise :class:`nbmp.WorkerLostError`; the Pool replaces
    the worker and stays usable. ``map`` and ``starmap`` accept ``progress=``.

    Example::

        >>> with nbmp.Pool(2) as p:
        ...     p.map(lambda x: x * x, range(4))
        [0, 1, 4, 9]
    """

    # Attributes the stdlib's Pool sets and this class uses; typeshed declares none of them.
    _ctx: Any  # the context the Pool was given
    _processes: int
    _cache: Any  # the stdlib's private _PoolCache (a dict of results with a notifier)
    _inqueue: Any  # nbmp SimpleQueues (the context's), made by the stdlib's __init__
    _outqueue: Any
    _change_notifier: Any  # a SimpleQueue that wakes the stdlib's worker thread
    _quick_put: Optional[Callable[[Any], None]]
    _quick_get: Optional[Callable[[], Any]]
    # What the stdlib's __del__ reads: right even for a Pool whose __init__ was interrupted
    # before its first line ran or raised in a check below.
    _state = _stdpool.INIT
    _pool: List[Any]  # the worker processes

    def __new__(cls, *args: Any, cluster: Any = None, **kwargs: Any) -> Any:
        cluster_backend = _plugin("cluster")  # nbmp._cluster's (a layer above): registered by ``import nbmp``
        if cluster_backend is not None and cluster_backend.wanted(cluster):  # the Pool API on Dask
            return cluster_backend.pool(*args, cluster=cluster, **kwargs)
        return super().__new__(cls)

    def __init__(self, processes: Optional[int] = None, initializer: Optional[Callable[..., Any]] = None,
                 initargs: Iterable[Any] = (), maxtasksperchild: Optional[int] = None,
                 context: Any = None, cluster: Any = None) -> None:
        if processes is not None:
            processes = _checks.worker_count(processes, "processes", "nbmp.Pool(4), or nbmp.Pool() for one per CPU", none_ok=True)
        if initializer is not None and not callable(initializer):
            raise TypeError(f"initializer must be a callable or None, not {type(initializer).__name__} "
                            f"{initializer!r}; e.g. nbmp.Pool(4, initializer=setup, initargs=(x,))")
        if initializer is not None:
            initializer = Initializer(initializer)  # the __main__ names it sets stay the worker's
        initargs = _checks.arguments(initargs, "initargs", "initargs=(x,)")
        if maxtasksperchild is not None:
            _checks.positive_int(maxtasksperchild, "maxtasksperchild", "maxtasksperchild=100, or None (no limit)",
                                 none_ok=True, wrong_type=_checks.WrongTypeError)  # the stdlib: ValueError
        if context is not None and not callable(getattr(context, "Process", None)):
            raise TypeError(f"context must be a context from nbmp.get_context(...), not {type(context).__name__} "
                            f"{context!r}; e.g. nbmp.Pool(4, context=nbmp.get_context('spawn'))")
        if context is None:
            context = default_context.get_context()
        # The stdlib's default: the CPUs this process may use where Python can tell (3.13+).
        self._watch = Watch(processes or getattr(os, "process_cpu_count", os.cpu_count)() or 1, context.get_start_method())
        try:
            self._start(processes, initializer, initargs, maxtasksperchild, context)
        except BaseException:  # an interrupt, a program's signal handler that raised, a thread refused
            if self._state == _stdpool.RUN:
                self.terminate()
            else:  # a handler thread could not start (a limit on processes): the stdlib leaves the workers
                threads = [t for t in (getattr(self, "_worker_handler", None), getattr(self, "_task_handler", None)) if t and t.is_alive()]
                if threads:  # the worker handler, whose end ends the task handler
                    threads[0]._state = _stdpool.TERMINATE  # the stdlib's stop flag
                    self._change_notifier.put(None)
                for thread in threads:
                    thread.join()
                for w in self._pool:
                    w.terminate()
                    w.join()
            raise

    @_interrupts.shielded
    def _start(self, *args: Any) -> None:
        # An interrupt while the workers and threads start is raised once they all run,
        # so that terminate() can stop them all (the stdlib leaves started workers behind).
        super().__init__(*args)
        self._watch.start(self)

    # -- workers ---------------------------------------------------------------------

    @property
    def Process(self) -> Callable[..., Any]:  # type: ignore[override]  # the stdlib's is a staticmethod; callers see the same factory
        """The worker factory the stdlib calls: the Watch's, which holds no reference to the Pool
        (the stdlib's worker thread keeps it, and a Pool nobody holds must still be collected)."""
        return self._watch.make_worker

    def _repopulate_pool(self) -> None:
        # The stdlib's start of the first workers, in one round of forks
        # (nbmp._backend.popen_fork.fork_round): the fork handlers run once for them all. A
        # replacement worker is started the stdlib's way, by its worker-handler thread.
        self._watch.cache = self._cache  # before any worker: one whose initializer fails at once fails the calls in it
        made = []
        for _ in range(self._processes - len(self._pool)):
            w = self.Process(self._ctx, target=_stdpool.worker,  # type: ignore[attr-defined]  # stdlib private: typeshed omits it
                             args=(self._inqueue, self._outqueue, self._initializer, self._initargs,  # type: ignore[attr-defined]
                                   self._maxtasksperchild, self._wrap_exception))  # type: ignore[attr-defined]
            w.name = w.name.replace("Process", "PoolWorker")
            w.daemon = True
            made.append(w)
        self._watch.populated = True  # the workers made from here on replace ended ones
        with fork_round():  # on a failed start, the stdlib's __init__ stops the workers in self._pool
            for w in made:
                w.start()
                self._pool.append(w)

    def _get_sentinels(self) -> List[Any]:
        # Not the result pipe too, as the stdlib: its worker thread would spin while a result waits
        # unread; worker exits wake it by their sentinels and the change notifier tells it the rest.
        return [self._change_notifier._reader]

    def _setup_queues(self) -> None:
        super()._setup_queues()  # type: ignore[misc]  # stdlib private: typeshed omits it
        inqueue, outqueue = self._inqueue, self._outqueue
        self._watch.inqueue, self._watch.outqueue = inqueue, outqueue  # the reader gives back its lock (see frames)
        if not all(isinstance(end, Connection) for end in (outqueue._reader, inqueue._writer)):
            return  # a stand-in context's queues (a test's mock): the stdlib's plumbing, as is
        for queue_ in (inqueue, outqueue):  # a map's chunks and results in flight at once
            _posix.widen_pipe(queue_._writer.fileno())
        WATCHES[inqueue] = weakref.ref(self._watch)
        self._quick_get = self._watch.reader(outqueue._reader)
        self._quick_put = self._watch.sender(inqueue._writer)

    @classmethod
    def _help_stuff_finish(cls, inqueue: Any, task_handler: Any, size: int) -> None:
        # The stdlib blocks on the task queue's lock, which a dead worker may hold: wait a bounded time.
        if not inqueue._reader.poll():
            return  # nothing queued to drain; an idle worker's hold ends with the worker
        watch, deadline = watch_of(inqueue), time.monotonic() + 5.0
        while not inqueue._rlock.acquire(timeout=0.05):  # a worker that died may hold it for good: not waited for
            if time.monotonic() > deadline or not inqueue._reader.poll() or watch is not None and (
                    watch.broken is not None or any(w.proc.exitcode is not None for w in list(watch.workers))):
                break
        # Raw bytes, never loaded (release_unread() gives their tickets back; a stream cut mid-message
        # has no framing) and never a blocking read (_unblock_threads or a live worker may take them).
        fd = inqueue._reader.fileno()
        while task_handler.is_alive() and inqueue._reader.poll():
            _posix.read_nowait(fd, 1 << 20)
            time.sleep(0)

    def close(self) -> None:
        """No more calls: the workers exit once the pending ones are done (the stdlib's semantics).

        Results nobody waits for (those of a map a worker's death failed early) are still read
        until the workers are gone: a worker writing one must not block ``join``."""
        self._watch.watch_now()  # a worker that dies from here on is not replaced, but may hold a lock
        super().close()
        if self._state == _stdpool.CLOSE:
            self._watch.read_late_results(self._result_handler)  # type: ignore[attr-defined]  # stdlib private

    @_interrupts.step  # a second interrupt (Ctrl-C pressed twice) is raised once every worker is stopped
    def terminate(self) -> None:
        """Stop the workers now; pending calls are abandoned (the stdlib's semantics)."""
        # Deaths from here on are the terminate's own: the watcher leaves first, so that it
        # does not wake (and take a core) for each worker the terminate stops.
        self._watch.stop(wait=False)
        if self._state != _stdpool.TERMINATE:
            self._state = _stdpool.TERMINATE  # no call is taken from here on (the stdlib's terminate sets it too)
            # the stdlib's task queue; None: __init__ never got there
            self._watch.quiet = self._watch.settled(getattr(self, "_taskqueue", None))
        super().terminate()
        self._watch.stop()
        self._watch.release_unread()  # the workers are dead: unread tasks' arrays are nobody's
        self._drop_queues()

    def join(self) -> None:
        """Wait for the workers to exit (after :meth:`close` or :meth:`terminate`).

        A Pool that a worker's death broke (its pending calls failed, and it closed itself)
        is terminated here: its other workers may wait on a task stream the dead one cut
        mid-message, or on a queue lock it held, and would never exit by themselves."""
        if (self._watch.broken is not None or self._watch.stream_cut) and self._state == _stdpool.CLOSE:
            self.terminate()
        if self._state in (_stdpool.CLOSE, _stdpool.TERMINATE):  # else the stdlib's join raises
            for thread in (self._worker_handler, self._task_handler, self._result_handler):  # type: ignore[attr-defined]  # stdlib private
                while thread.is_alive():
                    thread.join(_posix.INTERRUPT_SLICE)  # an interrupt another thread took is raised within one
        super().join()
        self._watch.stop()
        self._watch.release_unread()
        self._drop_queues()

    @_interrupts.step
    def _drop_queues(self) -> None:
        # Under spawn/forkserver the queues' named semaphores stay in /dev/shm while anything keeps the
        # Pool alive; an interrupt in their __del__ would be printed and dropped, so it waits (step).
        self._inqueue = self._outqueue = self._quick_put = self._quick_get = None
        self._cache.notifier = self._change_notifier = None
        self._watch.inqueue = self._watch.outqueue = None
        self._watch.drop_reader()

    def _check_running(self) -> None:
        if self._watch.broken and self._state != _stdpool.RUN:
            raise ValueError(f"Pool not running: it was closed because {self._watch.broken}. "
                             f"Create a new Pool.") from self._watch.broken_error
        super()._check_running()  # type: ignore[misc]  # stdlib private: typeshed omits it

    # -- submitting work ---------------------------------------------------------------

    def _map_async(self, func: Callable[..., Any], iterable: Iterable[Any], mapper: Callable[..., Any],
                   chunksize: Optional[int] = None, callback: Optional[Callable[..., Any]] = None,
                   error_callback: Optional[Callable[..., Any]] = None) -> _stdpool.MapResult[Any]:
        _checks.function(func)
        _check_processes(chunksize, "chunksize")
        _checks.items(iterable, "iterable", "pool.map(f, range(10))")
        if not hasattr(iterable, "__len__"):
            iterable = list(iterable)
        if chunksize is None:
            # The stdlib divides by len(self._pool), which is 0 for a moment while the worker
            # handler replaces dead workers (a failing initializer): use the Pool's size.
            chunksize = -(-len(iterable) // (self._watch.nprocs * 4))  # type: ignore[arg-type]  # Sized; rounded up
        result: _stdpool.MapResult[Any] = super()._map_async(  # type: ignore[misc]  # stdlib private
            Prepickled(func), iterable, mapper, chunksize, callback, error_callback)
        self._watch.name(result._job, "starmap" if mapper is _stdpool.starmapstar else "map", func,  # type: ignore[attr-defined]  # stdlib private
                         len(iterable))  # type: ignore[arg-type]  # Sized: has __len__, or made a list above
        return sliced(result)

    def apply_async(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Any = {},
                    callback: Optional[Callable[..., Any]] = None,
                    error_callback: Optional[Callable[..., Any]] = None) -> Any:
        """Like the stdlib's; a dead worker makes ``get()`` raise :class:`nbmp.WorkerLostError`."""
        _checks.function(func)
        args = _checks.arguments(args, "args", "pool.apply_async(f, args=(x,))")
        _checks.keywords(kwds, "kwds")
        result = super().apply_async(func, args, kwds, callback, error_callback)
        self._watch.name(result._job, "apply_async", func)  # type: ignore[attr-defined]  # stdlib private
        return sliced(result)

    def imap(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = 1) -> Any:
        """Like the stdlib's; a dead worker makes the iteration raise :class:`nbmp.WorkerLostError`."""
        _checks.function(func)
        _check_processes(chunksize, "chunksize")
        _checks.items(iterable, "iterable", "pool.imap(f, range(10))")
        return sliced(super().imap(Prepickled(func), iterable, chunksize))  # type: ignore[arg-type]  # unpickles as func in the worker

    def imap_unordered(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = 1) -> Any:
        """Like the stdlib's; a dead worker makes the iteration raise :class:`nbmp.WorkerLostError`."""
        _checks.function(func)
        _check_processes(chunksize, "chunksize")
        _checks.items(iterable, "iterable", "pool.imap_unordered(f, range(10))")
        return sliced(super().imap_unordered(Prepickled(func), iterable, chunksize))  # type: ignore[arg-type]  # unpickles as func in the worker

    # -- blocking calls: progress, and an interrupt terminates the Pool -----------------

    @raised_at_caller
    def map(self, func: Callable[..., Any], iterable: Iterable[Any], chunksize: Optional[int] = None,
            progress: Any = None) -> List[Any]:
        """Apply ``func`` to each item; ``progress``: True, False, None (auto) or a sink."""
        sink = _progress.resolve(progress)
        return self._wait(lambda: self.map_async(func, iterable, chunksize), sink, "map", func)

    @raised_at_caller
    def starmap(self, func: Callable[..., Any], iterable: Iterable[Iterable[Any]],
                chunksize: Optional[int] = None, progress: Any = None) -> List[Any]:
        """``func(*args)`` for each ``args`` in ``iterable``; ``progress`` as in :meth:`map`."""
        sink = _progress.resolve(progress)
        return self._wait(lambda: self.starmap_async(func, iterable, chunksize), sink, "starmap", func)

    @raised_at_caller
    def apply(self, func: Callable[..., Any], args: Iterable[Any] = (), kwds: Any = {}) -> Any:
        """``func(*args, **kwds)`` in a worker; an interrupt terminates the Pool."""
        return self._wait(lambda: self.apply_async(func, args, kwds), None, "apply", func)

    def _wait(self, submit: Callable[[], "_stdpool.ApplyResult[_T]"], sink: Any, what: str, func: Any) -> _T:
        __tracebackhide__ = True  # noqa: F841  # IPython: a task's error shows the worker's traceback, not this
        # The interrupt may come at any moment of the call, while the tasks are queued too.
        try:
            result = submit()
            if isinstance(sink, _progress.TextBar) and sink.delay > 0:
                # A bar that stays blank for its delay needs no events before it: a quick map
                # makes none (they cost the parent CPU its result thread could use).
                result.wait(sink.delay)
                if result.ready():
                    sink = None
            if sink is not None:
                _report_progress(result, sink, f"{what}({getattr(func, '__name__', 'task')})", self._watch, list(self._pool))
            return _outcome(result)
        except KeyboardInterrupt:
            self.terminate()  # stops the running tasks; workers ignore SIGINT themselves
            raise

    @classmethod
    def _terminate_pool(cls, taskqueue: Any, inqueue: Any, outqueue: Any, pool: Any, change_notifier: Any,
                        worker_handler: Any, task_handler: Any, result_handler: Any, cache: Any) -> None:
        # The stdlib's threads that terminate() joins may wait on what a killed worker left; a Pool
        # with nothing in flight (Watch.settled) needs no help.
        unblocking, watch = None, watch_of(inqueue)
        if not (watch is not None and watch.quiet and not cache):
            unblocking = _daemons.start(_unblock_threads, inqueue, outqueue, watch and watch.frames, pool, worker_handler,
                                        task_handler, result_handler, name="nbmp-pool-unblock")
        super()._terminate_pool(taskqueue, inqueue, outqueue, pool, change_notifier,  # type: ignore[misc]  # stdlib private
                                worker_handler, task_handler, result_handler, cache)
        if unblocking is not None and unblocking is not threading.current_thread():
            unblocking.join(timeout=30)  # its work ends with the workers': no nbmp thread outlives the terminate


def _unblock_threads(inqueue: Any, outqueue: Any, reader: Optional[FrameReader], pool: List[Any],
                     worker_handler: Any, task_handler: Any, result_handler: Any) -> None:
    """Free the terminate's threads: ``_read_away`` reads results on once the result thread has ended
    (a full pipe would hold the terminate's last message); once every worker is dead, a cut result
    ends the reads, the result lock a killed writer held is freed, and the task pipe is drained."""
    worker_handler.join(timeout=30)  # no worker is started any more
    reading = None if reader is None else _daemons.start(_read_away, reader, result_handler, name="nbmp-pool-read-away")
    lock, started = outqueue._wlock, [w for w in list(pool) if w.pid is not None]
    records = [] if (watch := watch_of(inqueue)) is None else list(watch.workers)  # the watcher settles no death from here on
    if _acquire(lock, records):
        lock.release()
    else:  # a worker killed holding it: the terminate ends the workers only after its put under that lock
        for w in started:
            w.terminate()
    _wait_for_all([w.sentinel for w in started], timeout=30)
    if reader is not None:
        deadline = time.monotonic() + 30
        while result_handler._state != _stdpool.TERMINATE and time.monotonic() < deadline:
            time.sleep(0.01)  # the terminate first checks that the result thread is alive
        reader.writers_gone()
    _acquire(lock, records)  # then free, whoever held it: a Lock has no owner, and its holder is dead
    release_lock(lock)  # (or the reader freed it meanwhile)
    deadline = time.monotonic() + 60
    drain(inqueue._reader, lambda: task_handler.is_alive() and time.monotonic() < deadline)
    if reading is not None:
        reading.join(timeout=30)


def _acquire(lock: Any, records: List[Any], timeout: float = 1.0) -> bool:
    """``lock.acquire(timeout=timeout)``, that gives up once one of ``records`` died holding it (writing a result)."""
    deadline = time.monotonic() + timeout
    while not lock.acquire(timeout=0.005):
        writers = [s for r in records if r.slot.view[PHASE] == SENDING and (s := r.sentinel()) is not None]
        if wait(writers, 0) or time.monotonic() > deadline:
            return False
    return True


def _wait_for_all(sentinels: List[Any], timeout: float) -> None:
    """Until every one of ``sentinels`` is ready, or ``timeout`` seconds have passed
    (``multiprocessing.connection.wait`` returns once *any* is ready)."""
    deadline = time.monotonic() + timeout
    try:
        for sentinel in sentinels:
            wait([sentinel], timeout=max(0.0, deadline - time.monotonic()))
    except (OSError, ValueError):  # a sentinel closed meanwhile (its process object closed): stop here
        return


def _read_away(reader: Any, result_handler: Any) -> None:
    """Once the result thread has ended, read a terminated Pool's result pipe until its writers are gone and
    it is empty: results nobody will get, loaded and dropped (their shared memory is given back)."""
    result_handler.join()  # never two readers at once
    while True:
        try:  # one class per clause: on 3.14+ a thread's stack of 64 KiB or less cannot match a tuple
            reader.recv()
        except EOFError:  # every writer gone and the pipe empty
            return
        except OSError:  # closed meanwhile
            return
        except StreamCut:
            reader.discard()
            return
        except Exception:  # a result that does not load here: dropped all the same
            continue


def _outcome(result: "_stdpool.ApplyResult[_T]") -> _T:
    """``result.get()``; a task's error is raised from here, without the standard Pool's frames
    (its traceback is the worker's, its ``__cause__`` the same as text)."""
    __tracebackhide__ = True  # noqa: F841  # see Pool._wait
    result.wait()
    if result.successful():
        return result.get()
    error: BaseException = result._value  # type: ignore[attr-defined]  # stdlib private: the task's exception
    raise error


def _report_progress(result: Any, sink: Any, target: str, watch: Watch, workers: List[Any]) -> None:
    """Emit the map's events (deaths of workers holding its tasks included) to ``sink`` from the caller's
    thread until it is done; a sink with ``timeline = False`` gets no per-chunk ``TaskRan``."""
    job, chunksize, run_id = result._job, max(result._chunksize, 1), new_run_id()
    total = watch.lengths.get(job, 0)
    chunks = -(-total // chunksize) if total else result._number_left  # all, not those left: a delayed bar starts with some done
    ran = _chunks_ran(result) if getattr(sink, "timeline", True) else deque()
    sink.handle(RunStarted(run_id, target, watch.start_method, watch.nprocs))
    for proc in workers:  # the dashboard samples the workers' CPU and memory by pid
        index = getattr(getattr(proc, "launch", None), "index", None)
        if proc.pid is not None and index is not None:
            sink.handle(WorkerStarted(run_id, index, proc.pid))
    deaths: "queue.SimpleQueue[WorkerExited]" = queue.SimpleQueue()  # filled by the Pool's result thread
    with watch.listening(job, deaths.put):
        _follow(result, sink, run_id, total, chunks, chunksize, ran, deaths)
    sink.handle(RunFinished(run_id, result.successful()))


def _follow(result: Any, sink: Any, run_id: int, total: int, chunks: int, chunksize: int,
            ran: "Deque[Tuple[int, Any, float]]", deaths: "queue.SimpleQueue[WorkerExited]") -> None:
    def tell_deaths() -> None:
        while not deaths.empty():
            sink.handle(dataclasses.replace(deaths.get(), run_id=run_id))

    shown = -1
    while True:
        tell_deaths()
        ready = result.ready()
        while ran:
            event = _task_ran(run_id, *ran.popleft(), chunksize, total)
            if event is not None:
                sink.handle(event)
        done = total if ready and result.successful() else min((chunks - result._number_left) * chunksize, total)
        if done != shown:
            sink.handle(TaskProgress(run_id, None, done, total))
            shown = done
        if ready:
            break
        result.wait(0.1)
    tell_deaths()  # a death that failed the map is told before the map ends


def _chunks_ran(result: Any) -> "Deque[Tuple[int, Any, float]]":
    """Each chunk's (index, result pair, arrival time), collected as the stdlib's result
    thread hands it to ``result`` (a wrapper of this one map's ``_set``)."""
    ran: "Deque[Tuple[int, Any, float]]" = deque()
    set_chunk = result._set

    def _set(i: int, obj: Any) -> None:
        ran.append((i, obj, time.time()))
        set_chunk(i, obj)
    result._set = _set
    return ran


def _task_ran(run_id: int, i: int, obj: Any, arrived: float, chunksize: int, total: int) -> Optional[TaskRan]:
    """The dashboard's record of chunk ``i``: which worker ran it, when, and how it ended."""
    count = max(0, min(chunksize, total - i * chunksize))
    if isinstance(obj, Timed) and obj.worker is not None:
        return TaskRan(run_id, obj.worker, obj.start, obj.end, "ok" if obj[0] else "raised", count)
    error = obj[1]
    if isinstance(error, WorkerLostError) and error.index is not None:  # start unknown: when the loss was seen
        return TaskRan(run_id, error.index, arrived, arrived, "lost", count)
    return None


_DEFAULTS = {"processes": ("nbmp.Pool(4)", "one per core"), "workers": ("workers=4", "up to one per core"),
             "chunksize": ("chunksize=16", "chosen from the length")}


def _check_processes(value: Any, name: str) -> None:
    example, none_means = _DEFAULTS[name]
    check_int(value, name, example, none_means=none_means)


def parallel_map(fn: Callable[[Any], Any], iterable: Iterable[Any], workers: Optional[int] = None,
                 progress: Any = None, chunksize: Optional[int] = None,
                 start_method: Optional[str] = None, *, cluster: Any = None) -> List[Any]:
    """``[fn(x) for x in iterable]``, computed by a fresh :class:`nbmp.Pool` of ``workers``.

    ``workers`` defaults to the number of CPUs; never more than one per item is started;
    ``progress`` is True, False, None (a bar for maps still running after two
    seconds) or an event sink; ``start_method`` None means nbmp's default (fork).
    The Pool is terminated before returning, whatever happens.

    Example::

        >>> nbmp.parallel_map(lambda x: x * x, range(5), workers=2)
        [0, 1, 4, 9, 16]
    """
    cluster_backend = _plugin("cluster")  # ``cluster``: see nbmp.spawn
    if cluster_backend is not None and cluster_backend.wanted(cluster):
        return cluster_backend.parallel_map(fn, iterable, workers, progress, chunksize, start_method, cluster=cluster)  # type: ignore[no-any-return]
    _checks.function(fn, "fn", "nbmp.parallel_map(f, items)")
    if workers is not None:
        workers = _checks.worker_count(workers, "workers", "nbmp.parallel_map(f, items, workers=4)", none_ok=True)
    _check_processes(chunksize, "chunksize")
    _checks.items(iterable, "iterable", "nbmp.parallel_map(f, range(10))")
    progress = _progress.check(progress)
    ctx = default_context.get_context(start_method)
    items = iterable if hasattr(iterable, "__len__") else list(iterable)
    if len(items) == 0:  # type: ignore[arg-type]  # Sized: has __len__, or a list
        return []
    nprocs = max(1, min(workers or ctx.cpu_count(), len(items)))  # type: ignore[arg-type]  # Sized: has __len__, or a list
    with Pool(nprocs, context=ctx) as pool:
        return pool.map(fn, items, chunksize, progress=progress)


register_factory("Pool", Pool)  # what ctx.Pool() builds
