# %% [markdown]
# # Fork safety: fork after compute
#
# A forked worker inherits state that is only valid in its parent. nbmp resets it in
# every worker: thread pools, random generators, torch's settings. This notebook shows
# the case that hangs forever with plain `multiprocessing` finishing with nbmp, and
# per-worker seeds that are distinct and reproducible.

# %%
import nbmp

report = nbmp.doctor()
print("hazards:", report.hazards)
display(report)  # threads, thread pools, /dev/shm, versions: this machine's

# %% [markdown]
# ## torch: a parallel matmul in the parent, then workers
#
# The parent runs a 600×600 matmul on 2 threads, so GNU OpenMP's thread team is running.
# With plain `multiprocessing` (fork), each child's matmul then hangs forever. nbmp sets
# torch's threads in the child before anything runs, so the workers finish.

# %%
try:
    import torch
except ImportError:
    torch = None
    print("torch is not installed: skipping this cell")

if torch is not None:
    torch.set_num_threads(2)
    a = torch.randn(600, 600)
    (a @ a).sum()

    q = nbmp.Queue()

    def child(q, k):
        b = torch.randn(600, 600)
        q.put((k, torch.get_num_threads(), round(float((b @ b).abs().sum()), 1) > 0))

    workers = [nbmp.Process(target=child, args=(q, k)) for k in range(2)]
    for w in workers:
        w.start()
    print(sorted(q.get(timeout=60) for _ in workers))
    for w in workers:
        w.join()
    print("exit codes", [w.exitcode for w in workers])

# %% [markdown]
# ## Seeds: distinct across workers, reproducible with `nbmp.seed`

# %%
import random

import numpy as np


def draws(q, k):
    q.put((k, [round(random.random(), 4), round(float(np.random.rand()), 4)]))  # torch's generator too


def run(method):
    ctx = nbmp.get_context(method)
    q = ctx.Queue()
    procs = [ctx.Process(target=draws, args=(q, k)) for k in range(3)]
    for p in procs:
        p.start()
    out = dict(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join()
    return [out[k] for k in range(3)]


nbmp.seed(1234)
first = run("fork")
nbmp.seed(1234)
again = run("fork")
print("worker draws:", first)
print("distinct across workers:", all(len(set(col)) == 3 for col in zip(*first)))
print("reproducible after nbmp.seed(1234):", first == again)

# %% [markdown]
# The same seed gives the same draws under every start method:

# %%
nbmp.seed(1234)
print("spawn matches fork:", run("spawn") == first)
nbmp.seed(None)
