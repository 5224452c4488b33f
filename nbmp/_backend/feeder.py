"""The thread that writes a Queue's items to its pipe.

nbmp's ``Queue.put`` pickles in the caller (cloudpickle, shared-memory tickets), so
what waits in the Queue's buffer is already bytes. The standard feeder thread would
pickle them a second time (a ``ForkingPickler`` built per item, a copy of the bytes)
and ``get`` would unpickle twice; this one sends them as they are. Everything else --
the buffer, the condition, the write lock, closing on the sentinel, a broken pipe at
exit, ``_on_queue_feeder_error`` -- is the standard Queue's, passed in by
``_start_thread`` in the same order.
"""

from __future__ import annotations

import errno
import threading
import weakref
from collections import deque
from multiprocessing import queues, util
from typing import Any, Callable, Optional

__all__ = ["start"]


def start(queue: Any) -> None:
    """``Queue._start_thread`` for a Queue whose buffer holds pickled bytes."""
    queue._buffer.clear()
    queue._thread = threading.Thread(
        target=feed,
        args=(queue._buffer, queue._notempty, queue._send_bytes, queue._wlock, queue._reader.close,
              queue._writer.close, queue._ignore_epipe, queue._on_queue_feeder_error, queue._sem),
        name="QueueFeederThread", daemon=True)  # the standard name: tools and tests look for it
    try:
        queue._thread.start()
    except BaseException:  # e.g. no new threads while the interpreter exits
        queue._thread = None
        raise
    if not queue._joincancelled:
        queue._jointhread = util.Finalize(queue._thread, queues.Queue._finalize_join,  # type: ignore[attr-defined]  # stdlib private
                                          [weakref.ref(queue._thread)], exitpriority=-5)
    # The sentinel that ends the thread once the Queue is closed or collected.
    queue._close = util.Finalize(queue, queues.Queue._finalize_close,  # type: ignore[attr-defined]  # stdlib private
                                 [queue._buffer, queue._notempty], exitpriority=10)


def feed(buffer: "deque[Any]", notempty: threading.Condition, send_bytes: Callable[[bytes], None],
         writelock: Optional[Any], reader_close: Callable[[], None], writer_close: Callable[[], None],
         ignore_epipe: bool, onerror: Callable[[BaseException, Any], None], queue_sem: Any) -> None:
    """Send each buffered item's bytes down the pipe until the sentinel comes."""
    sentinel = queues._sentinel  # type: ignore[attr-defined]  # stdlib private: what _finalize_close appends
    while True:
        data: Any = None
        try:
            with notempty:
                if not buffer:
                    notempty.wait()
            try:
                while True:
                    data = buffer.popleft()
                    if data is sentinel:
                        reader_close()
                        writer_close()
                        return
                    if writelock is None:
                        send_bytes(data)
                    else:
                        with writelock:
                            send_bytes(data)
            except IndexError:  # the buffer is empty: wait for the next put
                pass
        except Exception as error:
            if ignore_epipe and getattr(error, "errno", 0) == errno.EPIPE:
                return
            if util.is_exiting():  # the process is cleaning up: its resources may be gone
                util.info("error in queue thread: %s", error)
                return
            # As the stdlib does: the item counts as removed, and the Queue's hook is told.
            queue_sem.release()
            onerror(error, data)
