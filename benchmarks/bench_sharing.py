"""Round trips of big float32 arrays parent -> worker -> parent, nbmp side by side with its peers,
and the memory (summed PSS) of 4 workers reading one 1 GiB array; first, nbmp against its floors.

The floors, measured interleaved in one run, medians of --repeats (default 7):

* a shared array's round trip (it already lives in nbmp shared memory; sent through an nbmp
  Queue to a worker and back) against a hand-placed ``multiprocessing.shared_memory`` handle
  (name, shape, dtype through a stdlib Queue; the worker attaches, views, sends the handle back)
  and, when torch imports, a tensor shared with ``share_memory_()`` through torch's Queue;
* a fresh (ordinary, unshared) 1 GiB array through a Queue (put, the worker reads one element
  and answers) against a ``memcpy`` of it into prefaulted pages, and torch's fresh tensor.

Run: PYTHONPATH=. python benchmarks/bench_sharing.py [--plot docs/img/sharing.png] [--floors-only]
Prints Markdown tables (medians; fewer repetitions for the slow peers).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing import shared_memory
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import psutil

import _plot
import nbmp

MiB = 1 << 20
SIZES = {"1 MiB": MiB, "256 MiB": 256 * MiB, "1 GiB": 1024 * MiB}


def median_time(one: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        one()
        times.append(time.perf_counter() - t0)
        gc.collect()
    return statistics.median(times)


def reps_for(nbytes: int, fast: bool) -> int:
    if fast:
        return 200
    return 5 if nbytes <= 256 * MiB else 3


# --------------------------------------------------------------------------
# Echo workers: each returns what it gets
# --------------------------------------------------------------------------


def items(q: Any) -> Any:
    while True:
        item = q.get()
        if item is None:
            return
        yield item


def echo(q_in: Any, q_out: Any) -> None:
    for item in items(q_in):
        q_out.put(item)


def echo_shm(q_in: Any, q_out: Any) -> None:
    for name, shape, dtype in items(q_in):
        # Attaching registers the name with the resource tracker the whole tree shares (a
        # set: the parent's registration already holds it). Unregistering here, as was done
        # before, made the parent's own unlink print the tracker's KeyError.
        shm = shared_memory.SharedMemory(name)
        arr = np.ndarray(shape, dtype, buffer=shm.buf)
        q_out.put((name, arr.shape, arr.dtype.str))
        del arr
        shm.close()


class Echo:
    def __init__(self, ctx: Any, target: Callable[..., None] = echo) -> None:
        self.q_in, self.q_out = ctx.Queue(), ctx.Queue()
        self.p = ctx.Process(target=target, args=(self.q_in, self.q_out), daemon=True)
        self.p.start()

    def round_trip(self, item: Any) -> Any:
        self.q_in.put(item)
        return self.q_out.get()

    def close(self) -> None:
        self.q_in.put(None)
        self.p.join()


# --------------------------------------------------------------------------
# The contestants: each returns the median seconds per round trip for nbytes
# --------------------------------------------------------------------------


def nbmp_shared(nbytes: int) -> float:
    a = nbmp.zeros(nbytes // 4, dtype="float32")
    e = Echo(nbmp.get_context("fork"))
    e.round_trip(a)
    t = median_time(lambda: e.round_trip(a), 200)
    e.close()
    return t


def nbmp_unshared(nbytes: int) -> float:
    x = np.ones(nbytes // 4, dtype="float32")  # an ordinary array, already in memory
    e = Echo(nbmp.get_context("fork"))
    e.round_trip(x)
    t = median_time(lambda: e.round_trip(x), reps_for(nbytes, nbytes <= MiB))
    e.close()
    return t


def mp_queue(nbytes: int) -> Optional[float]:
    x = np.ones(nbytes // 4, dtype="float32")
    e = Echo(mp.get_context("fork"))
    t = median_time(lambda: e.round_trip(x), 20 if nbytes <= MiB else 1)
    e.close()
    return t


def mp_shared_memory(nbytes: int) -> float:
    shm = shared_memory.SharedMemory(create=True, size=nbytes)
    a = np.ndarray((nbytes // 4,), "float32", buffer=shm.buf)
    a[:] = 1
    e = Echo(mp.get_context("fork"), echo_shm)
    handle = (shm.name, a.shape, a.dtype.str)
    e.round_trip(handle)
    t = median_time(lambda: e.round_trip(handle), 200)
    e.close()
    del a
    shm.close()
    shm.unlink()
    return t


def torch_shared(strategy: str) -> Callable[[int], Optional[float]]:
    def run(nbytes: int) -> Optional[float]:
        try:
            import torch
            import torch.multiprocessing as tmp
        except ImportError:
            return None
        tmp.set_sharing_strategy(strategy)
        t_ = torch.ones(nbytes // 4, dtype=torch.float32).share_memory_()
        e = Echo(tmp.get_context("fork"))
        e.round_trip(t_)
        t = median_time(lambda: e.round_trip(t_), 200)
        e.close()
        return t
    return run


def _joblib_echo(x: Any) -> Any:
    return x


def joblib_memmap(nbytes: int) -> Optional[float]:
    try:
        from joblib import Parallel, delayed
    except ImportError:
        return None
    x = np.ones(nbytes // 4, dtype="float32")
    with Parallel(n_jobs=1 + 1, max_nbytes="1M", mmap_mode="r+") as par:
        par(delayed(_joblib_echo)(x) for _ in range(1))
        x[0] += 1  # a new content: joblib would otherwise reuse its cached dump
        t = median_time(lambda: par(delayed(_joblib_echo)(x) for _ in range(1)), 3 if nbytes > MiB else 20)
    return t


def memcpy(nbytes: int) -> float:
    src = np.ones(nbytes // 4, dtype="float32")
    dst = np.empty_like(src)
    dst[:] = 0
    return median_time(lambda: np.copyto(dst, src), 5)


def memcpy_fresh(nbytes: int) -> float:
    src = np.ones(nbytes // 4, dtype="float32")
    return median_time(lambda: np.copyto(np.empty_like(src), src), 3)


CONTESTANTS: Dict[str, Callable[[int], Optional[float]]] = {
    "nbmp, shared array (nbmp.zeros)": nbmp_shared,
    "nbmp, ordinary array (moved once)": nbmp_unshared,
    "multiprocessing.Queue (pickle)": mp_queue,
    "multiprocessing.shared_memory by hand": mp_shared_memory,
    "torch.multiprocessing, shared tensor (file_descriptor)": torch_shared("file_descriptor"),
    "torch.multiprocessing, shared tensor (file_system)": torch_shared("file_system"),
    "joblib memmapping (loky)": joblib_memmap,
    "one-process memcpy (prefaulted)": memcpy,
    "one-process memcpy (fresh pages)": memcpy_fresh,
}


# --------------------------------------------------------------------------
# The floors: nbmp and the floor measured turn about, in one run
# --------------------------------------------------------------------------


def answer_first(q_in: Any, q_out: Any) -> None:
    for item in items(q_in):
        q_out.put(float(item[0]))
        del item  # let go before waiting for the next one


class SelfTimed:
    """A contestant that times itself (to leave its preparation out): calling it returns seconds."""

    def __init__(self, run: Callable[[], float]) -> None:
        self.run = run


def interleaved(contestants: Dict[str, Any], reps: int) -> Dict[str, float]:
    """Median seconds of each callable (or :class:`SelfTimed`), run in turn ``reps`` times, so
    that the machine's load hits them alike."""
    times: Dict[str, List[float]] = {name: [] for name in contestants}
    for _ in range(reps):
        for name, one in contestants.items():
            if isinstance(one, SelfTimed):
                times[name].append(one.run())
                continue
            t0 = time.perf_counter()
            one()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def torch_or_none() -> Any:
    try:
        import torch
        import torch.multiprocessing
    except ImportError:
        return None
    return torch


def shared_round_trips(nbytes: int, reps: int) -> Dict[str, float]:
    torch = torch_or_none()
    a = nbmp.zeros(nbytes // 4, dtype="float32")
    shm = shared_memory.SharedMemory(create=True, size=nbytes)
    handle = (shm.name, (nbytes // 4,), "<f4")
    echoes = {"nbmp": (Echo(nbmp.get_context("fork")), a),
              "handle": (Echo(mp.get_context("fork"), echo_shm), handle)}
    if torch is not None:
        torch.multiprocessing.set_sharing_strategy("file_descriptor")
        echoes["torch"] = (Echo(torch.multiprocessing.get_context("fork")),
                           torch.zeros(nbytes // 4, dtype=torch.float32).share_memory_())
    try:
        for e, item in echoes.values():
            e.round_trip(item)  # warm: connections, the janitor, torch's fd server
        # 50 round trips per sample: single ones are tens of microseconds, below the noise
        return {name: t / 50 for name, t in interleaved(
            {name: (lambda e=e, item=item: [e.round_trip(item) for _ in range(50)])
             for name, (e, item) in echoes.items()}, reps).items()}
    finally:
        for e, _ in echoes.values():
            e.close()
        shm.close()
        shm.unlink()


def fresh_moves(nbytes: int, reps: int) -> Dict[str, float]:
    torch = torch_or_none()
    x = np.ones(nbytes // 4, dtype="float32")
    dst = np.empty_like(x)
    dst[:] = 0  # prefaulted
    e = Echo(nbmp.get_context("fork"), answer_first)
    contestants: Dict[str, Any] = {"nbmp": lambda: e.round_trip(x), "memcpy": lambda: np.copyto(dst, x)}
    if torch is not None:
        te = Echo(torch.multiprocessing.get_context("fork"), answer_first)

        def torch_fresh() -> float:
            t = torch.ones(nbytes // 4, dtype=torch.float32)  # fresh each time, made before the clock starts
            t0 = time.perf_counter()
            te.round_trip(t)  # torch moves it into new shared memory, in place
            return time.perf_counter() - t0
        contestants["torch"] = SelfTimed(torch_fresh)
    try:
        e.round_trip(x)  # warm: the worker, the janitor
        results = interleaved(contestants, reps)
    finally:
        e.close()
        if torch is not None:
            te.close()
    return results


def floors(reps: int) -> None:
    print(f"nbmp against its floors, measured in turn in one run; median of {reps}; "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
    print()
    print("| measure | floor | nbmp | nbmp / floor | torch | torch / floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, nbytes in (("256 MiB", 256 * MiB), ("1 GiB", 1024 * MiB)):
        r = shared_round_trips(nbytes, reps)
        print(row(f"round trip of a shared array, {label} (floor: a hand-placed shared_memory handle)",
                  r["handle"], r["nbmp"], r.get("torch")), flush=True)
    r = fresh_moves(1024 * MiB, reps)
    print(row("a fresh 1 GiB array through a Queue (floor: memcpy into prefaulted pages)",
              r["memcpy"], r["nbmp"], r.get("torch")), flush=True)
    print()


def row(label: str, floor: float, ours: float, torch: Optional[float]) -> str:
    peer = f"{fmt(torch)} | {torch / floor:.2f}×" if torch is not None else "n/a | n/a"
    return f"| {label} | {fmt(floor)} | {fmt(ours)} | {ours / floor:.2f}× | {peer} |"


# --------------------------------------------------------------------------
# Memory: 4 workers reading one array
# --------------------------------------------------------------------------


def read_and_report(q_in: Any, q_out: Any) -> None:
    arr = q_in.get()
    float(arr.sum(dtype="float64"))  # touch every page
    q_out.put(psutil.Process().memory_full_info().pss)
    q_in.get()  # hold the array until every reader has reported


def summed_pss(ctx: Any, arr: Any) -> int:
    q_in, q_out = ctx.Queue(), ctx.Queue()
    ps = [ctx.Process(target=read_and_report, args=(q_in, q_out)) for _ in range(4)]
    for p in ps:
        p.start()
    baseline = psutil.Process(ps[0].pid).memory_full_info().pss
    for _ in ps:
        q_in.put(arr)
    total = sum(q_out.get() for _ in ps)
    for _ in ps:
        q_in.put(None)
    for p in ps:
        p.join()
    return total - 4 * baseline


# --------------------------------------------------------------------------


def fmt(t: Optional[float]) -> str:
    if t is None:
        return "n/a"
    if t < 1e-3:
        return f"{t * 1e6:.0f} µs"
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    parser.add_argument("--repeats", type=int, default=7, help="samples per median for the floors")
    parser.add_argument("--floors-only", action="store_true", help="only nbmp against its floors")
    args = parser.parse_args()
    floors(args.repeats)
    if args.floors_only:
        return
    results: Dict[str, List[Optional[float]]] = {}
    for name, run in CONTESTANTS.items():
        results[name] = [run(n) for n in SIZES.values()]
        print(f"measured: {name}", file=sys.stderr, flush=True)
    ours = results["nbmp, shared array (nbmp.zeros)"][2]
    print("| round trip parent → worker → parent | " + " | ".join(SIZES) + " | 1 GiB vs nbmp shared |")
    print("|---|" + "---:|" * (len(SIZES) + 1))
    for name, ts in results.items():
        ratio = f"{ts[2] / ours:.1f}×" if ts[2] is not None and ours else "n/a"
        print(f"| {name} | " + " | ".join(fmt(t) for t in ts) + f" | {ratio} |")
    one_gib = 1024 * MiB
    shared = summed_pss(nbmp.get_context("fork"), nbmp.share(np.ones(one_gib // 4, dtype="float32")))
    small = 256 * MiB
    pickled = summed_pss(mp.get_context("fork"), np.ones(small // 4, dtype="float32"))
    print()
    print("| 4 workers reading one array | array | summed PSS | × one copy |")
    print("|---|---:|---:|---:|")
    print(f"| nbmp shared array | 1 GiB | {shared / 2**30:.2f} GiB | {shared / one_gib:.2f} |")
    print(f"| multiprocessing.Queue (pickle) | 256 MiB | {pickled / 2**30:.2f} GiB | {pickled / small:.2f} |")
    if args.plot:
        plot(results, args.plot)


def plot(results: Dict[str, List[Optional[float]]], path: str) -> None:
    names = list(results)
    _plot.bars(path, names, {label: [results[n][k] for n in names] for k, label in enumerate(SIZES)},
               title="float32 array parent → worker → parent (median round trip)",
               xlabel="seconds per round trip (log scale)", log=True)


if __name__ == "__main__":
    main()
