"""What a child of nbmp needs from its first instruction: one declared record, not loose
attributes on the process object.

The starter fills it in, ``Process.start`` completes it (``registry.stamp``), and the child's
bootstrap reads it (``registry.start_child``); it travels with the process object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


__all__ = ["Launch"]


@dataclass(frozen=True)
class Launch:
    """A child's launch settings.

    ``index``: its rank in its run (None: its start order); ``nprocs``: the run's size
    (0: unknown); ``worker``: a spawn or Pool worker, which ignores SIGINT from its start
    and dies with its parent; set at start: ``parent`` (the starting process's pid),
    ``main_thread`` (started from that process's main thread: Linux's parent-death
    signal follows the *thread* that forked, see ``posix.die_with_parent``),
    ``base_seed`` (None: fresh entropy), ``threads`` (the explicit thread budget, or
    None), ``tree`` (the parent's tree key, see ``_base.util.tree``), and, worked out then
    in the parent, the child's ``seed`` and thread ``budget`` (0: not worked out).
    """

    index: Optional[int] = None
    nprocs: int = 0
    worker: bool = False
    parent: int = 0
    main_thread: bool = False
    base_seed: Optional[int] = None
    threads: Optional[int] = None
    seed: Optional[int] = None
    budget: int = 0
    tree: str = field(default="", repr=False)  # the parent's tree key (util.tree): a secret
