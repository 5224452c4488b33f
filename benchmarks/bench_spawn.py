"""What a user waits for, end to end: a loop of calls of 4 trivial workers, in a parent that has
imported numpy and torch (a realistic kernel), for nbmp.spawn, its peers and the bare least a spawn
that returns values does (standard fork processes and a pipe each), and of a Pool's
start + first map + end (4 workers), nbmp's against the standard library's: with 4 trivial tasks
(nbmp's given a lambda, as a notebook would, and given the standard row's function), and with 16
matrix products, one per task (BLAS threads started in every worker).

Each row is ``--calls`` calls in a row, timed from the first call until every child process
is reaped, with the CPU seconds of the parent and its reaped children beside the wall time;
the rows take turns, round after round (``--rounds``), so that a change of load on a shared
machine hits every row alike. Ratios are per round (two rows of one round share its load);
the median and the range over the rounds are printed.

Run: ``PYTHONPATH=. python benchmarks/bench_spawn.py [--rounds N] [--calls N] [--plot PNG]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import multiprocessing
import multiprocessing.connection
import os
import platform
import resource
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
BLAS_TASKS = 16  # 4 per worker: a worker caps the BLAS pool its first task started
# Rows named twice: in the table, and in the ratios printed under it.
NBMP_SPAWN, TORCH_FORK = "**nbmp.spawn, default (fork), output relayed**", "torch start_processes, fork"
BARE = "bare: 4 standard fork Processes, each value sent back on a pipe"
STD_POOL, NBMP_POOL, NBMP_POOL_SAME = "multiprocessing Pool, fork", "nbmp.Pool (fork), lambda", "nbmp.Pool (fork), the same function"
STD_POOL_BLAS, NBMP_POOL_BLAS = "multiprocessing Pool, fork, 16 matrix products", \
    "nbmp.Pool (fork), 16 matrix products"


def trivial(i: int) -> int:
    return i


def product(i: int) -> float:
    """A task that uses BLAS: one matrix product, for which OpenBLAS starts its threads."""
    a = numpy.full((384, 384), float(i))
    return float((a @ a)[0, 0])


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


def _send_value(i: int, end: multiprocessing.connection.Connection) -> None:
    end.send(trivial(i))


def bare_spawn() -> None:
    """The least a spawn with return values does: standard fork processes, each sending ``fn(i)``
    back on a pipe; no resets, no output relay, no supervision, no interrupt handling."""
    ctx, ends, procs = multiprocessing.get_context("fork"), [], []
    for i in range(NPROCS):
        reader, writer = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=_send_value, args=(i, writer)))
        procs[-1].start()
        writer.close()
        ends.append(reader)
    assert [end.recv() for end in ends] == [0, 1, 2, 3]
    for proc in procs:
        proc.join()


def nbmp_default() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS) == [0, 1, 2, 3]


def nbmp_capped() -> None:
    """With an explicit thread budget: each worker caps (and so restarts) the OpenBLAS pool it inherited."""
    nbmp.set_worker_threads(1)
    try:
        assert nbmp.spawn(trivial, nprocs=NPROCS) == [0, 1, 2, 3]
    finally:
        nbmp.set_worker_threads(None)


def nbmp_default_inherit() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS, output="inherit") == [0, 1, 2, 3]


def nbmp_spawn() -> None:
    assert nbmp.spawn(trivial, nprocs=NPROCS, start_method="spawn") == [0, 1, 2, 3]


def torch_spawn() -> None:
    torch_mp.spawn(trivial, nprocs=NPROCS)


def torch_start_processes_fork() -> None:
    torch_mp.start_processes(trivial, nprocs=NPROCS, start_method="fork")


@functools.lru_cache(maxsize=None)
def expected(task: Callable[[int], object], tasks: int) -> List[object]:
    """What a map of ``task`` over ``range(tasks)`` returns, worked out once, in the warm-up: the
    parent's own products are no part of what a call's user waits for."""
    return [task(i) for i in range(tasks)]


def pool(method: str, task: Callable[[int], object] = trivial, tasks: int = NPROCS) -> Callable[[], None]:
    def run() -> None:
        with multiprocessing.get_context(method).Pool(NPROCS) as p:
            assert p.map(task, range(tasks), chunksize=1) == expected(task, tasks)
    return run


def nbmp_pool() -> None:
    """nbmp's Pool started and given its first map (a lambda, as a notebook would), then ended."""
    with nbmp.Pool(NPROCS) as p:
        assert p.map(lambda i: i, range(NPROCS)) == [0, 1, 2, 3]


def nbmp_pool_same() -> None:
    """nbmp's Pool given what the standard one is given: a module's function, one task per chunk."""
    with nbmp.Pool(NPROCS) as p:
        assert p.map(trivial, range(NPROCS), chunksize=1) == [0, 1, 2, 3]


def nbmp_pool_blas() -> None:
    with nbmp.Pool(NPROCS) as p:
        assert p.map(product, range(BLAS_TASKS), chunksize=1) == expected(product, BLAS_TASKS)


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


def settle(helpers: Set[int], limit: float = 5.0) -> None:
    """Until every child but ``helpers`` (a forkserver, a resource tracker) is reaped."""
    deadline = time.monotonic() + limit
    while children() - helpers and time.monotonic() < deadline:
        time.sleep(0.0005)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children reaped so far."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def loop(fn: Callable[[], None], calls: int, helpers: Set[int]) -> Tuple[float, float]:
    """(wall, CPU) seconds of ``calls`` calls of ``fn`` in a row, until every child is reaped."""
    settle(helpers)
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(calls):
        fn()
    settle(helpers)
    return time.perf_counter() - wall, cpu_seconds() - cpu


def measure(rows: List[Tuple[str, Callable[[], None]]], rounds: int, calls: int) -> Dict[str, List[Tuple[float, float]]]:
    """(wall, CPU) per round, per row; the rows take turns."""
    for _, fn in rows:
        fn()  # warm-up: imports, a forkserver, caches
    gc.collect()  # the full collection that importing numpy and torch made due: in no row's loop
    time.sleep(0.1)
    helpers = children()
    spans: Dict[str, List[Tuple[float, float]]] = {name: [] for name, _ in rows}
    for _ in range(rounds):
        for name, fn in rows:
            spans[name].append(loop(fn, calls, helpers))
    return spans


def ratio(spans: Dict[str, List[Tuple[float, float]]], row: str, peer: str, which: int) -> str:
    """``row / peer`` per round (``which``: 0 wall, 1 CPU): median [min–max]."""
    if row not in spans or peer not in spans:
        return "-"
    r = sorted(a[which] / b[which] for a, b in zip(spans[row], spans[peer]))
    return f"{statistics.median(r):.2f}× [{r[0]:.2f}–{r[-1]:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every fork-based row")
    parser.add_argument("--rounds-spawn", type=int, default=1, help="rounds of the spawn-based rows")
    parser.add_argument("--calls", type=int, default=20, help="calls in a row, per row and round")
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    opts = parser.parse_args()
    fork_rows: List[Tuple[str, Callable[[], None]]] = [
        ("raw floor: 4 x os.fork + waitpid", raw_fork_floor),
        (BARE, bare_spawn),
        (NBMP_SPAWN, nbmp_default),
        ("nbmp.spawn, default (fork), output='inherit'", nbmp_default_inherit),
        ("nbmp.spawn, default (fork), nbmp.set_worker_threads(1)", nbmp_capped),
        (STD_POOL, pool("fork")),
        (NBMP_POOL, nbmp_pool),
        (NBMP_POOL_SAME, nbmp_pool_same),
        (STD_POOL_BLAS, pool("fork", product, BLAS_TASKS)),
        (NBMP_POOL_BLAS, nbmp_pool_blas),
    ]
    if torch_mp is not None:
        fork_rows.append((TORCH_FORK, torch_start_processes_fork))
    spawn_rows = [("nbmp.spawn, start_method='spawn'", nbmp_spawn), ("multiprocessing Pool, spawn", pool("spawn"))]
    if torch_mp is not None:
        spawn_rows.append(("torch.multiprocessing.spawn", torch_spawn))
    spans = measure(fork_rows, opts.rounds, opts.calls)
    if opts.rounds_spawn:  # 0: the fork-based rows only
        spans.update(measure(spawn_rows, opts.rounds_spawn, max(1, opts.calls // 5)))
    calls = {name: opts.calls for name, _ in fork_rows} | {name: max(1, opts.calls // 5) for name, _ in spawn_rows}
    print(f"4 trivial workers, parent with numpy {numpy.__version__}"
          f"{' and torch ' + torch.__version__ if torch is not None else ''} imported; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.system()}; "
          f"loops of {opts.calls} calls (spawn-method rows {calls[spawn_rows[0][0]]}) until every child is reaped\n")
    print("| how | wall per call (ms) | CPU per call (ms) | rounds |")
    print("|---|---:|---:|---:|")
    for name, rows in spans.items():
        wall = statistics.median(w for w, _ in rows) / calls[name]
        cpu = statistics.median(c for _, c in rows) / calls[name]
        print(f"| {name} | {wall * 1e3:.1f} | {cpu * 1e3:.1f} | {len(rows)} |")
    print(f"\nPer round, median [range]: Pool ÷ standard Pool wall {ratio(spans, NBMP_POOL, STD_POOL, 0)}, "
          f"CPU {ratio(spans, NBMP_POOL, STD_POOL, 1)}; the same function: wall {ratio(spans, NBMP_POOL_SAME, STD_POOL, 0)}, "
          f"CPU {ratio(spans, NBMP_POOL_SAME, STD_POOL, 1)}; spawn ÷ torch start_processes(fork) wall "
          f"{ratio(spans, NBMP_SPAWN, TORCH_FORK, 0)}, CPU {ratio(spans, NBMP_SPAWN, TORCH_FORK, 1)}; bare ÷ torch wall "
          f"{ratio(spans, BARE, TORCH_FORK, 0)}, CPU {ratio(spans, BARE, TORCH_FORK, 1)}; "
          f"Pool ÷ standard Pool with 16 matrix products wall {ratio(spans, NBMP_POOL_BLAS, STD_POOL_BLAS, 0)}, "
          f"CPU {ratio(spans, NBMP_POOL_BLAS, STD_POOL_BLAS, 1)}")
    if opts.plot:
        names = list(spans)
        _plot.bars(opts.plot, names, {"wall": [statistics.median(w for w, _ in spans[n]) / calls[n] * 1e3 for n in names]},
                   title=f"{NPROCS} trivial workers, a loop of calls until every child is reaped (parent: numpy, torch)",
                   xlabel="milliseconds per call (log scale)", log=True)


if __name__ == "__main__":
    sys.exit(main())
