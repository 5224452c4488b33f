"""``multiprocessing.context``, mirrored: nbmp's contexts and process classes.

What differs from the standard module: ``BaseContext``, ``DefaultContext``,
``ForkContext``, ``SpawnContext`` and ``ForkServerContext`` are nbmp's (fork first,
cloudpickle on every channel; see :mod:`nbmp._context`), and ``Process`` and the
per-method process classes are nbmp's. ``assert_spawning`` and the spawning-popen
helpers are the standard ones: nbmp starts children through the standard popen classes.

Note the name clash with ``torch.multiprocessing``: ``nbmp.SpawnContext`` (top level)
is torch's alias for :class:`nbmp.ProcessContext`; ``nbmp.context.SpawnContext`` is
the context of the ``"spawn"`` start method, as in ``multiprocessing.context``.
"""

from multiprocessing.context import (  # type: ignore[attr-defined]  # typeshed omits some runtime names  # noqa: F401  (the mirror of the standard module)
    AuthenticationError, BufferTooShort, ProcessError, TimeoutError, assert_spawning, get_spawning_popen,
    reduction, set_spawning_popen,
)

from ._backend.context import (  # noqa: F401
    BaseContext, DefaultContext, ForkContext, ForkServerContext, SpawnContext, _concrete_contexts,
    default_context as _default_context,
)
from ._backend.context import Process  # noqa: F401
from ._backend.process import ForkProcess, ForkServerProcess, SpawnProcess  # noqa: F401

__all__ = ()  # as the standard module's


# Every other name of the standard module (outside ``__all__``, private ones too) reads as there.
from ._base.util import falls_back_to as _falls_back_to  # noqa: E402

__getattr__ = _falls_back_to(globals(), "multiprocessing.context")
