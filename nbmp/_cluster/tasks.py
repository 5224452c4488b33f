"""What runs on a Dask worker for ``Pool(..., cluster=)``: a chunk of a map, the map's
function unpickled once per worker (it crosses once per map, as bytes), and the look at
which of a run's tasks a worker is still executing (for an interrupt)."""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any, Callable, List, Sequence, Tuple

__all__ = ["run_chunk", "run_apply", "executing"]

_functions: "OrderedDict[str, Callable[..., Any]]" = OrderedDict()
_KEPT = 8  # maps whose function a worker keeps unpickled


def _function(key: str, pickled: bytes) -> Callable[..., Any]:
    fn = _functions.get(key)
    if fn is None:
        fn = _functions[key] = pickle.loads(pickled)
        while len(_functions) > _KEPT:
            _functions.popitem(last=False)
    return fn


def run_chunk(pickled: bytes, key: str, items: Sequence[Any], star: bool) -> List[Any]:
    fn = _function(key, pickled)
    return [fn(*item) for item in items] if star else [fn(item) for item in items]


def run_apply(pickled: bytes, args: Tuple[Any, ...], kwds: Any) -> List[Any]:
    return [pickle.loads(pickled)(*args, **kwds)]  # a chunk of one, as a map's


def executing(prefix: str, dask_worker: Any = None) -> List[str]:
    """The keys starting with ``prefix`` that this worker is still executing (``client.run``)."""
    return [str(key) for key, task in dask_worker.state.tasks.items()
            if str(key).startswith(prefix) and task.state in ("executing", "cancelled", "long-running")]
