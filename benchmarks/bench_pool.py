"""Throughput of a Pool on many tiny tasks: nbmp.Pool against the standard Pool and its peers.

100,000 calls of a trivial function on 2 workers; tasks per second, best of
``--repeat`` runs, pool start-up excluded (every library's pool is warmed with
one small map first). Prints a Markdown table with each rate relative to
``multiprocessing.Pool`` at the same chunksize.

    python benchmarks/bench_pool.py [--tasks 100000] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import time
from typing import Callable, Dict, List, Optional, Tuple

import nbmp


def tiny(x: int) -> int:
    return x + 1


Runner = Callable[[List[int]], List[int]]


def _timed(setup: Callable[[], Tuple[Runner, Callable[[], None]]], items: List[int], repeat: int) -> float:
    run, close = setup()
    try:
        run(items[:100])  # warm: workers started, function imported
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = run(items)
            best = min(best, time.perf_counter() - t0)
            assert out[-1] == items[-1] + 1
        return len(items) / best
    finally:
        close()


def _pool(factory: Callable[[], object], chunksize: Optional[int]) -> Callable[[], Tuple[Runner, Callable[[], None]]]:
    def setup() -> Tuple[Runner, Callable[[], None]]:
        pool = factory()
        return (lambda items: pool.map(tiny, items, chunksize)), pool.terminate  # type: ignore[attr-defined]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    items = list(range(args.tasks))
    print(f"{args.tasks:,} tiny tasks on {args.workers} workers (fork), tasks/s, best of {args.repeat}\n")
    print("| chunksize | library | tasks/s | vs multiprocessing.Pool |")
    print("|---|---|---:|---:|")
    for chunk in (None, 1000):
        rates = {name: _timed(setup, items, args.repeat) for name, setup in cases(args.workers, chunk).items()}
        base = rates["multiprocessing.Pool"]
        for name, rate in sorted(rates.items(), key=lambda kv: -kv[1]):
            print(f"| {chunk or 'default'} | {name} | {rate / 1e6:.2f} M | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
