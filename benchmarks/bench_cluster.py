"""nbmp on a Dask LocalCluster against the same work written directly with Dask.

Three measures, each the best of ``--repeat`` rounds (rounds interleaved, so that load
drift on a shared machine hits both sides alike), with nbmp's time as a ratio of Dask's:

* **start-up**: a ``LocalCluster(processes=True)`` of ``--workers`` workers and its
  Client, then the first call on fresh workers (nbmp imported there);
* **spawn**: ``nbmp.spawn(fn, nprocs=workers, cluster=client)`` of a trivial ``fn``
  against one ``client.submit`` per worker (pinned, as spawn pins its ranks) and
  ``client.gather``; nbmp's extra work is a forked process per rank, output relay and
  failure watch;
* **Pool.map**: ``--tasks`` tiny tasks through ``nbmp.Pool(cluster=client).map`` against
  ``client.map`` with one task per item (Dask's way) and with the same chunks as nbmp.

    python benchmarks/bench_cluster.py [--tasks 10000] [--workers 2] [--repeat 3] [--plot PATH]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List

import _plot
import distributed
import nbmp


def tiny(x: int) -> int:
    return x + 1


def rank_value(rank: int) -> int:
    return rank


def chunk_of(items: List[int]) -> List[int]:
    return [tiny(x) for x in items]


def _best(runs: Dict[str, Callable[[], object]], repeat: int) -> Dict[str, float]:
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def startup(workers: int) -> Dict[str, float]:
    """Seconds: the cluster and its Client, then each side's first call on fresh workers."""
    times: Dict[str, float] = {}
    for side in ("Dask client.submit", "nbmp.spawn"):
        t0 = time.perf_counter()
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
        client = distributed.Client(cluster)
        times[f"cluster start (before the {'first' if side.startswith('Dask') else 'second'} call)"] = \
            time.perf_counter() - t0
        t0 = time.perf_counter()
        if side == "nbmp.spawn":
            nbmp.spawn(rank_value, nprocs=workers, cluster=client, dashboard=False)
        else:
            addresses = sorted(client.scheduler_info()["workers"])
            client.gather([client.submit(rank_value, r, workers=[a], pure=False) for r, a in enumerate(addresses)])
        times[f"first call: {side}"] = time.perf_counter() - t0
        client.close()
        cluster.close()
    return times


def calls(client: distributed.Client, workers: int, tasks: int, repeat: int) -> Dict[str, float]:
    addresses = sorted(client.scheduler_info()["workers"])[:workers]
    items = list(range(tasks))
    size = -(-tasks // (4 * workers))  # nbmp's default chunksize
    chunks = [items[i:i + size] for i in range(0, tasks, size)]
    pool = nbmp.Pool(workers, cluster=client)
    runs: Dict[str, Callable[[], object]] = {
        "spawn: Dask client.submit": lambda: client.gather(
            [client.submit(rank_value, r, workers=[a], pure=False) for r, a in enumerate(addresses)]),
        "spawn: nbmp.spawn": lambda: nbmp.spawn(rank_value, nprocs=workers, cluster=client, dashboard=False),
        "map: Dask client.map, a task per item": lambda: client.gather(client.map(tiny, items, pure=False)),
        f"map: Dask client.map, chunks of {size}": lambda: client.gather(client.map(chunk_of, chunks, pure=False)),
        "map: nbmp.Pool.map": lambda: pool.map(tiny, items, progress=False),
    }
    try:
        return _best(runs, repeat)
    finally:
        pool.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    args = parser.parse_args()
    print(f"LocalCluster(processes=True), {args.workers} workers x 1 thread; best of {args.repeat}\n")
    print("| measure | seconds | vs Dask |")
    print("|---|---:|---:|")
    first = startup(args.workers)
    for name, seconds in first.items():
        base = first["first call: Dask client.submit"] if name.startswith("first call") else None
        print(f"| {name} | {seconds:.3f} | {f'{seconds / base:.2f}x' if base else ''} |")
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    try:
        best = calls(client, args.workers, args.tasks, args.repeat)
    finally:
        client.close()
        cluster.close()
    bases = {"spawn": best["spawn: Dask client.submit"], "map": best["map: Dask client.map, a task per item"]}
    for name, seconds in best.items():
        base = bases[name.split(":")[0]]
        print(f"| {name} ({args.tasks:,} tasks) | {seconds:.3f} | {seconds / base:.2f}x |"
              if name.startswith("map") else f"| {name} | {seconds:.3f} | {seconds / base:.2f}x |")
    if args.plot:
        rows = list(first) + list(best)
        _plot.bars(args.plot, rows, {"seconds": [first.get(r, best.get(r)) for r in rows]},
                   title=f"nbmp vs Dask on a LocalCluster of {args.workers} workers, best of {args.repeat}",
                   xlabel="seconds (log scale; lower is better)", log=True)


if __name__ == "__main__":
    main()
