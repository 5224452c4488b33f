"""nbmp: fork-first multiprocessing for Jupyter notebooks.

``import nbmp as multiprocessing`` works: every name of
``multiprocessing.__all__`` is here with its standard meaning, bound to nbmp's
default context, whose start method is ``"fork"`` wherever the platform has it
and whose objects pickle with cloudpickle (lambdas and cell-defined functions
work as targets, tasks and payloads under every start method).

Example::

    >>> import nbmp
    >>> with nbmp.Pool(2) as pool:
    ...     pool.map(lambda x: x + 1, [1, 2, 3])
    [2, 3, 4]
"""

import multiprocessing as _multiprocessing

from ._context import default_context as _default_context
from ._pickling import PicklingError
from ._sharing import (SharedMemoryFullError, ShmUsage, empty, get_all_sharing_strategies, get_sharing_strategy,
                       get_sharing_threshold, is_shared, set_sharing_strategy, set_sharing_threshold, share,
                       shm_usage, zeros)

__version__ = "0.1.0"

# The drop-in: the same names as the standard package, from nbmp's default context.
for _name in _multiprocessing.__all__:
    globals()[_name] = getattr(_default_context, _name)
del _name

__all__ = [*_multiprocessing.__all__, "PicklingError",
           # shared memory for arrays and tensors (nbmp._sharing)
           "zeros", "empty", "share", "is_shared", "shm_usage", "ShmUsage", "SharedMemoryFullError",
           "get_all_sharing_strategies", "get_sharing_strategy", "set_sharing_strategy",
           "get_sharing_threshold", "set_sharing_threshold"]
