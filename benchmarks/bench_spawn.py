"""Time from the call to all results for 4 trivial workers, in a parent that has
imported numpy and torch (a realistic kernel), for nbmp.spawn and its peers; and a Pool's
start + first map + end (4 workers), nbmp's against the standard library's.

Run: ``PYTHONPATH=. python benchmarks/bench_spawn.py [--repeat N] [--plot PNG]``; prints a
Markdown table of medians and ratios to the raw fork floor (4 x os.fork + waitpid).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Set, Tuple

import numpy  # noqa: F401  (the realistic parent: numpy and torch imported)

try:
    import torch
    import torch.multiprocessing as torch_mp
except ImportError:  # the torch rows are skipped
    torch = torch_mp = None

import _plot
import nbmp

NPROCS = 4
# Rows named twice: in the table, and in the ratios printed under it.
NBMP_SPAWN, TORCH_FORK = "**nbmp.spawn, default (fork), output relayed**", "torch start_processes, fork"
STD_POOL, NBMP_POOL = "multiprocessing Pool, fork", "nbmp.Pool (fork), lambda"


def trivial(i: int) -> int:
    return i


def raw_fork_floor(n: int = NPROCS) -> None:
    """The floor: ``n`` bare ``os.fork`` whose children exit at once, then ``waitpid``."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def nbmp_default() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS) == [0, 1, 2, 3]


def nbmp_default_inherit() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS, output="inherit") == [0, 1, 2, 3]


def nbmp_spawn() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS, start_method="spawn") == [0, 1, 2, 3]


def torch_spawn() -> None:
    torch_mp.spawn(trivial, nprocs=NPROCS)


def torch_start_processes_fork() -> None:
    torch_mp.start_processes(trivial, nprocs=NPROCS, start_method="fork")


def pool(method: str) -> Callable[[], None]:
    def run() -> None:
        with multiprocessing.get_context(method).Pool(NPROCS) as p:
            assert p.map(trivial, range(NPROCS)) == [0, 1, 2, 3]
    return run


def nbmp_pool() -> None:
    """nbmp's Pool started and given its first map (a lambda, as a notebook would), then ended."""
    with nbmp.Pool(NPROCS) as p:
        assert p.map(lambda i: i, range(NPROCS)) == [0, 1, 2, 3]


def children() -> Set[int]:
    """This process's child processes (of any of its threads), reaped or not."""
    found: Set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found.update(int(pid) for pid in f.read().split())
        except OSError:  # a thread that ended meanwhile
            pass
    return found


def settle(helpers: Set[int], limit: float = 2.0) -> None:
    """Until every child but ``helpers`` (a forkserver, a resource tracker) is gone: a row that
    returns before its children are reaped (nbmp.spawn's workers are reaped once the caller has
    its values, while the kernel frees their memory) must not leave that work to the next row."""
    deadline = time.monotonic() + limit
    while children() - helpers and time.monotonic() < deadline:
        time.sleep(0.0005)


def measure(rows: List[Tuple[str, Callable[[], None]]], repeat: int) -> List[List[float]]:
    """Seconds per run, per row. The rows take turns, run after run, so that a change of
    load on a shared machine hits every row alike; each starts once the one before has no
    child left (``settle``)."""
    for _, fn in rows:
        fn()  # warm-up: imports, a forkserver, caches
    time.sleep(0.1)
    helpers = children()
    times: List[List[float]] = [[] for _ in rows]
    for _ in range(repeat):
        for k, (_, fn) in enumerate(rows):
            settle(helpers)
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return times


def back_to_back(a: Callable[[], None], b: Callable[[], None], calls: int = 20, rounds: int = 5) -> float:
    """The median over ``rounds`` of (``calls`` calls of ``a`` in a row) ÷ (the same of ``b``),
    each timed until its last child is gone: a loop's rate, the work a call leaves behind it
    (the reaping of workers, the kernel's teardown of their memory) included."""
    helpers = children()
    ratios = []
    for _ in range(rounds):
        spans = []
        for fn in (a, b):
            settle(helpers)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            settle(helpers)
            spans.append(time.perf_counter() - start)
        ratios.append(spans[0] / spans[1])
    return statistics.median(ratios)


def paired(times: Dict[str, List[float]], row: str, peer: str) -> str:
    """The median of the per-round ratios ``row / peer``: two rows timed in the same round
    share that round's load, so this moves less with the machine than the ratio of medians."""
    if row not in times or peer not in times:
        return "-"
    return f"{statistics.median(a / b for a, b in zip(times[row], times[peer])):.2f}×"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=21, help="timed runs of the fork-based rows")
    parser.add_argument("--repeat-spawn", type=int, default=3, help="timed runs of the spawn-based rows")
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    opts = parser.parse_args()
    fork_rows: List[Tuple[str, Callable[[], None]]] = [
        ("raw floor: 4 x os.fork + waitpid", raw_fork_floor),
        (NBMP_SPAWN, nbmp_default),
        ("nbmp.spawn, default (fork), output='inherit'", nbmp_default_inherit),
        (STD_POOL, pool("fork")),
        (NBMP_POOL, nbmp_pool),
    ]
    if torch_mp is not None:
        fork_rows.append((TORCH_FORK, torch_start_processes_fork))
    spawn_rows = [("nbmp.spawn, start_method='spawn'", nbmp_spawn), ("multiprocessing Pool, spawn", pool("spawn"))]
    if torch_mp is not None:
        spawn_rows.append(("torch.multiprocessing.spawn", torch_spawn))
    fork_times = {name: t for (name, _), t in zip(fork_rows, measure(fork_rows, opts.repeat))}
    results = [(name, statistics.median(t), opts.repeat) for name, t in fork_times.items()]
    results += [(name, statistics.median(t), opts.repeat_spawn)
                for (name, _), t in zip(spawn_rows, measure(spawn_rows, opts.repeat_spawn))]
    floor = results[0][1]
    print(f"4 trivial workers, parent with numpy {numpy.__version__}"
          f"{' and torch ' + torch.__version__ if torch is not None else ''} imported; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.system()}\n")
    print("| how | median (ms) | runs | × raw fork floor |")
    print("|---|---:|---:|---:|")
    for name, seconds, n in results:
        print(f"| {name} | {seconds * 1e3:.1f} | {n} | {seconds / floor:.2f} |")
    by_name = {name: seconds for name, seconds, _ in results}
    versus_torch = (f"{by_name[NBMP_SPAWN] / by_name[TORCH_FORK]:.2f}× torch's start_processes (fork)"
                    if TORCH_FORK in by_name else "no torch row")
    print(f"\nnbmp.Pool start + first map: {by_name[NBMP_POOL] / by_name[STD_POOL]:.2f}× the multiprocessing "
          f"Pool's (fork); nbmp.spawn: {versus_torch}")
    print(f"Median of the per-round ratios (rows timed in the same round): Pool "
          f"{paired(fork_times, NBMP_POOL, STD_POOL)}, spawn ÷ torch {paired(fork_times, NBMP_SPAWN, TORCH_FORK)}, "
          f"spawn ÷ floor {paired(fork_times, NBMP_SPAWN, fork_rows[0][0])}")
    if torch_mp is not None:
        print(f"20 calls back to back, until the last worker is reaped (median of 5): spawn ÷ torch "
              f"{back_to_back(nbmp_default, torch_start_processes_fork):.2f}×, "
              f"Pool ÷ standard Pool {back_to_back(nbmp_pool, pool('fork')):.2f}×")
    if opts.plot:
        _plot.bars(opts.plot, [name for name, _, _ in results], {"median": [t * 1e3 for _, t, _ in results]},
                   title=f"{NPROCS} trivial workers, from the call to all results (parent imported numpy, torch)",
                   xlabel="milliseconds (log scale)", log=True)


if __name__ == "__main__":
    sys.exit(main())
