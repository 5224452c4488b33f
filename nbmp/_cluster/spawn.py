"""``nbmp.spawn(fn, args, nprocs, cluster=...)``: one rank per Dask worker process, with
the semantics of a run on one machine (ordered values, the first failure stops the
others and is raised as ``ProcessRaisedException`` / ``ProcessExitedException``,
``[rank]``-prefixed output in the calling cell, an interrupt stops every rank).

One thread per run (``_Watch``, like ``nbmp._spawn``'s supervisor) reads the run's
inbox, turns what arrives into ``nbmp._base`` events for the printer and the dashboard,
and stops the other ranks at the first failure, also when nobody is in ``join``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._backend import cells as _cells, pickling as _pickling
from .._backend.posix import INTERRUPT_SLICE, wait_slice
from .._base import (Broadcast, EventSink, ProcessException, ProcessExitedException, ProcessRaisedException,
                     RunFinished, RunStarted, WorkerExited, WorkerOutput, WorkerRaised, WorkerStarted, WorkerStats,
                     exited_error, new_run_id, raised_message, stopped_error, util as _util)
from .._forking import registry as _registry
from .._spawn.args import check_arguments
from .._spawn.output import StreamPrinter
from ..widgets import make_dashboard
from . import connect, payload, placement, tasks
from .inbox import Inbox
from .rank import RankJob, RankOutcome, dumps_or_none, run_rank, topic_of

__all__ = ["spawn_on_cluster", "ClusterContext"]

DEFAULT_GRACE_PERIOD = 3.0
# After a stop, a rank whose task has not ended within grace + this is restarted with its worker.
CANCEL_SLACK = 5.0
# How long a rank whose task has finished may take to deliver its last output (its messages and
# its task's end travel apart, and the messages may come later): past it, the rank counts as ended.
END_WAIT = 30.0


class ClusterContext:
    """The ranks of a ``spawn(..., cluster=..., join=False)`` run (``ProcessContext``'s API)."""

    def __init__(self, watch: "_Watch") -> None:
        self._watch = watch

    @property
    def processes(self) -> List[Any]:
        """Empty: no process of this machine; the ranks run on the cluster's workers (see ``workers``)."""
        return []

    def pids(self) -> List[int]:
        """The ranks' process ids on their hosts (0 until a rank has started)."""
        return [self._watch.pids.get(r, 0) for r in range(self._watch.nprocs)]

    @property
    def workers(self) -> List[str]:
        """The address of the Dask worker each rank runs on."""
        return list(self._watch.addresses)

    @property
    def results(self) -> Optional[List[Any]]:
        watch = self._watch
        if not watch.done.is_set() or watch.error is not None:
            return None
        return [_pickling.loads(watch.outcomes[r].value) for r in range(watch.nprocs)]  # type: ignore[arg-type]  # "ok" outcomes hold a value

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` seconds; True once every rank returned; raises as ``ProcessContext.join``."""
        watch = self._watch
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not wait_slice(watch.done.wait, INTERRUPT_SLICE if deadline is None
                                 else max(0.0, min(INTERRUPT_SLICE, deadline - time.monotonic()))):
                if deadline is not None and time.monotonic() >= deadline:
                    return False
        except KeyboardInterrupt:
            watch.interrupt()
            raise
        watch.thread.join()  # past its last step: no nbmp thread outlives the call that waited
        if watch.error is not None:
            raise watch.error
        return True

    def __repr__(self) -> str:
        state = "done" if self._watch.done.is_set() else "running"
        return f"<nbmp.ClusterContext run {self._watch.run_id}: {self._watch.nprocs} ranks on Dask, {state}>"


def spawn_on_cluster(fn: Callable[..., Any], args: Sequence[Any] = (), nprocs: int = 1, join: bool = True,
                     daemon: bool = False, start_method: Optional[str] = None, *, cluster: Any = None,
                     output: str = "prefix", grace_period: float = DEFAULT_GRACE_PERIOD, dashboard: Any = None,
                     sinks: Sequence[EventSink] = ()) -> Any:
    """Run ``fn(rank, *args)`` on ``nprocs`` Dask workers; see ``nbmp.spawn``."""
    if output == "inherit":
        raise ValueError("output='inherit' has no meaning on a cluster (the workers' stdout is on their hosts); "
                         "use output='prefix' (default), 'raw' or 'none'")
    _, args, nprocs = check_arguments(fn, args, nprocs, start_method, output, grace_period, sinks)
    _pickling.check_picklable((fn, args), {"fn": fn, **{f"args[{k}]": a for k, a in enumerate(args)}}, "send it to the Dask cluster")
    client = connect.client_for(cluster)
    workers = placement.ranks_to_workers(client, nprocs)
    watch = _Watch(client, fn, args, nprocs, workers, output, grace_period, dashboard, sinks)
    watch.start()
    context = ClusterContext(watch)
    if not join:
        return context
    while not context.join():
        pass
    return context.results


class _Watch:
    """Submits the ranks and watches them from a daemon thread (see the module docstring)."""

    def __init__(self, client: Any, fn: Callable[..., Any], args: Sequence[Any], nprocs: int,
                 workers: List[Tuple[str, str]], output: str, grace_period: float, dashboard: Any,
                 sinks: Sequence[EventSink]) -> None:
        self.client, self.fn, self.args, self.nprocs = client, fn, args, nprocs
        self.workers, self.addresses = workers, [address for _, address in workers]
        self.grace_period = grace_period
        self.run_id = new_run_id()
        self.key = f"{self.run_id}-{time.time_ns():x}"
        self.board = make_dashboard(dashboard, stop=self.stop_by_user)
        printers: List[EventSink] = [StreamPrinter(prefix=output == "prefix")] if output in ("prefix", "raw") else []
        self.events = Broadcast([*printers, *sinks, self.board])
        self.pids: Dict[int, int] = {}
        self.outcomes: Dict[int, RankOutcome] = {}
        self.ended: set[int] = set()  # ranks whose outcome and output are both in
        self.end_seen: set[int] = set()  # ranks whose "end" (after their last line) has come
        self.end_due: Dict[int, float] = {}  # ranks done but whose "end" has not come: until when we wait
        self.futures: Dict[int, Any] = {}
        self.error: Optional[BaseException] = None
        self.stopping_since: Optional[float] = None
        self.interrupted = self.stopped = False
        self.done = threading.Event()

    # -- from the caller's thread -------------------------------------------------------------

    def start(self) -> None:
        self.events.handle(RunStarted(self.run_id, _util.name_of(self.fn), "dask", self.nprocs))
        inbox = Inbox(self.client, topic_of(self.key), self.addresses)
        try:
            inbox.__enter__()
            inbox.report_gone()  # a rank pinned to a worker already gone would wait forever
            self._submit(inbox)
        except BaseException:
            inbox.__exit__()
            self.client.cancel(list(self.futures.values()), force=True)
            self.board.close()
            raise
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self._main, inbox),
                                       name=f"nbmp-cluster-{self.run_id}", daemon=True)
        self.thread.start()

    def _submit(self, inbox: Inbox) -> None:
        job = RankJob(self.key, self.nprocs, _registry.fork_settings(), placement.ranks_per_host(self.workers), self.grace_period)
        payloads = payload.payloads(self.client, self.fn, tuple(self.args), self.workers)
        for rank, address in enumerate(self.addresses):
            future = self.client.submit(run_rank, payloads[address], rank, job, key=f"nbmp-{self.key}-rank-{rank}",
                                        workers=[address], allow_other_workers=False, pure=False)
            self.futures[rank] = future
            inbox.watch(future, rank)

    def interrupt(self) -> None:
        """A KeyboardInterrupt in the caller: stop every rank, wait (an interrupt again: stop waiting)."""
        self.interrupted = True
        self._stop()
        with contextlib.suppress(KeyboardInterrupt):
            if self.done.wait(self.grace_period + CANCEL_SLACK + 5.0):
                self.thread.join()

    def stop_by_user(self) -> None:
        """The dashboard's Stop button."""
        if not self.done.is_set():
            self.stopped = True
            self._stop()

    def _stop(self) -> None:
        if self.stopping_since is None:  # the watch thread cancels the ranks' tasks at its next step
            self.stopping_since = time.monotonic()

    # -- the watch thread -----------------------------------------------------------------------

    def _main(self, inbox: Inbox) -> None:
        cancelled = False
        try:
            with inbox:
                while len(self.ended) < self.nprocs:
                    if self.stopping_since is not None and not cancelled:
                        self.client.cancel([f for r, f in self.futures.items() if r not in self.outcomes])
                        cancelled = True
                    message = inbox.get(0.1)
                    if message is not None:
                        self._handle(message)
                    self._flush()
                    self._end_overdue()
                    if self.stopping_since is not None and \
                            time.monotonic() > self.stopping_since + self.grace_period + CANCEL_SLACK:
                        self._restart_stuck()
                        break
        except BaseException as exc:  # a bug here must not leave join() waiting forever
            self.error = exc
        finally:
            self._finish()

    def _handle(self, message: Any) -> None:
        kind = message[0]
        if kind == "rank":
            self._on_rank(message[1])
        elif kind == "done":
            self._on_done(message[1], message[2])
        elif kind == "lost":
            self._on_lost(message[1], message[2])

    def _on_rank(self, msg: List[Any]) -> None:
        what, rank = msg[0], int(msg[1])
        if what == "started":
            self.pids[rank] = int(msg[2])
            self.events.handle(WorkerStarted(self.run_id, rank, int(msg[2]), host=str(msg[3]), worker=str(msg[4])))
        elif what == "out":
            self.events.handle(WorkerOutput(self.run_id, rank, str(msg[2]), str(msg[3]), status=len(msg) > 4 and bool(msg[4])))
        elif what == "stats":
            self.events.handle(WorkerStats(self.run_id, rank, msg[2], msg[3]))
        elif what == "end":
            self.end_seen.add(rank)
            if rank in self.outcomes:
                self.ended.add(rank)

    def _on_done(self, rank: int, future: Any) -> None:
        if future.status == "finished":
            outcome: RankOutcome = future.result()
        elif future.status == "cancelled":
            outcome = RankOutcome("stopped", rank, self.pids.get(rank, 0))
        else:  # nbmp's own task failed (the payload did not load there, say): a raised rank
            exc = future.exception()
            text = "".join(traceback.format_exception(type(exc), exc, future.traceback()))
            outcome = RankOutcome("raised", rank, self.pids.get(rank, 0), exc_type=type(exc).__qualname__,
                                  message=str(exc), traceback=text, pickled=dumps_or_none(exc))
            self.end_seen.add(rank)  # no "end" will come from a task that did not run
        self.outcomes[rank] = outcome
        self._report(outcome)
        # A task that finished ran its rank, which says so (its "started", its lines, its "end")
        # on another channel than the task's end: those may still be on their way.
        started = rank in self.pids or (future.status == "finished" and outcome.pid > 0)
        if rank in self.end_seen or not started:  # a rank that never started sends no "end"
            self.ended.add(rank)
        else:
            self.end_due[rank] = time.monotonic() + END_WAIT

    def _end_overdue(self) -> None:
        """A finished rank whose "end" never came (a lost message) must not hold the run forever."""
        now = time.monotonic()
        for rank, due in list(self.end_due.items()):
            if rank in self.ended or now > due:
                self.ended.add(rank)
                del self.end_due[rank]

    def _on_lost(self, address: str, keys: List[str]) -> None:
        for rank, rank_address in enumerate(self.addresses):
            if rank_address == address and rank not in self.ended:
                outcome = RankOutcome("lost", rank, self.pids.get(rank, 0), message=address)
                self.outcomes[rank] = outcome
                self._report(outcome)
                self.ended.add(rank)

    def _report(self, outcome: RankOutcome) -> None:
        rank = outcome.rank
        if outcome.kind == "raised":
            text = _cells.label_cells(outcome.traceback)
            self.events.handle(WorkerRaised(self.run_id, rank, outcome.exc_type, outcome.message, text))
        code = {"ok": 0, "raised": 1, "exited": outcome.exitcode, "lost": -9}.get(outcome.kind, -15)
        self.events.handle(WorkerExited(self.run_id, rank, code, killed_by_us=outcome.kind == "stopped"))
        if outcome.kind in ("raised", "exited", "lost") and self.error is None and self.stopping_since is None:
            self.error = _error_for(outcome)
            self._stop()

    def _restart_stuck(self) -> None:
        """Restart the workers still executing a rank of this run: nothing else stops a Dask task."""
        stuck = [w for w, keys in self.client.run(tasks.executing, f"nbmp-{self.key}-").items() if keys]
        if stuck:
            self.client.restart_workers(stuck, raise_for_error=False)

    def _flush(self) -> None:
        flush = getattr(self.events.sinks[0], "flush", None) if self.events.sinks else None
        if flush is not None:
            flush()

    def _finish(self) -> None:
        self.client.cancel([f for f in self.futures.values() if not f.done()], force=True)
        self.futures.clear()  # the results are read; the cluster may forget them
        if self.error is None and (self.stopped or self.interrupted):
            finished = [r for r, o in self.outcomes.items() if o.kind == "ok"]
            results = [_pickling.loads(self.outcomes[r].value) if r in finished else None  # type: ignore[arg-type]
                       for r in range(self.nprocs)]
            self.error = stopped_error(results, finished, [self.pids.get(r, 0) for r in range(self.nprocs)]) \
                if self.stopped else KeyboardInterrupt()
        self.events.handle(RunFinished(self.run_id, ok=self.error is None))
        self._flush()
        self.done.set()


def _error_for(outcome: RankOutcome) -> ProcessException:
    rank, pid = outcome.rank, outcome.pid
    if outcome.kind == "exited":
        return exited_error(WorkerExited(0, rank, outcome.exitcode, pid=pid))
    if outcome.kind == "lost":
        return ProcessExitedException(f"process {rank:d} terminated: its Dask worker {outcome.message} was lost "
                                      f"(it died or was removed from the cluster)", rank, pid, -9, "SIGKILL")
    error = ProcessRaisedException(raised_message(rank, _cells.label_cells(outcome.traceback)), rank, pid)
    if outcome.pickled is not None:
        with contextlib.suppress(Exception):  # the message has the whole story anyway
            error.__cause__ = _pickling.loads(outcome.pickled)
    return error
