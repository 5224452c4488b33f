"""The ``"nbmp"`` backend of joblib, registered on import: ``joblib.Parallel`` and scikit-learn's ``n_jobs``
on an :class:`nbmp.Pool`, e.g. ``with joblib.parallel_config(backend="nbmp", n_jobs=4): search.fit(X, y)``.
It is joblib's multiprocessing backend (batching, nesting, the stop at the first error) on nbmp's
Pool: forked workers that take lambdas and cell functions, a dead worker's error instead of a hang."""

from __future__ import annotations

from typing import Any

import joblib
from joblib.parallel import FallbackToBackend, MultiprocessingBackend, SequentialBackend

from nbmp._pool import Pool  # absolute: also right when CPython's tests import this file as multiprocessing.joblib

__all__ = ["NbmpBackend"]


class NbmpBackend(MultiprocessingBackend):  # type: ignore[misc]  # joblib is untyped
    """The Pool takes the backend's options (``parallel_config(backend="nbmp", maxtasksperchild=10)``);
    the call's memmapping settings are joblib's Pool's: nbmp shares arrays itself (docs/pool.md)."""

    def configure(self, n_jobs: int = 1, parallel: Any = None, **call_settings: Any) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        self._pool, self.parallel = Pool(n_jobs, **self.backend_kwargs), parallel
        return int(n_jobs)


joblib.register_parallel_backend("nbmp", NbmpBackend)
