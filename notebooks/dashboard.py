# %% [markdown]
# # The live worker dashboard
#
# `nbmp.Dashboard` shows what worker processes are doing while the cell runs: each
# worker's pid, state, elapsed time, CPU and memory (sampled by the notebook's own
# process), its recent output, the exception it raised with the traceback, and the shared
# memory in use. `nbmp.spawn` and the Pool show one automatically; a dashboard made by
# hand watches every nbmp run from then on.
#
# Until `spawn` feeds it, this notebook starts a few `nbmp.Process` workers itself and
# hands the dashboard the events spawn sends (`nbmp._base.events`).

# %%
import os
import time
import traceback

import nbmp
from nbmp._base import events as ev


def work(i, q):
    try:
        t = time.monotonic()
        while time.monotonic() - t < 1.0 + 0.3 * i:  # busy: the CPU column shows ~100 %
            pass
        if i == 2:
            raise ValueError(f"worker {i} found a bad record")
    except Exception as e:
        q.put((i, type(e).__name__, str(e), traceback.format_exc()))
        raise SystemExit(1)


def run(sink, nprocs=4, run_id=1):
    """What spawn does for the dashboard: start workers, report what happens to them."""
    q = nbmp.SimpleQueue()
    sink.handle(ev.RunStarted(run_id=run_id, target="work", start_method=nbmp.get_start_method(), nprocs=nprocs))
    procs = [nbmp.Process(target=work, args=(i, q)) for i in range(nprocs)]
    for i, p in enumerate(procs):
        p.start()
        sink.handle(ev.WorkerStarted(run_id=run_id, index=i, pid=p.pid))
    for i, p in enumerate(procs):
        p.join()
        if p.exitcode:
            index, typ, msg, tb = q.get()
            sink.handle(ev.WorkerRaised(run_id=run_id, index=index, exc_type=typ, message=msg, traceback=tb))
        sink.handle(ev.WorkerExited(run_id=run_id, index=i, exitcode=p.exitcode))
    sink.handle(ev.RunFinished(run_id=run_id, ok=all(p.exitcode == 0 for p in procs)))

# %% [markdown]
# Display a dashboard, then run. The widget updates a few times a second while the cell
# is blocked, keeps its final state afterwards, and the failed worker's traceback opens
# from its row under the table.

# %%
d = nbmp.Dashboard()
d.display()
run(d)

# %% [markdown]
# The same state as plain text (what a script or a terminal IPython shows):

# %%
print(d.summary())

# %% [markdown]
# Per call, `dashboard=` takes `True`, `False`, `None` (the default), `"auto"`,
# `"widget"`, `"text"` or `"off"`; `nbmp.set_dashboard(...)` or the `NBMP_DASHBOARD`
# environment variable set the default. Nothing keeps running after a run:

# %%
import threading

d.close()
print([t.name for t in threading.enumerate() if t.name.startswith("nbmp")])
