"""The bottom layer: the records every other layer shares.

``events``: what workers report to the parent (the dashboard, the text renderer and
the exceptions all read these records). ``exceptions``: how a spawn worker's end is
raised in the parent. ``util``: small helpers every layer uses; ``checks``: argument checks and the bound on
worker counts. Nothing here imports
another part of nbmp.
"""

from . import checks, events, exceptions, util
from .events import (Broadcast, Event, EventSink, RunFinished, RunStarted, TaskProgress, WorkerExited, WorkerOutput,
                     WorkerRaised, WorkerStarted, new_run_id)
from .exceptions import (ProcessException, ProcessExitedException, ProcessRaisedException, ProcessStoppedException,
                         exited_error, raised_message, stopped_error)

__all__ = ["checks", "events", "exceptions", "util",
           "Event", "RunStarted", "WorkerStarted", "WorkerOutput", "WorkerRaised", "WorkerExited", "TaskProgress",
           "RunFinished", "EventSink", "Broadcast", "new_run_id",
           "ProcessException", "ProcessRaisedException", "ProcessExitedException", "ProcessStoppedException",
           "raised_message", "exited_error", "stopped_error"]
