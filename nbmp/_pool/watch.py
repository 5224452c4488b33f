"""How a Pool notices dead workers and fails the calls that waited on them.

The stdlib forgets the task a dead worker held (python/cpython#96062); docs/pool.md describes
the slot, the watcher thread and what a death costs the Pool. The watcher's notice goes on the
Pool's own result queue after the death, so every result the dead worker sent is read first,
and the stdlib's result thread handles it (:meth:`Watch.handle`): no result completes twice.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.pool import RUN, TERMINATE, IMapIterator, IMapUnorderedIterator, MapResult
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .._backend import daemons as _daemons, interrupts as _interrupts, pickling as _pickling, posix as _posix
from .._backend.main_module import MainObjects
from .._backend.popen_fork import PeakMemory, peak_rss
from .._backend.posix import WakeUp
from .._base import WorkerExited
from .._forking import Launch, stamp
from .errors import WorkerLostError, lost_error
from .frames import FrameReader, StreamCut
from .worker import Slot, timed, worker
from .worker import DECODING, IDLE, INDEX, INIT, JOB, PHASE, RECEIVING, RUNNING, SENDING, SENT, WAITING, Notice

__all__ = ["Watch", "WATCHES", "watch_of", "drain", "release_lock"]

# Each Pool's task queue -> its Watch, for the stdlib's terminate steps (class methods given the
# queues, not the Pool). Held weakly both ways: the Watch holds the queue.
WATCHES: "weakref.WeakKeyDictionary[Any, weakref.ref[Watch]]" = weakref.WeakKeyDictionary()
# The phases in which a worker holds nothing a terminate waits on: no task, no result being
# written, at most the task queue's read lock (which a terminate with nothing queued never takes).
_HOLDS_NOTHING = frozenset((IDLE, INIT, WAITING))

TICK = 0.25  # seconds between memory samples; deaths are seen at once (sentinels)

_KEEP_STAYS = "The Pool replaced the worker and stays usable."
_CLOSED = "Every pending call failed and the Pool was closed: create a new Pool."


@dataclass
class _Worker:
    proc: Any  # Any: the stdlib Pool's process object, whose private _popen is read here
    slot: Any
    index: int
    rss: Optional[int] = None

    def sentinel(self) -> Optional[int]:
        try:
            return self.proc.sentinel  # type: ignore[no-any-return]  # proc: Any (see _Worker)
        except ValueError:  # not started yet
            return None

    def sample_rss(self) -> None:
        """Sample the worker's memory, where its reaping will not tell its peak (forkserver:
        nbmp's fork and spawn ``Popen`` reap with ``wait4``, see ``peak_rss``)."""
        pid = self.proc.pid
        if pid is not None and not isinstance(self.proc._popen, PeakMemory):
            self.rss = _posix.resident_bytes(pid) or self.rss


class Watch:
    """Per-Pool state shared by its worker factory, its watcher thread and its result reader."""

    def __init__(self, nprocs: int, start_method: str) -> None:
        self.nprocs, self.start_method = nprocs, start_method
        self.lock = threading.Lock()
        self.workers: List[_Worker] = []
        self.names: Dict[int, str] = {}  # job id -> "map(square)", for messages
        self.lengths: Dict[int, int] = {}  # job id -> a map's number of items
        self.broken: Optional[str] = None
        self.broken_error: Optional[BaseException] = None
        self.start_deaths = 0
        self.deaths = 0  # workers the watcher has seen dead
        self.quiet = False  # its terminate found nothing in flight (see settled)
        self.cache: Any = None  # the stdlib's private _PoolCache (typeshed omits it)
        self.outqueue: Any = None
        self.inqueue: Any = None
        self._pool: Callable[[], Any] = lambda: None
        self._thread: Optional[threading.Thread] = None
        self._helpers: List[threading.Thread] = []  # the late-results reader and a cut stream's drain
        self._stopping = False
        self._wakeup: Optional[WakeUp] = None  # stop() wakes the watcher thread through it
        self._starting = threading.Lock()  # the watcher thread is started once, never after stop()
        self._wanted = False  # a replacement was made before start(): watch from the start
        self.populated = False  # the Pool's first workers are made: each one made after replaces one that ended
        # (job, index) -> what gives back the single-use parts (shared-memory tickets) the
        # task's pickle carries, until its result arrives; called if the Pool is terminated.
        self.unread: Dict[Tuple[int, int], List[Callable[[], None]]] = {}
        self.listeners: Dict[int, Callable[[WorkerExited], None]] = {}  # job -> see listening()
        self.sentinel_read = False  # the result thread has read the stdlib's end-of-results (see reader)
        self.stream_cut = False  # a result could not be read: nothing more is (see reader)
        self._get: Optional[Callable[[], Any]] = None  # the reader (see reader)
        self.frames: Optional[FrameReader] = None  # what the reader reads with
        self._reading_late = False  # see read_late_results
        # The __main__ functions and classes every worker inherited (a fork context's Pool):
        # tasks name them by reference, as the standard Pool does (see _backend.main_module).
        self.inherited: Optional[MainObjects] = None

    # -- the worker factory's side ------------------------------------------------

    def make_worker(self, ctx: Any, *args: Any, **kwds: Any) -> Any:
        """Make a worker running nbmp's worker loop with a fresh slot (a dead worker's index goes to its
        replacement), called by the stdlib as ``Process(ctx, target=worker, args=(...))``."""
        slot = Slot()
        slot.view[PHASE] = INIT  # until the worker says otherwise: a child that dies starting up counts
        kwds["target"] = worker
        sigterm: Tuple[Any, ...] = ()  # a spawned worker has inherited no handler (see worker)
        if ctx.get_start_method() == "fork":
            if self.inherited is None:
                self.inherited = MainObjects()
            self.inherited.record(sys._getframe(1))  # just before its fork: the stdlib starts it next
            sigterm = (_interrupts.program_handler(signal.SIGTERM),)  # not a shielded start's recorder
        kwds["args"] = (*kwds.get("args", ()), slot, self.inherited, sigterm)
        proc = ctx.Process(*args, **kwds)
        with self.lock:
            used = {w.index for w in self.workers if _returncode(w.proc) is None}
            index = next(i for i in range(len(self.workers) + 1) if i not in used)
            # a worker: ignores SIGINT from its start, dies with the Pool's process
            proc.launch = stamp(Launch(index=index, nprocs=self.nprocs, worker=True))  # now: see stamp
            self.workers.append(_Worker(proc, slot, index))
        if self.populated:  # a worker ended (the stdlib's thread reaped it): what did it hold?
            self.watch_now()
        return proc

    def name(self, job: int, what: str, func: Any, length: Optional[int] = None) -> None:
        """Remember which call a job is, for error messages."""
        if len(self.names) > 4096:
            for old in list(self.names)[:2048]:
                self.names.pop(old, None)
                self.lengths.pop(old, None)
        self.names[job] = f"{what}({getattr(func, '__qualname__', None) or type(func).__name__})"
        if length is not None:
            self.lengths[job] = length

    def start(self, pool: Any) -> None:
        """The Pool's workers and threads run: start the watcher now where it samples the workers'
        memory (``_Worker.sample_rss``), else at the first replacement or :meth:`watch_now`."""
        self._pool = weakref.ref(pool)  # never keep the Pool alive: its finalizer ends the workers
        if self._wanted or self.start_method != "fork":
            self.watch_now()

    def watch_now(self) -> None:
        """Start the watcher thread unless it runs, has run, or the Pool is not started yet (then :meth:`start` does)."""
        with self._starting:
            self._wanted = True
            if self._thread is not None or self._stopping or self._pool() is None:
                return
            self._wakeup = WakeUp()
            self._thread = _daemons.start(self._run, name="nbmp-pool-watcher")

    def stop(self, wait: bool = True) -> None:
        """End the watcher thread now and, with ``wait``, wait for it and for the helpers, which end
        with the workers (the Pool was terminated or joined)."""
        with self._starting:
            first, self._stopping = not self._stopping, True
            thread = self._thread
        if first and self._wakeup is not None:
            self._wakeup.set()
        for helper in [thread, *self._helpers] if wait else []:
            if helper is not None and helper is not threading.current_thread():
                helper.join(timeout=5.0)

    def settled(self, taskqueue: Any) -> bool:
        """Whether the Pool has nothing in flight (no pending call, nothing queued or unread, no death,
        no cut stream, every worker idle), so its terminate needs no ``_unblock_threads``."""
        if self.cache or self.unread or self.deaths or self.broken is not None or self.stream_cut or self.inqueue is None or self.outqueue is None:
            return False
        try:
            if not taskqueue.empty() or self.inqueue._reader.poll():
                return False
        except (OSError, ValueError, AttributeError):  # a queue closed meanwhile, or a stand-in's: the careful way
            return False
        with self.lock:
            workers = list(self.workers)
        return all(w.slot.view[PHASE] in _HOLDS_NOTHING for w in workers)

    def _live_pool(self) -> Any:
        """The Pool, unless it is gone or being terminated (by its finalizer too, at the interpreter's
        exit, while its state still says it runs)."""
        pool = self._pool()
        return None if pool is None or TERMINATE in (pool._state, pool._worker_handler._state) else pool

    # -- the watcher thread --------------------------------------------------------

    def _watching(self) -> bool:
        if self._stopping:
            return False
        pool = self._live_pool()  # after close(): until the last worker and call are gone
        return pool is not None and (pool._state == RUN or bool(self.workers) or bool(self.cache))

    def _run(self) -> None:
        wakeup = self._wakeup
        assert wakeup is not None  # made by start()
        try:
            self._watch_workers(wakeup.fileno())
        finally:
            wakeup.close()

    def _watch_workers(self, woken: int) -> None:
        unreaped, timeout = 0, 0.0  # the first look at once: a death may be why it started
        sample = False  # not at the start: the first TICK of a Pool is its busiest moment
        while self._watching():
            with self.lock:
                workers = list(self.workers)
            if sample:
                for w in workers:
                    w.sample_rss()
            sentinels = [s for s in (w.sentinel() for w in workers) if s is not None]
            ready = [s for s in wait([*sentinels, woken], timeout=timeout) if s != woken]
            sample, timeout = timeout > 0, TICK
            if self._stopping:
                return
            # The exit code the stdlib's reaper stored: under forkserver a second poller reads 255.
            unreaped = unreaped + 1 if ready else 0
            reaped = False
            for w in workers:
                code = w.proc.exitcode if unreaped > 50 else _returncode(w.proc)
                if code is None:
                    continue
                with self.lock:
                    self.workers.remove(w)
                self.deaths += 1
                self._report(w, code)
                reaped = True
            if ready and not reaped:  # not reaped yet by the stdlib's thread: look again soon
                wait([woken], timeout=0.01)  # or at once, if stop() is waiting for us

    def _report(self, w: _Worker, code: int) -> None:
        phase = w.slot.view[PHASE]
        if self._live_pool() is None:
            return  # the Pool is being terminated on purpose
        self._free_locks(phase, code)
        if phase in (IDLE, WAITING, SENT):
            return  # nothing was lost
        if phase == INIT and code < 0:
            # Killed while starting: no task was held. Only a repeated start-up death (a crashing initializer) makes the Pool unusable.
            self.start_deaths += 1
            if self.start_deaths < 3:
                return
        kind = {RUNNING: "lost", SENDING: "lost", DECODING: "lost-unknown"}.get(phase, "broken")
        end = WorkerExited(0, w.index, code, pid=w.proc.pid or 0, rss=peak_rss(w.proc) or w.rss)
        notice = Notice(kind, w.slot.view[JOB], w.slot.view[INDEX], (end, phase))
        if phase == SENDING and self._keeps_result_lock():
            self.frames.hand_over(notice)  # type: ignore[union-attr]  # see _keeps_result_lock
        else:
            self._post(notice)

    def _keeps_result_lock(self) -> bool:
        """Whether a worker that died writing a result leaves the result lock taken, for the
        reader to give back once it has settled what the death left in the pipe (see frames)."""
        return self.frames is not None and self.outqueue is not None

    def _free_locks(self, phase: int, code: int) -> None:
        """Free the queue locks a dead worker held (a Lock has no owner). WAITING and SENDING say it held
        one; a phase stored just before taking a lock (IDLE: the task lock; RUNNING, INIT, DECODING:
        the result lock) or just after giving it back (SENT) counts only if the lock stays taken
        while no live worker says it holds it."""
        if self.inqueue is None or self.outqueue is None:  # the Pool let its queues go: joined
            return
        rlock, wlock = self.inqueue._rlock, self.outqueue._wlock
        if phase == WAITING:
            release_lock(rlock)
        elif phase == IDLE and code < 0:
            self._free_if_orphaned(rlock, (WAITING, RECEIVING))
        if phase == SENDING:
            if not self._keeps_result_lock():  # else given back by the reader (see _report)
                release_lock(wlock)
        elif phase in (SENT, RUNNING, INIT, DECODING) and code < 0:
            self._free_if_orphaned(wlock, (SENDING, SENT))

    def _free_if_orphaned(self, lock: Any, holding: Tuple[int, ...], grace: float = 1.0) -> None:
        """Release ``lock`` if it stays taken for ``grace`` seconds while no live worker's phase is one of ``holding``."""
        deadline = time.monotonic() + grace
        while True:
            if lock.acquire(False):  # free: not the dead one's
                lock.release()
                return
            with self.lock:
                live = list(self.workers)
            if any(w.slot.view[PHASE] in holding for w in live):
                return  # a live worker holds it
            if time.monotonic() > deadline or self._stopping:
                break
            time.sleep(0.005)  # a live worker that just took it says so within microseconds
        if not self._stopping:
            release_lock(lock)

    def _post(self, notice: Notice) -> None:
        """Put ``notice`` behind everything the dead worker sent (same queue, same order)."""
        data = _pickling.dumps(notice)
        wlock = self.outqueue._wlock
        if wlock.acquire(timeout=2.0):
            try:
                self.outqueue._writer.send_bytes(data)
            finally:
                wlock.release()
        else:  # the dead worker holds the lock mid-write: the result thread is stuck, act here
            self.handle(notice)

    # -- the result thread's side ---------------------------------------------------

    def sender(self, connection: Any) -> Callable[[Any], None]:
        """The task queue's ``send`` on ``connection``: remember the tickets each task carries until its result."""
        send = connection.send

        def put(task: Any) -> None:
            if task is not None:
                call = self.cache.get(task[0])
                if call is None or call.__class__ is _Remainder:  # its call failed already: not sent
                    if call is not None:
                        call.done()
                    return
            with _pickling.collecting_single_use() as releases, _pickling.sending_to(self.inherited):
                send(task)
            if releases and task is not None:
                self.unread[(task[0], task[1])] = releases
        return put

    def release_unread(self) -> None:
        """The Pool was terminated and its workers are dead: the tasks whose results never came
        will not be read by anyone, so give back the shared memory their pickles held."""
        unread, self.unread = self.unread, {}
        for releases in unread.values():
            for release in releases:
                release()

    def reader(self, conn: Any) -> Callable[[], Any]:
        """The result queue's ``get``: notices are handled here, results pass through. After a notice it
        reads on, unless the stdlib's sentinel came, no call waits and nothing is queued: then it
        returns None (past its sentinel the result thread drains one ``get`` per ``poll``, and
        waiting there hung ``join``)."""
        wlock = None if self.outqueue is None else self.outqueue._wlock  # None: the Pool was joined
        self.frames = frames = FrameReader(conn, lambda: None if wlock is None else release_lock(wlock))
        conn.poll = frames.poll  # what the stdlib's result thread asks: messages buffered here count
        recv, poll = frames.recv, frames.poll

        def get() -> Any:
            while True:
                if self.stream_cut:  # never read a cut stream again: its framing asks for gigabytes
                    return None
                try:
                    message = recv()
                except (OSError, EOFError):
                    raise
                except Exception as exc:  # a cut message: the stream cannot be trusted any more
                    self.stream_cut = frames.cut = True
                    self._helpers.append(_daemons.start(self._drain_cut_stream, name="nbmp-pool-drain"))
                    if isinstance(exc, StreamCut) and exc.notice is not None:  # the dead writer's own call first
                        self.handle(exc.notice)
                    self.handle(Notice("unreadable", payload=exc))
                    return None  # the stdlib's sentinel: the result thread stops
                if message.__class__ is not Notice:
                    if message is None:
                        self.sentinel_read = True
                        return None
                    if self.unread:
                        self.unread.pop((message[0], message[1]), None)  # its task was read
                    return timed(message)
                try:
                    self.handle(message)
                except Exception:  # never let a report kill the Pool's result thread
                    traceback.print_exc()
                if self.sentinel_read and not self.cache and not poll():
                    return None
        self._get = get
        return get

    def drop_reader(self) -> None:
        """The Pool let its queues go: so does the reader (the pipe, and the result lock it
        would give back; under spawn a lock is a named semaphore in /dev/shm while it lives)."""
        frames, self.frames, self._get = self.frames, None, None
        if frames is not None:
            vars(frames.conn).pop("poll", None)  # the connection held the reader, which holds it

    def read_late_results(self, result_thread: threading.Thread) -> None:
        """The Pool was closed: once its result thread ends, read what its workers still write until
        they are gone (a result bigger than the pipe would block ``join``); loaded, not read as bytes,
        since only loading gives a result's shared memory back."""
        if self._reading_late or self._get is None or self.outqueue is None:
            return
        self._reading_late = True
        self._helpers.append(_daemons.start(self._read_late_results, result_thread, self._get, self.outqueue._reader,
                                            name="nbmp-pool-late-results"))

    def _read_late_results(self, result_thread: threading.Thread, get: Callable[[], Any], reader: Any) -> None:
        result_thread.join()  # never two readers at once

        def writers() -> List[int]:  # the live workers' sentinels; none once terminated or cut (see _drain_cut_stream)
            pool = self._live_pool()
            sentinels = [] if pool is None or self.stream_cut else [p.sentinel for p in list(pool._pool) if p.pid is not None]
            ended = wait(sentinels, timeout=0)
            return [s for s in sentinels if s not in ended]
        with contextlib.suppress(OSError, EOFError, ValueError):  # the Pool let its queues go meanwhile
            while live := writers():
                if reader in wait([reader, *live], timeout=0.05):  # the last exit wakes it: join waits for it
                    get()  # nobody waits for it: loaded and dropped

    def _drain_cut_stream(self) -> None:
        """The result stream is cut, but live workers still write, holding its lock (which terminate
        waits for) while the pipe is full: read it away until the workers are gone."""
        def workers_may_write() -> bool:
            pool = self._pool()
            return pool is not None and not ((pool._state == TERMINATE or self._stopping) and  # stop(): joined
                                             all(p.exitcode is not None for p in list(pool._pool)))
        drain(self.outqueue._reader, workers_may_write)

    def handle(self, notice: Notice) -> None:
        """Fail the call(s) a notice concerns."""
        if notice.kind == "lost":
            end, phase = notice.payload
            self._tell(notice.job, end)
            result = self.cache.get(notice.job)
            if result is not None:
                verb = "while sending the result of" if phase == SENDING else "while running"
                doing = f"{verb} {self._describe(result, notice.job, notice.index)}"
                _fail(result, notice.index, lost_error(end, doing, _KEEP_STAYS))
        elif notice.kind == "lost-unknown":
            end, _ = notice.payload
            self._tell(None, end)
            self._fail_all(lost_error(end, "while reading its next task (which call it was for is unknown)",
                                      "Every pending call failed; the Pool stays usable."))
        elif notice.kind == "bad-task":
            self._fail_all(notice.payload)
        else:  # "broken" (a queue lock may be held by the dead), "init-failed" or "unreadable"
            self._break(notice)

    def _break(self, notice: Notice) -> None:
        if notice.kind == "init-failed":
            error: BaseException = notice.payload
            self.broken = f"its initializer raised {type(error).__name__}: {error}"
        elif notice.kind == "unreadable":
            self.broken = (str(notice.payload) if isinstance(notice.payload, StreamCut) else
                           f"a result could not be read ({notice.payload!r}), after a worker died mid-write")
            error = WorkerLostError(f"the Pool's result stream broke: {self.broken}. {_CLOSED}")
        else:
            end, phase = notice.payload
            self._tell(None, end)
            doing = ("while starting (loading its target under spawn, or running the initializer)"
                     if phase == INIT else
                     "while reading a task (the task stream may be cut mid-message)")
            error = lost_error(end, doing, _CLOSED)
            self.broken = f"a worker died {doing}"
        self.broken_error = error
        pool = self._live_pool()
        if pool is not None:  # closed first: a caller woken by the failures below must find it closed
            pool.close()
        self._fail_all(error)
        for call in list(self.cache.values()):  # nothing more of a broken Pool's is waited for
            if call.__class__ is _Remainder:
                call.drop()

    @contextlib.contextmanager
    def listening(self, job: int, listener: Callable[[WorkerExited], None]) -> Iterator[None]:
        """While in the block, call ``listener`` with the end of every worker that dies holding
        a task of ``job`` (or a task nobody can name). A blocking map's dashboard listens."""
        self.listeners[job] = listener
        try:
            yield
        finally:
            self.listeners.pop(job, None)

    def _tell(self, job: Optional[int], end: WorkerExited) -> None:
        everyone = job is None  # a death no one call can be blamed for concerns every listener
        for listened, listener in list(self.listeners.items()):
            if everyone or listened == job:
                listener(end)

    def _fail_all(self, error: BaseException) -> None:
        for job, result in list(self.cache.items()):
            _fail(result, getattr(result, "_index", 0), error)

    def _describe(self, result: Any, job: int, i: int) -> str:
        what = self.names.get(job) or _KINDS.get(type(result), "an apply_async call")
        chunksize = result._chunksize if isinstance(result, MapResult) else 1  # type: ignore[attr-defined]  # stdlib private
        if chunksize > 1:
            first = i * chunksize
            last = min(first + chunksize, self.lengths.get(job, first + 1)) - 1
            return f"task {i} of {what} (items {first} to {last})"
        return f"item {i} of {what}" if isinstance(result, (MapResult, IMapIterator)) else what


_KINDS = {MapResult: "a map", IMapIterator: "an imap", IMapUnorderedIterator: "an imap_unordered"}


def _returncode(proc: Any) -> Optional[int]:
    """The exit code already collected for ``proc``, without waiting or polling."""
    popen = getattr(proc, "_popen", None)  # a stand-in process (a test's) has none: taken as running
    return None if popen is None else popen.returncode


def watch_of(inqueue: Any) -> Optional[Watch]:
    ref = WATCHES.get(inqueue)
    return None if ref is None else ref()


def drain(reader: Any, going: Callable[[], bool]) -> None:
    """Read a queue's pipe away as bytes while ``going()``, until end of file: bytes, not
    messages, since a stream a dead worker cut mid-message has no framing left."""
    try:
        while going():
            if reader.poll(0.05) and _posix.read_nowait(reader.fileno(), 1 << 20) == b"":
                return  # end of file: every writer is gone
    except (OSError, ValueError):  # closed meanwhile
        return


def release_lock(lock: Any) -> None:
    """Release ``lock`` for a holder that cannot (a dead worker); already released is no error:
    another thread may have freed it first (the result reader settling a cut message)."""
    with contextlib.suppress(ValueError):  # already released
        lock.release()


def _fail(result: Any, i: int, error: BaseException) -> None:
    """Complete ``result``'s task ``i`` with ``error``; a map fails now, not after its other
    tasks: a :class:`_Remainder` takes its place in the Pool's cache until they are done."""
    left = result._number_left - 1 if isinstance(result, MapResult) else 0  # type: ignore[attr-defined]  # stdlib private
    if left <= 0:
        result._set(i, (False, error))
        return
    cache, job = result._cache, result._job
    result._number_left = 1
    result._cache = {job: result}  # its _set removes it from this dict, not from the Pool's...
    result._set(i, (False, error))
    cache[job] = _Remainder(cache, job, left)  # ...where it is replaced in place: never empty meanwhile


class _Remainder:
    """Stands in the Pool's cache for a map that failed early, until each of its other tasks has
    given a result (read and dropped), died or been skipped unsent, so the stdlib's threads treat
    it as pending (see docs/pool.md)."""

    def __init__(self, cache: Any, job: int, left: int) -> None:
        self.cache, self.job, self.left = cache, job, left
        self.lock = threading.Lock()

    def _set(self, i: int, obj: Any) -> None:  # a result, or a death (see _fail)
        self.done()

    def done(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left != 0:
                return
        self.drop()

    def drop(self) -> None:
        if self.cache.get(self.job) is self:
            with contextlib.suppress(KeyError):
                del self.cache[self.job]  # the stdlib's cache tells its worker thread when it empties

