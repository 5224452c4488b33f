"""nbmp's live worker dashboard (ipywidgets in a notebook, text elsewhere).

The layers, each importable without the next: ``_state`` (plain dataclasses that
events fold into), ``_text`` and ``_html`` (pure renderers), ``_sampler`` (the one
background thread: CPU/RSS sampling and throttled redraws), ``_terminal`` and
``_ipywidgets`` (the views; only the latter imports ipywidgets), ``_dashboard`` (the
event sink), ``_choice`` (which front end). See docs/dashboard.md.
"""

from ._choice import ENV_VAR, check_dashboard, resolve_frontend, set_dashboard
from ._dashboard import Dashboard, make_dashboard
from ._state import DashboardState, ExceptionInfo, RunState, ShmState, WorkerState, read_shm
from ._text import status_line, summary_table

__all__ = ["Dashboard", "make_dashboard", "set_dashboard", "check_dashboard", "resolve_frontend", "ENV_VAR",
           "DashboardState", "RunState", "WorkerState", "ExceptionInfo", "ShmState", "read_shm",
           "status_line", "summary_table"]
