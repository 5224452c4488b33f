"""Throughput of a Pool on many tiny tasks: nbmp.Pool against the standard Pool and its peers.

100,000 calls of a trivial function on 2 workers, from a parent that imported numpy and
torch where installed (what a realistic kernel has); tasks per second, the
median and the best of ``--repeat`` runs, pool start-up excluded (every library's pool
is warmed with one small map first; rounds interleaved across libraries). Prints a
Markdown table with each rate relative to ``multiprocessing.Pool`` at the same chunksize.

    python benchmarks/bench_pool.py [--tasks 100000] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import _plot

try:  # the parent a notebook user has: what is imported changes how much each fork copies
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError:
    pass
import nbmp


def tiny(x: int) -> int:
    return x + 1


Runner = Callable[[List[int]], List[int]]

# The notebook's data: set in main() before any pool starts, read by tasks (see data_reads).
NOTEBOOK_DATA: List[int] = []


def reads_data(i: int) -> int:
    return NOTEBOOK_DATA[i]


def data_reads(workers: int, repeat: int, size: int = 5_000_000, tasks: int = 200) -> None:
    """A warm pool's map of ``tasks`` one-item tasks whose function (defined in ``__main__``,
    as a notebook cell's) reads a global list of ``size`` ints the workers inherited by fork.
    The standard Pool sends the function by reference; nbmp did by value, with the list."""
    NOTEBOOK_DATA[:] = range(size)
    pools = {"multiprocessing.Pool": multiprocessing.get_context("fork").Pool(workers),
             "nbmp.Pool": nbmp.Pool(workers)}
    times: Dict[str, List[float]] = {name: [] for name in pools}
    try:
        for pool in pools.values():
            pool.map(abs, range(workers))  # started
        for _ in range(repeat):
            for name, pool in pools.items():
                t0 = time.perf_counter()
                assert pool.map(reads_data, range(tasks), chunksize=1)[-1] == tasks - 1
                times[name].append(time.perf_counter() - t0)
    finally:
        for pool in pools.values():
            pool.terminate()
        NOTEBOOK_DATA.clear()
    base = statistics.median(times["multiprocessing.Pool"])
    print(f"\n{tasks} one-item tasks reading a {size:,}-int list the workers inherited (fork), "
          f"median of {repeat}\n")
    print("| library | ms per map | vs multiprocessing.Pool |")
    print("|---|---:|---:|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t) * 1e3:.1f} | {statistics.median(t) / base:.2f}x |")


def _rates(setups: Dict[str, Callable[[], Tuple[Runner, Callable[[], None]]]], items: List[int],
           repeat: int) -> Dict[str, Tuple[float, float]]:
    """(median rate, best rate) per library; rounds are interleaved so that load drift on
    a shared machine hits every library alike."""
    runners, closers = {}, []
    times: Dict[str, List[float]] = {name: [] for name in setups}
    try:
        for name, setup in setups.items():
            run, close = setup()
            closers.append(close)
            run(items[:100])  # warm: workers started, function loaded
            runners[name] = run
        for _ in range(repeat):
            for name, run in runners.items():
                t0 = time.perf_counter()
                out = run(items)
                times[name].append(time.perf_counter() - t0)
                assert out[-1] == items[-1] + 1
    finally:
        for close in closers:
            close()
    return {name: (len(items) / statistics.median(t), len(items) / min(t)) for name, t in times.items()}


def _pool(factory: Callable[[], object], chunksize: Optional[int],
          func: Callable[[int], int] = tiny) -> Callable[[], Tuple[Runner, Callable[[], None]]]:
    def setup() -> Tuple[Runner, Callable[[], None]]:
        pool = factory()
        return (lambda items: pool.map(func, items, chunksize)), pool.terminate  # type: ignore[attr-defined]
    return setup


def _executor(factory: Callable[[], concurrent.futures.Executor], chunksize: int) -> Callable[[], Tuple[Runner, Callable[[], None]]]:
    def setup() -> Tuple[Runner, Callable[[], None]]:
        ex = factory()
        return (lambda items: list(ex.map(tiny, items, chunksize=chunksize))), ex.shutdown
    return setup


def cases(workers: int, chunk: Optional[int]) -> Dict[str, Callable[[], Tuple[Runner, Callable[[], None]]]]:
    """Every peer at this chunksize (None: each library's default)."""
    fork = multiprocessing.get_context("fork")
    found: Dict[str, Callable[[], Tuple[Runner, Callable[[], None]]]] = {
        "multiprocessing.Pool": _pool(lambda: fork.Pool(workers), chunk),
        "nbmp.Pool": _pool(lambda: nbmp.get_context("fork").Pool(workers), chunk),
        # a notebook's function: cloudpickle sends it by value (the stdlib Pool cannot send it at all)
        "nbmp.Pool, lambda": _pool(lambda: nbmp.get_context("fork").Pool(workers), chunk, lambda x: x + 1),
        "concurrent.futures": _executor(lambda: concurrent.futures.ProcessPoolExecutor(workers, mp_context=fork),
                                        chunk or 1),
    }
    try:
        import multiprocess
        found["multiprocess.Pool"] = _pool(lambda: multiprocess.get_context("fork").Pool(workers), chunk)
    except ImportError:
        pass
    try:
        from loky import get_reusable_executor
        found["loky"] = _executor(lambda: get_reusable_executor(workers), chunk or 1)
    except ImportError:
        pass
    try:
        from mpire import WorkerPool

        def mpire_setup() -> Tuple[Runner, Callable[[], None]]:
            pool = WorkerPool(workers, start_method="fork")
            return (lambda items: pool.map(tiny, items, chunk_size=chunk, progress_bar=False)), pool.terminate
        found["mpire"] = mpire_setup
    except ImportError:
        pass
    try:
        import joblib

        def joblib_setup() -> Tuple[Runner, Callable[[], None]]:
            par = joblib.Parallel(workers, batch_size=chunk or "auto")
            return (lambda items: par(joblib.delayed(tiny)(x) for x in items)), lambda: None
        found["joblib"] = joblib_setup
    except ImportError:
        pass
    return found


def _rate(rate: float) -> str:
    return f"{rate / 1e6:.2f} M" if rate >= 1e5 else f"{rate / 1e3:.1f} k"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    args = parser.parse_args()
    items = list(range(args.tasks))
    print(f"{args.tasks:,} tiny tasks on {args.workers} workers (fork), tasks/s over {args.repeat} runs\n")
    print("| chunksize | library | tasks/s, median | vs multiprocessing.Pool | tasks/s, best | vs multiprocessing.Pool |")
    print("|---|---|---:|---:|---:|---:|")
    by_chunk: Dict[str, Dict[str, float]] = {}  # "chunksize ..." -> library -> median tasks/s
    for chunk in (None, 1000):
        rates = _rates(cases(args.workers, chunk), items, args.repeat)
        by_chunk[f"chunksize {chunk or 'default'}"] = {name: median for name, (median, _) in rates.items()}
        base, base_best = rates["multiprocessing.Pool"]
        for name, (rate, best) in sorted(rates.items(), key=lambda kv: -kv[1][0]):
            print(f"| {chunk or 'default'} | {name} | {_rate(rate)} | {rate / base:.2f}x | {_rate(best)} | "
                  f"{best / base_best:.2f}x |")
    data_reads(args.workers, args.repeat)
    if args.plot:
        default = by_chunk["chunksize default"]
        names = sorted(default, key=lambda n: -default[n])
        _plot.bars(args.plot, names, {label: [row.get(n) for n in names] for label, row in by_chunk.items()},
                   title=f"{args.tasks:,} tiny tasks on {args.workers} workers (fork), median of {args.repeat}",
                   xlabel="tasks per second (log scale)", log=True)


if __name__ == "__main__":
    main()
