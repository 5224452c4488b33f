# %% [markdown]
# # Shared arrays: several workers fill one big array, no copies
#
# `nbmp.zeros` makes an ordinary `np.ndarray` whose memory is shared. Sent to a worker
# (a Pool task here), it travels as a small handle: the worker writes straight into the
# notebook's array. Views (row blocks, strided slices) travel as views.

# %%
import time

import numpy as np

import nbmp

image = nbmp.zeros((4096, 4096), dtype="float32")   # 64 MiB, in shared memory
print(type(image).__name__, image.shape, nbmp.is_shared(image), nbmp.get_sharing_strategy())


# %% [markdown]
# Each task fills one horizontal band with a function of its coordinates. The function
# is defined in this cell: nbmp ships it to the workers by value.

# %%
def fill_band(band, top):
    rows = np.arange(top, top + band.shape[0], dtype="float32")[:, None]
    cols = np.arange(band.shape[1], dtype="float32")[None, :]
    band[:] = np.sin(rows / 300) * np.cos(cols / 300)
    return band.__array_interface__["data"][0]        # where the worker wrote


bands = [(image[top:top + 512], top) for top in range(0, 4096, 512)]
start = time.perf_counter()
with nbmp.Pool(2) as pool:
    addresses = pool.starmap(fill_band, bands)
print(f"filled in {time.perf_counter() - start:.2f} s by {len(bands)} tasks")

# %% [markdown]
# The workers wrote into the notebook's memory: the addresses they wrote to are the
# notebook's own, and the whole image is filled.

# %%
print(addresses == [band.__array_interface__["data"][0] for band, _ in bands])
expected = np.sin(np.arange(4096)[:, None] / 300) * np.cos(np.arange(4096)[None, :] / 300)
print("max error:", float(np.abs(image - expected).max()))

# %% [markdown]
# Results come back without copies too: a big array a worker returns is moved into shared
# memory once and mapped here. `nbmp.shm_usage()` shows what is live (the dashboard shows
# the same numbers).

# %%
with nbmp.Pool(2) as pool:
    halves = pool.map(lambda k: image[:, k::2] * 2, range(2))    # two new 32 MiB arrays
print([h.shape for h in halves], all(nbmp.is_shared(h) for h in halves))
usage = nbmp.shm_usage()
print(f"{usage.segments} segments, {usage.bytes / 2**20:.0f} MiB live; /dev/shm has "
      f"{usage.shm_free / 2**30:.1f} GiB free")

# %% [markdown]
# When the arrays go, so does the memory. Nothing is left behind in `/dev/shm`, even if a
# worker or this kernel is killed.

# %%
del image, bands, halves
import gc; gc.collect()
print(nbmp.shm_usage().segments)
