"""The client's side of a cluster run's messages: the ranks' Dask events (on the run's
topic), the scheduler's word that a worker was removed (on each worker's own topic) and
the futures' completions, read in one place by one thread."""

from __future__ import annotations

import contextlib
import functools
import queue
import time
from typing import Any, Iterable, List, Optional, Tuple

__all__ = ["Inbox"]

Message = Tuple[Any, ...]
POLL = 0.01  # seconds between looks at the watched futures


class Inbox:
    """``with Inbox(client, topic, workers) as inbox:`` subscribes; ``get`` reads one message:
    ``("rank", [kind, rank, ...])``, ``("lost", address, processing_keys)`` or ``("done", tag, future)``."""

    def __init__(self, client: Any, topic: Optional[str], workers: Iterable[str]) -> None:
        self.client, self.topic, self.workers = client, topic, sorted(set(workers))
        self.queue: "queue.Queue[Message]" = queue.Queue()
        self._subscribed: List[str] = []
        self._watched: List[Tuple[Any, Any]] = []

    def __enter__(self) -> "Inbox":
        if self.topic is not None:
            self._subscribe(self.topic, self._on_rank)
        for address in self.workers:
            self._subscribe(address, functools.partial(self._on_worker, address))
        return self

    def report_gone(self) -> None:
        """Report as lost each of the workers already gone: one removed before we subscribed sent no event."""
        live = self.client.nthreads()  # asked of the scheduler: see connect.worker_hosts
        for address in self.workers:
            if address not in live:
                self.queue.put(("lost", address, []))

    def __exit__(self, *exc: Any) -> None:
        for topic in self._subscribed:
            with contextlib.suppress(ValueError, RuntimeError):  # the client closed meanwhile
                self.client.unsubscribe_topic(topic)

    def _subscribe(self, topic: str, handler: Any) -> None:
        self.client.subscribe_topic(topic, handler)
        self._subscribed.append(topic)

    def _on_rank(self, event: Tuple[float, Any]) -> None:
        self.queue.put(("rank", list(event[1])))

    def _on_worker(self, address: str, event: Tuple[float, Any]) -> None:
        msg = event[1]
        if isinstance(msg, dict) and msg.get("action") == "remove-worker":
            self.queue.put(("lost", address, [str(k) for k in msg.get("processing-tasks", ())]))

    def watch(self, future: Any, tag: Any) -> None:
        # Polled in ``get`` rather than given a done-callback: Dask runs those on a thread of
        # its own that lives as long as the process, and a later fork would inherit it.
        self._watched.append((future, tag))

    def get(self, timeout: float) -> Optional[Message]:
        deadline = time.monotonic() + timeout
        while True:
            for k, (future, tag) in enumerate(self._watched):
                if future.done():
                    del self._watched[k]
                    return ("done", tag, future)
            try:
                return self.queue.get(timeout=min(POLL, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return None
