"""``multiprocessing.queues``, mirrored: the queues pickle with nbmp's pickler.

What differs from the standard module: ``Queue``, ``JoinableQueue`` and ``SimpleQueue``
are nbmp's own classes (see ``nbmp/_backend/queues.py``): cloudpickle on ``put``, and ``Queue.put`` raises in
the caller for an object that cannot be sent. They take ``ctx=`` as the standard ones
do; ``nbmp.Queue()`` passes nbmp's default context.

Example::

    >>> import nbmp
    >>> from nbmp.queues import Queue
    >>> q = Queue(ctx=nbmp.get_context("spawn")); q.put(lambda: 1); q.get()()
    1
"""

from queue import Empty, Full  # noqa: F401  (as multiprocessing.queues imports them)

from ._backend.queues import JoinableQueue, Queue, SimpleQueue

__all__ = ["Queue", "SimpleQueue", "JoinableQueue"]


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.queues")
