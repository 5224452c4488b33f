"""The bottom layer: the records every other layer shares.

Its modules are listed in docs/design.md ("Layers"); nothing here imports another part of nbmp.
"""

from . import checks, ends, events, exceptions, util
from .events import (Broadcast, Event, EventSink, RunFinished, RunStarted, TaskProgress, WorkerExited, WorkerOutput,
                     WorkerRaised, WorkerStarted, WorkerStats, new_run_id)
from .exceptions import (NbmpError, RemoteTaskError, ProcessException, ProcessExitedException, ProcessRaisedException, ProcessStoppedException,
                         exited_error, raised_message, stopped_error)

__all__ = ["checks", "ends", "events", "exceptions", "util",
           "Event", "RunStarted", "WorkerStarted", "WorkerStats", "WorkerOutput", "WorkerRaised", "WorkerExited", "TaskProgress",
           "RunFinished", "EventSink", "Broadcast", "new_run_id",
           "NbmpError", "RemoteTaskError", "ProcessException", "ProcessRaisedException", "ProcessExitedException", "ProcessStoppedException",
           "raised_message", "exited_error", "stopped_error"]
