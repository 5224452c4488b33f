"""The bottom layer: the records every other layer shares.

``events``: what workers report to the parent (the dashboard, the text renderer and
the exceptions all read these records; ``WorkerExited`` is the one record of a worker's
end); ``ends``: what an end means in words (signal names, likely causes);
``exceptions``: nbmp's root error ``NbmpError`` and how a spawn worker's end is raised. ``util``: small helpers every layer uses; ``checks``: argument checks and the bound on
worker counts. Nothing here imports
another part of nbmp.
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
