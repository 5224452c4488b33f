# %% [markdown]
# # The live worker dashboard
#
# `nbmp.spawn`, the Pool's maps and `%%nbmp` cells show a dashboard under the cell while
# the workers run: each worker's pid, state, elapsed time, CPU and memory (sampled by the
# notebook's own process), its recent output, the exception it raised with its traceback,
# and the shared memory in use. When the run ends, the widget gives way to a static
# snapshot that a saved notebook keeps. Read `quickstart` first.

# %%
import time

import nbmp


def work(i):
    t = time.monotonic()
    while time.monotonic() - t < 1.0 + 0.3 * i:  # busy: the CPU column shows ~100 %
        pass
    print(f"worker {i} checked its records")
    if i == 2:
        raise ValueError(f"worker {i} found a bad record")
    return i

# %% [markdown]
# A run whose worker 2 fails: the dashboard shows the others stopped, and the failed
# worker's traceback opens from its row under the table.

# %%
try:
    nbmp.spawn(work, nprocs=4)
except nbmp.ProcessRaisedException as error:
    print("worker", error.error_index, "failed:", error.__cause__)

# %% [markdown]
# A Pool's map shows the same dashboard with `progress=True` (by default, only for a map
# still running after two seconds), with a timeline of the tasks each worker ran.

# %%
with nbmp.Pool(2) as pool:
    print(sum(pool.map(abs, range(-40, 0), chunksize=5, progress=True)))

# %% [markdown]
# Per call, `dashboard=` takes `True`, `False`, `None` (the default), `"auto"`,
# `"widget"`, `"text"` or `"off"`; `nbmp.set_dashboard(...)` or the `NBMP_DASHBOARD`
# environment variable set the default; `nbmp.Dashboard()` makes one by hand that watches
# every later run. Nothing keeps running after a run:

# %%
import threading

print([t.name for t in threading.enumerate() if t.name.startswith("nbmp")])
