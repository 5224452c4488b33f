"""nbmp's Pool.

What differs from ``multiprocessing.pool.Pool``: nothing in its code yet. It is
built on its context's ``SimpleQueue``, which for an nbmp context pickles with
cloudpickle, so tasks, results and the initializer of an nbmp Pool may be
lambdas or cell-defined functions under every start method.
"""

from __future__ import annotations

from multiprocessing import pool

__all__ = ["Pool"]


class Pool(pool.Pool):
    """``multiprocessing.Pool`` with cloudpickle for tasks, results and initializer.

    Example::

        >>> with nbmp.Pool(2) as p:
        ...     p.map(lambda x: x * x, range(4))
        [0, 1, 4, 9]
    """
