# %% [markdown]
# # nbmp quickstart
#
# `nbmp` is a drop-in for `multiprocessing` that is made for notebooks: fork is the
# default start method, and lambdas, closures and functions or classes defined in a
# cell work as targets, tasks and payloads under every start method.
#
# The notebooks, in reading order: `quickstart` (this one), `pool`, `sharing`,
# `fork_safety`, `dashboard`, `cluster`, and `hogwild` (needs torch).

# %%
import nbmp as multiprocessing

multiprocessing.get_start_method()

# %% [markdown]
# A lambda in a Pool: the standard module refuses it (`PicklingError`), nbmp runs it.

# %%
with multiprocessing.Pool(2) as pool:
    squares = pool.map(lambda x: x * x, range(8))
print(squares)

# %% [markdown]
# A function defined in this cell, run by a *spawned* worker (a fresh interpreter that
# never saw this notebook): nbmp ships it by value.

# %%
def describe(n):
    return f"{n} handled by {multiprocessing.current_process().name}"


with multiprocessing.get_context("spawn").Pool(2) as pool:
    lines = pool.map(describe, [1, 2])
del pool
print(len(lines), "results from spawned workers")

# %% [markdown]
# Queues and pipes carry lambdas too.

# %%
q = multiprocessing.Queue()
worker = multiprocessing.Process(target=lambda q: q.put(lambda x: x + 100), args=(q,))
worker.start()
add_100 = q.get()
worker.join()
print(add_100(1), "exit code", worker.exitcode)

# %% [markdown]
# ## `nbmp.spawn`: a function in N workers
#
# `fn(i, *args)` runs in `nprocs` processes; the return values come back ordered by `i`.
# Each worker's output is printed as whole lines, prefixed with its index.

# %%
results = multiprocessing.spawn(lambda i, base: print(f"worker {i} ready") or base + i * i, args=(100,), nprocs=4)
print(results)

# %% [markdown]
# ## A shared array
#
# `nbmp.zeros` makes a NumPy array in shared memory: workers write into the parent's
# array, and only a small handle crosses the process boundary.

# %%
shared = multiprocessing.zeros(8)


def fill(i, out):
    out[i::4] = i + 1


multiprocessing.spawn(fill, args=(shared,), nprocs=4)
print(shared)

# %% [markdown]
# ## A cell that runs in workers: `%%nbmp`
#
# `%load_ext nbmp` adds the `%%nbmp` cell magic: the cell body runs in `-n` workers, with
# `rank` and `world_size` defined and the notebook's globals visible; the value of the
# last line comes back per rank.

# %%
%load_ext nbmp

# %%
%%nbmp -n 4
int(shared[rank]) * 10

# %% [markdown]
# ## The live dashboard
#
# In a notebook `spawn` shows a dashboard under the cell while the workers run: one row
# per worker with its pid, state, elapsed time, CPU and memory, and each worker's recent
# output. It keeps its final state after the run. `dashboard=True` asks for it
# explicitly (it is also the default in a notebook; `False` turns it off).

# %%
import time


def train(i, steps):
    for step in range(1, steps + 1):
        time.sleep(0.5)  # stands for real work
        print(f"step {step}/{steps}")
    return f"worker {i}: {steps} steps"


multiprocessing.spawn(train, args=(5,), nprocs=3, dashboard=True)

# %% [markdown]
# A progress bar a worker redraws with `\r` (tqdm's, or `print(..., end="\r")`) is redrawn
# in place under the cell while it runs, every worker's on one line; when it ends, its last
# state stays as an ordinary line.

# %%
import sys


def bar(i, steps=10):
    for k in range(steps + 1):
        print(f"\r{k * 100 // steps:3d}%|{'#' * k}{' ' * (steps - k)}|", end="", file=sys.stderr, flush=True)
        time.sleep(0.2)
    print(file=sys.stderr)
    return k


multiprocessing.spawn(bar, nprocs=2, dashboard=False)

# %% [markdown]
# When a worker raises, the others are stopped and the parent raises
# `nbmp.ProcessRaisedException`, whose message holds the worker's traceback and whose
# `__cause__` is the worker's own exception. Each worker still running is stopped with
# SIGTERM, and torch's warning for it ("Terminating process ... via signal SIGTERM")
# may appear on stderr, as with `torch.multiprocessing`.

# %%
def check(i):
    if i == 2:
        raise ValueError(f"worker {i} found a bad value")
    return i


try:
    multiprocessing.spawn(check, nprocs=4)
except multiprocessing.ProcessRaisedException as error:
    print("worker", error.error_index, "failed with", repr(error.__cause__))
