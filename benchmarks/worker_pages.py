"""The pages a forked worker writes and the CPU it takes, nbmp's against its peers', and what each
of nbmp's steps in the worker costs.

Every page a forked worker writes is a page fault and a copy of its parent's page (and its share
of the exit): on a small machine that is most of what a worker of a trivial call costs beyond the
fork itself. Each row is ``--calls`` calls of 4 trivial workers (for the Pools: start, a map of 4,
end); the rows take turns, ``--rounds`` times, all in this one process, so that the parent's memory
layout (which moves the counts by tens of pages from one process to the next) is the same for
every row. Printed per row: page faults and CPU milliseconds per worker (of the reaped workers,
``RUSAGE_CHILDREN``), median and range over the rounds, and the parent's page faults and CPU
milliseconds per call. The "without" rows leave some of nbmp's steps in the worker out, to price
them; they are no setting of nbmp's.

Run: ``PYTHONPATH=. python benchmarks/worker_pages.py [--rounds N] [--calls N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing
import resource
import statistics
from typing import Callable, Dict, Iterator, List, Tuple

import numpy  # noqa: F401  (the realistic parent: numpy and torch imported)

try:
    import torch.multiprocessing as torch_mp
except ImportError:  # the torch rows are skipped
    torch_mp = None

import nbmp
from nbmp._forking import registry

from bench_spawn import children, settle, trivial

NPROCS = 4


@contextlib.contextmanager
def without(*names: str) -> Iterator[None]:
    """nbmp's built-in fork handlers of these class names (all of them: ``"*"``) do nothing in the worker."""
    handlers = [h for h in registry._builtins if "*" in names or type(h).__name__ in names]
    for handler in handlers:
        handler.in_child = lambda worker: None  # an instance attribute shadows the method
    try:
        yield
    finally:
        for handler in handlers:
            del handler.in_child


def spawn(**options: object) -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS, **options) == list(range(NPROCS))


def std_pool() -> None:
    with multiprocessing.get_context("fork").Pool(NPROCS) as p:
        assert p.map(trivial, range(NPROCS), chunksize=1) == list(range(NPROCS))


def nbmp_pool() -> None:
    with nbmp.Pool(NPROCS) as p:
        assert p.map(trivial, range(NPROCS), chunksize=1) == list(range(NPROCS))


ROWS: List[Tuple[str, Callable[[], None], Callable[[], "contextlib.AbstractContextManager[None]"]]] = [
    ("nbmp.spawn (fork, output relayed)", spawn, contextlib.nullcontext),
    ("  without any fork-safety reset", spawn, lambda: without("*")),
    ("  without the thread variables", spawn, lambda: without("ThreadEnvironment")),
    ("  without torch's threads and seed", spawn, lambda: without("Torch")),
    ("  without the output relay (output='inherit')", lambda: spawn(output="inherit"), contextlib.nullcontext),
    ("  without any reset nor the relay", lambda: spawn(output="inherit"), lambda: without("*")),
    ("multiprocessing Pool, fork", std_pool, contextlib.nullcontext),
    ("nbmp.Pool (fork)", nbmp_pool, contextlib.nullcontext),
    ("  nbmp.Pool without any fork-safety reset", nbmp_pool, lambda: without("*")),
]
if torch_mp is not None:
    ROWS.insert(1, ("torch start_processes, fork",
                    lambda: torch_mp.start_processes(trivial, nprocs=NPROCS, start_method="fork"), contextlib.nullcontext))


def usage(who: int) -> Tuple[int, float]:
    """(page faults, CPU milliseconds) of this process (``RUSAGE_SELF``) or of its reaped children."""
    used = resource.getrusage(who)
    return used.ru_minflt, (used.ru_utime + used.ru_stime) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=30)
    opts = parser.parse_args()
    for _, fn, setting in ROWS:
        with setting():
            fn()  # warm-up
    gc.collect()  # the full collection that importing numpy and torch made due: in no row's loop
    helpers = children()
    # Per row and round: (worker's faults, worker's CPU ms, parent's faults per call, parent's CPU ms per call).
    seen: Dict[str, List[Tuple[float, ...]]] = {name: [] for name, _, _ in ROWS}
    for _ in range(opts.rounds):
        for name, fn, setting in ROWS:
            with setting():
                settle(helpers)
                mine, theirs = usage(resource.RUSAGE_SELF), usage(resource.RUSAGE_CHILDREN)
                for _ in range(opts.calls):
                    fn()
                settle(helpers)
                worker = [(after - before) / opts.calls / NPROCS for after, before in zip(usage(resource.RUSAGE_CHILDREN), theirs)]
                own = [(after - before) / opts.calls for after, before in zip(usage(resource.RUSAGE_SELF), mine)]
                seen[name].append((*worker, *own))
    print(f"{NPROCS} trivial workers, {opts.calls} calls a round, {opts.rounds} rounds\n")
    print("| how | page faults per worker: median [range] | CPU ms per worker | parent's page faults per call | parent's CPU ms per call |")
    print("|---|---:|---:|---:|---:|")
    for name, _, _ in ROWS:
        w, cpu, parent, parent_cpu = zip(*seen[name])
        print(f"| {name} | {statistics.median(w):.0f} [{min(w):.0f}–{max(w):.0f}] | {statistics.median(cpu):.2f} "
              f"[{min(cpu):.2f}–{max(cpu):.2f}] | {statistics.median(parent):.0f} | {statistics.median(parent_cpu):.1f} |")


if __name__ == "__main__":
    main()
