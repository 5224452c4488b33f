# %% [markdown]
# # A Pool that never hangs
#
# `nbmp.Pool` is the standard `multiprocessing.Pool` with cloudpickle, progress bars,
# and one promise the standard Pool cannot keep: **a worker that dies mid-task makes
# the waiting call raise** instead of hanging the cell forever.

# %%
import os
import signal
import time

import nbmp

# %% [markdown]
# ## A map with progress
#
# `progress=True` draws a bar (here, under the cell); the default shows one only for maps
# still running after two seconds.

# %%
def slow_square(x):
    time.sleep(0.01)
    return x * x

with nbmp.Pool(2) as pool:
    squares = pool.map(slow_square, range(200), chunksize=10, progress=True)
squares[:5], len(squares)

# %% [markdown]
# ## Load once per worker: the initializer
#
# The standard way to give each worker something expensive (a model, a connection): the
# initializer sets a global, and the tasks read it, under every start method. The
# notebook's own `model` stays as it was. Under fork the workers also read the notebook's
# data without it being pickled: `predict`, defined before the Pool, crosses by reference.

# %%
model = None

def load_model(scale):
    global model
    model = {"scale": scale}   # e.g. torch.load(...), once in each worker

def predict(x):
    return model["scale"] * x

with nbmp.Pool(2, initializer=load_model, initargs=(10,)) as pool:
    print(pool.map(predict, range(5)))
print("the notebook's model:", model)

# %% [markdown]
# `nbmp.parallel_map` is the one-call version: a Pool, a map, and the Pool cleaned up.

# %%
nbmp.parallel_map(lambda word: word.upper(), ["fork", "first"], workers=2)

# %% [markdown]
# ## A worker crash, caught with a clear error
#
# Item 3 kills its own worker (as the out-of-memory killer would). The standard Pool would
# wait forever; nbmp names the worker, the signal and the likely cause, replaces the worker,
# and the Pool stays usable.

# %%
def risky(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x

pool = nbmp.Pool(1)   # one worker: the same one meets item 3 on every run
try:
    pool.map(risky, range(8), chunksize=1)
except nbmp.WorkerLostError as error:
    print(error)
    print("signal:", error.signal_name, "| worker:", error.index, "| pid:", error.pid)

# %%
pool.map(abs, [-1, -2, -3])   # the same Pool, still working

# %% [markdown]
# ## An exception in a task
#
# It comes back with its own type (even a class defined in this notebook) and the worker's
# traceback, with this cell's lines, as its cause.

# %%
class BadInput(ValueError):
    pass

def parse(text):
    if not text.isdigit():
        raise BadInput(f"not a number: {text!r}")
    return int(text)

try:
    pool.map(parse, ["1", "two"])
except BadInput as error:
    print("caught", type(error).__name__, "-", error)
    print(error.__cause__)

# %%
pool.terminate()

# %% [markdown]
# ## scikit-learn on nbmp's workers
#
# `import nbmp.joblib` gives joblib a `"nbmp"` backend: scikit-learn's `n_jobs` then runs on an
# `nbmp.Pool`, whose forked workers take an estimator defined in this notebook.

# %%
try:
    import joblib
    import nbmp.joblib
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.datasets import make_classification
    from sklearn.model_selection import cross_val_score
except ImportError:
    joblib = None
    print("joblib or scikit-learn is not installed: skipping this cell")

if joblib is not None:
    class Majority(BaseEstimator, ClassifierMixin):   # defined in a cell
        def fit(self, X, y):
            self.label_ = max(set(y), key=list(y).count)
            return self

        def predict(self, X):
            return [self.label_] * len(X)

    X, y = make_classification(100, random_state=0)
    with joblib.parallel_config(backend="nbmp", n_jobs=2):
        print("accuracy per fold:", [round(float(s), 2) for s in cross_val_score(Majority(), X, y, cv=4)])
