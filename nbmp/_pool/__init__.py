"""nbmp's Pool: the standard Pool with cloudpickle, that never hangs on a dead worker.

``pool`` (``Pool``, ``parallel_map``), ``worker`` (the worker loop and its task
slot), ``watch`` (the parent's watch over the workers), ``errors`` (what the caller
gets when a task fails or a worker dies), ``progress`` (progress of a map),
``serial`` (torch_xla's ``SerialExecutor`` and ``ForkShared``), ``executor``
(``ProcessPoolExecutor``, the ``concurrent.futures`` executor on nbmp's workers). A peer of
``_spawn``; neither imports the other.
"""

from .._base.exceptions import RemoteTaskError
from .errors import WorkerLostError
from .executor import ProcessPoolExecutor
from .pool import Pool, parallel_map
from .serial import ForkShared, SerialExecutor

__all__ = ["Pool", "parallel_map", "RemoteTaskError", "WorkerLostError", "SerialExecutor", "ForkShared",
           "ProcessPoolExecutor"]
