"""``nbmp.spawn`` and ``nbmp.start_processes``: torch.multiprocessing's spawn API on
nbmp's contexts, returning the workers' values and relaying their output whole-line (docs/spawn.md).

Beyond torch's: any start method (fork by default), cloudpickled ``fn``, ordered return values,
and a failure stops the other workers also with ``join=False`` and nobody joining (one second
after the failure); SIGINT is ignored in workers, which the parent stops on KeyboardInterrupt.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._backend import interrupts as _interrupts, pickling as _pickling, plugin as _plugin, posix as _posix
from .._backend.main_module import MainObjects
from .._backend.popen_fork import fork_round
from .._forking import Launch, stamp
from .._base import Broadcast, EventSink, RunStarted, WorkerStarted, new_run_id
from .._base import ProcessException, ProcessRaisedException, exited_error, raised_message, stopped_error
from .._base import util as _util
from .._base.exceptions import raised_at_caller
from .output import StreamPrinter
from .args import check_arguments, check_grace_period
from .supervisor import Supervisor, Worker
from .worker import Job, run

__all__ = ["spawn", "start_processes", "ProcessContext", "SpawnContext", "ENV_VAR_PARALLEL_START"]

ENV_VAR_PARALLEL_START = "TORCH_MP_PARALLEL_START"
"""torch's switch, read at each call: set to ``"1"``, a forkserver run starts its workers
all at once, each from a thread, instead of one after another (a start waits until the
child has read its process object, so a large one, or a slow import of the main module
in the child, is paid once rather than once per worker).

Example::

    >>> os.environ[nbmp.ENV_VAR_PARALLEL_START] = "1"
    >>> nbmp.spawn(lambda i: i, nprocs=4, start_method="forkserver")
    [0, 1, 2, 3]
"""

DEFAULT_GRACE_PERIOD = 3.0
# On KeyboardInterrupt workers get at most this long between SIGTERM and SIGKILL.
INTERRUPT_GRACE_PERIOD = 1.0


class ProcessContext:
    """The workers of a ``spawn(..., join=False)`` run.

    Example::

        >>> ctx = nbmp.spawn(lambda i: i * 10, nprocs=2, join=False)
        >>> while not ctx.join(timeout=1.0):
        ...     pass
        >>> ctx.results
        [0, 10]
    """

    def __init__(self, processes: List[Any], supervisor: Supervisor) -> None:
        self.processes = processes
        self._supervisor = supervisor

    def pids(self) -> List[int]:
        """The workers' process ids, by index."""
        return [int(process.pid) for process in self.processes]

    @property
    def sentinels(self) -> Dict[int, int]:
        """``{process.sentinel: index}`` for the workers that have not exited, as torch's
        (torch removes a worker as ``join`` sees it exit; here, as it exits)."""
        return {p.sentinel: i for i, p in enumerate(self.processes) if p.exitcode is None}

    @property
    def error_files(self) -> List[Optional[str]]:
        """torch's per-worker error-file paths: all None, since nbmp's workers report their
        tracebacks over a pipe, not a file (read ``join``'s exception instead)."""
        return [None] * len(self.processes)

    @property
    def results(self) -> Optional[List[Any]]:
        """The return values by index once ``join`` has returned True, else None."""
        sup = self._supervisor
        if not sup.done.is_set() or sup.failure is not None or sup.interrupted or sup.crash is not None \
                or sup.stopped:
            return None
        return [w.outcome[1] if w.outcome is not None else None for w in sup.workers]

    @raised_at_caller
    def join(self, timeout: Optional[float] = None, grace_period: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` seconds; True once every worker exited successfully.

        If a worker failed, the others are stopped and :class:`ProcessRaisedException` or
        :class:`ProcessExitedException` is raised, on this and every later call. The stop
        is torch's: SIGTERM to those still running, then SIGKILL to those still running
        ``grace_period`` seconds later; with ``grace_period`` given (to a ``join`` that
        was waiting when the failure came), they first get ``grace_period`` seconds to
        end on their own. Without it, SIGTERM goes at once and SIGKILL after the run's
        ``grace_period`` (``start_processes``'s, 3 s by default). Each signal is logged as
        a warning on torch's logger for it, ``torch.multiprocessing.spawn``.
        A KeyboardInterrupt, or another exception raised meanwhile, stops every worker at once and is re-raised.
        """
        __tracebackhide__ = True  # noqa: F841  # IPython shows the worker's traceback, not nbmp's frames
        sup = self._supervisor
        sup.joining(None if grace_period is None else check_grace_period(grace_period))
        try:
            if not _wait(sup, timeout) and sup.failure is None:
                return False
            _wait(sup, None)  # a failure is being cleaned up: that is short
        except BaseException:  # an interrupt, or a program's signal handler that raised (a timeout)
            self._stop_after_interrupt()
            raise
        if sup.crash is not None:
            raise RuntimeError("nbmp.spawn: the run's supervising thread failed") from sup.crash
        if sup.failure is not None:
            raise _error_for(sup.failure)
        if sup.stopped:
            raise self._stopped_error()
        return True

    def _stopped_error(self) -> ProcessException:
        workers = self._supervisor.workers
        finished = [w.index for w in workers if w.outcome is not None and w.outcome[0] == "ok"]
        results = [w.outcome[1] if w.index in finished else None for w in workers]  # type: ignore[index]
        return stopped_error(results, finished, self.pids())

    def _stop_after_interrupt(self) -> None:
        sup = self._supervisor
        sup.interrupted = True
        grace = min(sup.grace_period, INTERRUPT_GRACE_PERIOD)
        while True:
            try:
                sup.stop(grace)
                _wait(sup, None)
                return
            except KeyboardInterrupt:  # pressed again: no more grace
                grace = 0.0

    def __repr__(self) -> str:
        state = "done" if self._supervisor.done.is_set() else "running"
        return f"<nbmp.ProcessContext run {self._supervisor.run_id}: {len(self.processes)} processes, {state}>"


SpawnContext = ProcessContext
"""torch's old name for :class:`ProcessContext` (``torch.multiprocessing.SpawnContext``), kept for code that uses it."""


def _wait(sup: Supervisor, timeout: Optional[float]) -> bool:
    # Short slices: a signal handled by another thread must still reach us soon.
    deadline = None if timeout is None else max(0.0, timeout)
    while deadline is None or deadline > 0:
        step = _posix.INTERRUPT_SLICE if deadline is None else min(_posix.INTERRUPT_SLICE, deadline)
        if _posix.wait_slice(sup.done.wait, step):
            sup.thread.join()  # past its last step: no nbmp thread outlives the call that waited
            return True
        if deadline is not None:
            deadline -= step
    return sup.done.is_set()


def _error_for(worker: Worker) -> ProcessException:
    pid = int(worker.process.pid or 0)
    outcome = worker.outcome
    if outcome is None or outcome[0] == "ok":
        assert worker.end is not None, "a failed worker has ended"
        return exited_error(worker.end)
    if outcome[0] == "unloadable":
        text = "the worker's result could not be unpickled in the parent:\n" + outcome[1]
        return ProcessRaisedException(raised_message(worker.index, text), worker.index, pid)
    remote = outcome[1]  # the worker's exception, on nbmp's one remote-traceback path
    error = ProcessRaisedException(raised_message(worker.index, remote.text), worker.index, pid)
    error.__cause__ = remote.exc
    return error


# -- Starting a run --------------------------------------------------------------------------------


@raised_at_caller
def start_processes(fn: Callable[..., Any], args: Sequence[Any] = (), nprocs: int = 1, join: bool = True,
                    daemon: bool = False, start_method: Optional[str] = None, *, output: str = "prefix",
                    grace_period: float = DEFAULT_GRACE_PERIOD, dashboard: Any = None,
                    sinks: Sequence[EventSink] = (), cluster: Any = None) -> Any:
    """Run ``fn(i, *args)`` in ``nprocs`` processes, ``i`` = 0..nprocs-1.

    With ``join=True`` (default) wait and return the return values ordered by
    ``i``; with ``join=False`` return a :class:`ProcessContext`. ``start_method``
    None means nbmp's default (fork first). ``output`` is ``"prefix"`` (workers'
    lines printed as ``[i] line``), ``"raw"``, ``"none"`` or ``"inherit"``.
    ``grace_period``: seconds between SIGTERM and SIGKILL when stopping workers.
    ``dashboard``: the live view of the run (see docs/dashboard.md): None (the
    default set by ``nbmp.set_dashboard``, else a widget in a notebook and text
    elsewhere), True, False, ``"widget"``, ``"text"`` or ``"off"``.
    ``sinks`` (advanced): objects with ``handle(event)`` that get the run's events.
    ``cluster``: a ``distributed.Client`` or scheduler address: one rank per Dask worker
    (docs/cluster.md); None runs here unless ``nbmp.set_cluster`` set a default.

    Example::

        >>> nbmp.start_processes(lambda i, x: i + x, args=(10,), nprocs=3, start_method="spawn")
        [10, 11, 12]
    """
    __tracebackhide__ = True  # noqa: F841  # see ProcessContext.join
    cluster_backend = _plugin("cluster")  # nbmp._cluster's (a layer above): registered by ``import nbmp``
    if cluster_backend is not None and cluster_backend.wanted(cluster):
        return cluster_backend.spawn(fn, args, nprocs, join, daemon, start_method, cluster=cluster, output=output,
                                     grace_period=grace_period, dashboard=dashboard, sinks=sinks)
    ctx, args, nprocs = check_arguments(fn, args, nprocs, start_method, output, grace_period, sinks)
    stop = _StopButton(grace_period)
    from ..widgets import make_dashboard  # imported on first use: a worker that never starts a run skips it
    board = make_dashboard(dashboard, stop=stop)  # validates ``dashboard`` before anything starts
    run_id = new_run_id()
    events = _broadcast(output, [*sinks, board])
    started = RunStarted(run_id, _util.name_of(fn), ctx.get_start_method(), nprocs)
    events.handle(started)
    run: List[ProcessContext] = []
    try:
        _start_attached(run, stop, ctx, fn, args, nprocs, daemon, output, run_id, events, grace_period, board, bool(join))
        if not join:
            return run[0]
        while not run[0].join():
            pass
    except BaseException:  # as in join; also one that came just before join was entered
        if run:
            run[0]._stop_after_interrupt()
        raise
    return run[0].results


@_interrupts.shielded
def _start_attached(run: List[ProcessContext], stop: _StopButton, *args: Any) -> None:
    # An interrupt while the run starts is raised once its supervisor runs (the run noted in
    # ``run``), so that it stops the workers the way an interrupt in join does.
    run.append(_start_run(*args))
    stop.attach(run[0]._supervisor)


@raised_at_caller
def spawn(fn: Callable[..., Any], args: Sequence[Any] = (), nprocs: int = 1, join: bool = True,
          daemon: bool = False, start_method: Optional[str] = None, **options: Any) -> Any:
    """Run ``fn(i, *args)`` in ``nprocs`` worker processes and return their values by ``i``.

    The same as :func:`start_processes` (torch's ``spawn`` forces the spawn start
    method; nbmp's uses nbmp's default, fork first, unless ``start_method`` says
    otherwise). Keyword-only options: ``output``, ``grace_period``, ``dashboard``, ``sinks``, ``cluster``.

    Example::

        >>> nbmp.spawn(lambda i: i * i, nprocs=4)
        [0, 1, 4, 9]
    """
    __tracebackhide__ = True  # noqa: F841  # see ProcessContext.join
    return start_processes(fn, args, nprocs, join, daemon, start_method, **options)


class _StopButton:
    """The dashboard's Stop button: stops the run's workers, also while they start. It holds the
    supervisor weakly, since the supervisor's sinks hold the button and a shown dashboard outlives
    its run (a cycle would keep the workers' return values alive)."""

    def __init__(self, grace_period: float) -> None:
        self.grace_period = grace_period
        self._supervisor: Optional["weakref.ref[Supervisor]"] = None
        self._pressed = False

    def attach(self, supervisor: Supervisor) -> None:
        self._supervisor = weakref.ref(supervisor)
        if self._pressed:  # pressed before the run's supervisor existed (stop_by_user is idempotent)
            supervisor.stop_by_user(self.grace_period)

    def __call__(self) -> None:
        self._pressed = True
        supervisor = self._supervisor() if self._supervisor is not None else None
        if supervisor is not None:  # None: not started yet, or ended and gone (nothing to stop)
            supervisor.stop_by_user(self.grace_period)


def _no_flush() -> None:
    pass


def _broadcast(output: str, sinks: Sequence[EventSink]) -> Broadcast:
    printers: List[EventSink] = [StreamPrinter(prefix=output == "prefix")] if output in ("prefix", "raw") else []
    return Broadcast(printers + list(sinks))


def _start_run(ctx: Any, fn: Callable[..., Any], args: Tuple[Any, ...], nprocs: int, daemon: bool, output: str,
               run_id: int, events: Broadcast, grace_period: float, board: Any, join: bool) -> ProcessContext:
    """Start the workers (in one fork round: the fork handlers run once) and their supervisor thread;
    on failure, undo it all."""
    workers: List[Worker] = []
    unstarted: List[_Unstarted] = []
    supervisor: Optional[Supervisor] = None
    try:
        _prepare_parent()
        method = ctx.get_start_method()
        unstarted = [_make_one(ctx, fn, args, i, nprocs, daemon, output) for i in range(nprocs)]
        flush = getattr(events.sinks[0], "flush", _no_flush) if events.sinks else _no_flush
        supervisor = Supervisor(run_id, [one.worker for one in unstarted], events, flush, grace_period, joined=join)
        held = supervisor.prepare()
        if method == "fork":  # a worker must not keep the other workers' write ends open
            main_objects = MainObjects()
            main_objects.record()
            ends = [tuple(end.fileno() for end in one.ends) for one in unstarted]
            # The parent's ends of every worker's pipes stay open across all the forks.
            parents = held + tuple(fd for one in unstarted for fd in (one.worker.result_pipe.fileno(), one.worker.receipt_pipe.fileno(), *one.worker.output_pipes))
            for k, one in enumerate(unstarted):
                # Forked one by one, a worker has the later workers' ends (the earlier ones' are closed).
                one.job.inherited = parents + tuple(fd for fds in ends[k + 1:] for fd in fds)
                one.job.main_objects = main_objects
        with _interrupts.blocked(), fork_round():  # blocked: for the children's sake
            if method == "forkserver" and os.environ.get(ENV_VAR_PARALLEL_START, "0") == "1":
                _start_all_at_once(unstarted, workers)  # leaves unstarted empty, or raises
            while unstarted:
                one = unstarted[0]
                try:
                    one.worker.process.start()
                finally:
                    for end in one.ends:
                        end.close()  # the child has its copies; ours would hide its exit
                workers.append(unstarted.pop(0).worker)
        for worker in workers:
            events.handle(WorkerStarted(run_id, worker.index, int(worker.process.pid)))  # type: ignore[arg-type]  # started: pid is set
        supervisor.start()
    except BaseException:
        if supervisor is not None:
            supervisor.discard()
        _abandon(workers, unstarted)
        board.close()
        raise
    return ProcessContext([w.process for w in workers], supervisor)


def _start_all_at_once(unstarted: List["_Unstarted"], workers: List[Worker]) -> None:
    """Start every worker from a thread of its own (``ENV_VAR_PARALLEL_START``), moving those started to
    ``workers`` in index order; the first error is raised once every start has returned."""
    with ThreadPoolExecutor(max_workers=len(unstarted), thread_name_prefix="nbmp-start") as threads:
        starts = [threads.submit(one.worker.process.start) for one in unstarted]
    error: Optional[BaseException] = None
    for one, start in zip(list(unstarted), starts):
        for end in one.ends:
            end.close()  # the child has its copies (or never will)
        one.ends = []
        failed = start.exception()
        if failed is None:
            unstarted.remove(one)
            workers.append(one.worker)
        elif error is None:
            error = failed
    if error is not None:
        raise error


@dataclass
class _Unstarted:
    """A worker made but not started: its record, its job, and the child's ends of its pipes
    (the parent closes its copies once the child has them)."""

    worker: Worker
    job: Job
    ends: List[connection.Connection]


def _make_one(ctx: Any, fn: Callable[..., Any], args: Tuple[Any, ...], i: int, nprocs: int, daemon: bool,
              output: str) -> _Unstarted:
    """Worker ``i``'s pipes and process object, not started."""
    # Pipes, as the standard module's: a sandbox that refuses sockets runs them. The second carries the parent's receipt.
    (result_r, result_w), (receipt_r, receipt_w) = connection.Pipe(duplex=False), connection.Pipe(duplex=False)
    pipes = [os.pipe() for _ in range(2 if output != "inherit" else 0)]
    # Write ends as connections: they cross to spawn/forkserver children as fds.
    ends: List[Optional[connection.Connection]] = [connection.Connection(w, readable=False) for _, w in pipes] or [None, None]
    job = Job(fn, args, i, result_w, receipt_r, ends[0], ends[1])
    process = ctx.Process(target=run, args=(job,), daemon=daemon)
    process.launch = stamp(Launch(index=i, nprocs=nprocs, worker=True))  # ignores SIGINT from its start, dies with us
    worker = Worker(i, process, result_r, receipt_w, {r: stream for (r, _), stream in zip(pipes, ("stdout", "stderr"))})
    return _Unstarted(worker, job, [end for end in [result_w, receipt_r, *ends] if end is not None])


_prepared = False


def _prepare_parent() -> None:
    # The first pickling initialises cloudpickle's and nbmp's state, once here, not in every forked worker.
    global _prepared
    if not _prepared:
        _pickling.dumps(("ok", None))
        _prepared = True


def _abandon(workers: List[Worker], unstarted: List[_Unstarted]) -> None:
    """Interrupted while starting: stop what started, close what was opened."""
    for worker in workers:
        worker.process.kill()
        worker.process.join()
        worker.process.close()  # its sentinel's pipes now, not when a traceback that holds it goes
    for one in unstarted:
        for end in one.ends:
            end.close()
    for worker in workers + [one.worker for one in unstarted]:
        worker.result_pipe.close()
        worker.receipt_pipe.close()
        for fd in worker.output_pipes:
            os.close(fd)
