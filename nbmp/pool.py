"""``multiprocessing.pool``, mirrored: ``Pool`` is nbmp's.

What differs from the standard module: ``Pool`` is :class:`nbmp.Pool` (cloudpickle for
tasks, results and the initializer; a dead worker raises instead of hanging), started
from nbmp's default context unless ``context=`` names another. ``ThreadPool`` and the
result classes are the standard ones: threads share memory, nothing is pickled.

Example::

    >>> from nbmp.pool import Pool, ThreadPool
    >>> with Pool(2) as pool:
    ...     pool.map(lambda x: x + 1, [1, 2])
    [2, 3]
"""

from multiprocessing.pool import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    CLOSE, INIT, RUN, TERMINATE, ApplyResult, AsyncResult, IMapIterator, IMapUnorderedIterator,
    MapResult, MaybeEncodingError, ThreadPool,
)

from ._pool import Pool

__all__ = ["Pool", "ThreadPool"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.pool")
