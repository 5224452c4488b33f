# %% [markdown]
# # When one machine is not enough: nbmp on a Dask cluster
#
# The same `nbmp.spawn`, `nbmp.Pool` and `%%nbmp` run on a Dask cluster when given
# `cluster=` (a `distributed.Client` or a scheduler address). Here the cluster is a
# `LocalCluster` with two worker processes on this machine; on a real cluster only the
# address changes. Needs `pip install 'nbmp[dask]'`.

# %%
import os
import time

import distributed
import nbmp

cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
client = distributed.Client(cluster)
client

# %% [markdown]
# ## spawn: one rank per worker, values by rank, output in this cell
#
# Each rank's prints arrive here while it runs, whole lines prefixed with its rank, from
# `print`, C code or `os.write` alike.

# %%
def greet(rank, who):
    print(f"rank {rank} of {who} on pid {os.getpid()}")
    return rank * 10

nbmp.spawn(greet, args=("the cluster",), nprocs=2, cluster=client)

# %% [markdown]
# ## A failure stops the other ranks and names the one that failed
#
# Rank 0 sleeps for a minute; rank 1 fails at once. The call does not wait for rank 0:
# it is stopped on its worker, and the error carries rank 1's traceback with this
# cell's source lines.

# %%
def fragile(rank):
    if rank == 1:
        raise ValueError("rank 1 gives up")
    time.sleep(60)

start = time.monotonic()
try:
    nbmp.spawn(fragile, nprocs=2, cluster=client, dashboard=False)
except nbmp.ProcessRaisedException as error:
    print(f"after {time.monotonic() - start:.1f} s:", type(error.__cause__).__name__, error.__cause__)
    print("failed rank:", error.error_index)

# %% [markdown]
# ## Shared arrays on the client's host cross as handles
#
# An array in nbmp's shared memory is not copied to workers on this machine: the ranks
# write into the notebook's own pages. On other hosts it is sent by value, once per host.

# %%
grid = nbmp.zeros(4)
nbmp.spawn(lambda rank, a: a.__setitem__(rank, rank + 1), args=(grid,), nprocs=2, cluster=client, dashboard=False)
grid

# %% [markdown]
# ## The Pool API on the cluster
#
# Lambdas and cell functions travel by value; the function is pickled once per map; a
# worker that dies raises `nbmp.WorkerLostError` instead of Dask's silent retries.

# %%
offset = 100
with nbmp.Pool(2, cluster=client) as pool:
    print(pool.map(lambda x: x + offset, range(8), progress=False))
    print(pool.apply_async(pow, (2, 16)).get())

# %% [markdown]
# ## `%%nbmp --cluster` and a default cluster
#
# `nbmp.set_cluster` makes the cluster the default for `spawn`, `Pool`, `parallel_map`
# and `%%nbmp` in this notebook; `cluster=False` runs one call here again.

# %%
%load_ext nbmp
nbmp.set_cluster(client)

# %%
%%nbmp -n 2
f"rank {rank} of {world_size}"

# %%
nbmp.set_cluster(None)
client.close()
cluster.close()
