"""How spawn's start cost grows: with the number of workers and with the parent's size.

For each parent resident size (0.1, 1 and 4 GiB of touched numpy memory, numpy and torch
imported: a notebook kernel holding data) a fresh interpreter times, for 2/4/8/16/32
trivial workers, from the call to all results:

* the raw floor: N x ``os.fork`` + ``waitpid`` (each fork copies the parent's page tables);
* ``nbmp.spawn`` (fork, output relayed, results returned, fork-safety resets on);
* ``nbmp.spawn(..., start_method="forkserver")``: workers forked by a small server process,
  whose size does not grow with the parent's (the target and arguments are pickled instead);
* torch's ``start_processes(start_method="fork")`` when torch is installed.

The parent's data (``--data``): ``arrays``, 1 MiB numpy arrays (4 KiB pages, the default);
``array``, one numpy array (numpy puts it on 2 MiB transparent huge pages); ``tensor``, one
torch tensor (torch's CPU allocator uses 4 KiB pages unless ``THP_MEM_ALLOC_ENABLE=1`` is set
before its first allocation). ``--collapse`` asks the kernel to move the parent's anonymous
memory onto huge pages before anything is timed (``madvise(MADV_COLLAPSE)``, Linux 6.1+) and
reports what that took: what fork costs once the page tables are 512 times smaller.

Run: ``PYTHONPATH=. python benchmarks/bench_scaling.py [--repeat N] [--sizes 0.1 1 4] [--data arrays|array|tensor]
[--collapse] [--plot PNG]``; prints a Markdown table of medians (rows take turns, run after run)
and ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Tuple

COUNTS = (2, 4, 8, 16, 32)


def trivial(i: int) -> int:
    return i


_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25  # <linux/mman.h>


def collapse_to_huge_pages() -> Tuple[float, int]:
    """Advise every private, writable, anonymous mapping of this process of 2 MiB or more onto
    transparent huge pages and collapse what is resident there now. Returns (seconds, bytes)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge = 1 << 21
    start, advised = time.perf_counter(), 0
    with open("/proc/self/maps") as maps:
        lines = maps.read().splitlines()
    for line in lines:
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if not fields[1].startswith("rw") or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue  # file-backed, shared, read-only, the stack: fork copies no page table for most of it
        low, high = (low + huge - 1) & ~(huge - 1), high & ~(huge - 1)
        if high - low >= huge:
            libc.madvise(low, high - low, _MADV_HUGEPAGE)
            libc.madvise(low, high - low, _MADV_COLLAPSE)  # fails (ignored) where a range cannot be collapsed
            advised += high - low
    return time.perf_counter() - start, advised


def _child(gib: float, repeat: int, data: str, collapse: bool) -> None:
    """In a fresh interpreter: hold ``gib`` GiB, then time every row for every count."""
    import numpy as np
    from bench_spawn import raw_fork_floor
    import nbmp
    try:
        import torch.multiprocessing as torch_mp
    except ImportError:
        torch_mp = None
    # Touched, so resident, as a kernel's data is; in 1 MiB arrays, which numpy does not put on
    # transparent huge pages (it advises them from 4 MiB): fork copies a page-table entry per
    # 4 KiB page, as for a kernel holding many mid-sized objects. One big array on huge pages
    # costs fork far less (--data array).
    ballast: List[object]
    if data == "array":
        ballast = [np.ones(int(gib * (1 << 30)) // 8)]
    elif data == "tensor":
        import torch
        ballast = [torch.ones(int(gib * (1 << 30)) // 8, dtype=torch.float64)]
    else:
        ballast = [np.ones(1 << 17) for _ in range(int(gib * 1024))]
    collapsed = collapse_to_huge_pages() if collapse else (0.0, 0)
    rss, huge = _rss(), _anon_huge()

    def spawn(n: int) -> None:
        assert nbmp.spawn(trivial, nprocs=n) == list(range(n))

    def forkserver(n: int) -> None:
        assert nbmp.spawn(trivial, nprocs=n, start_method="forkserver") == list(range(n))

    def torch_fork(n: int) -> None:
        torch_mp.start_processes(trivial, nprocs=n, start_method="fork")

    rows: List[Tuple[str, Callable[[int], None]]] = [("floor", raw_fork_floor), ("nbmp", spawn), ("forkserver", forkserver)]
    if torch_mp is not None:
        rows.append(("torch", torch_fork))
    for n in COUNTS:
        for _, fn in rows:
            fn(n)  # warm-up
        times: Dict[str, List[float]] = {name: [] for name, _ in rows}
        for _ in range(repeat):
            for name, fn in rows:
                start = time.perf_counter()
                fn(n)
                times[name].append(time.perf_counter() - start)
        print(json.dumps({"gib": gib, "rss": rss, "huge": huge, "collapse_s": collapsed[0], "n": n, **{k: statistics.median(v) for k, v in times.items()}}),
              flush=True)
    del ballast


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _anon_huge() -> int:
    """Bytes of this process's anonymous memory on transparent huge pages."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 1.0, 4.0], help="parent sizes, GiB")
    parser.add_argument("--plot", default=None, help="save a chart here (matplotlib)")
    parser.add_argument("--data", choices=("arrays", "array", "tensor"), default="arrays",
                        help="the parent's data: 1 MiB numpy arrays, one numpy array, one torch tensor")
    parser.add_argument("--huge", action="store_true", help="the same as --data array")
    parser.add_argument("--collapse", action="store_true",
                        help="move the parent's anonymous memory onto huge pages first (MADV_COLLAPSE)")
    parser.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    data = "array" if opts.huge else opts.data
    if opts.child is not None:
        _child(opts.child, opts.repeat, data, opts.collapse)
        return
    results = []
    for gib in opts.sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(gib), "--repeat", str(opts.repeat),
                              "--data", data] + (["--collapse"] if opts.collapse else []),
                             stdout=subprocess.PIPE, check=True, text=True).stdout
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    has_torch = any("torch" in r for r in results)
    described = {"arrays": "1 MiB numpy arrays", "array": "one numpy array", "tensor": "one torch tensor"}[data]
    print(f"Trivial workers, from the call to all results; parent with numpy (and torch) imported and the "
          f"given resident size ({described}{', collapsed onto huge pages first' if opts.collapse else ''}); "
          f"medians of {opts.repeat}; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {platform.system()}\n")
    for r in results:
        if r["n"] == COUNTS[0]:
            print(f"- {r['gib']:g} GiB: {r['huge'] / r['rss']:.0%} of the resident memory on huge pages"
                  + (f"; collapsing took {r['collapse_s']:.2f} s" if opts.collapse else ""))
    print()
    print("| parent RSS | workers | raw fork floor (ms) | nbmp.spawn (ms) | × floor | nbmp.spawn forkserver (ms) | × floor |"
          + (" torch start_processes fork (ms) | × floor | nbmp × torch |" if has_torch else ""))
    print("|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if has_torch else ""))
    for r in results:
        line = (f"| {r['rss'] / (1 << 30):.2f} GiB | {r['n']} | {r['floor'] * 1e3:.1f} | {r['nbmp'] * 1e3:.1f} "
                f"| {r['nbmp'] / r['floor']:.2f} | {r['forkserver'] * 1e3:.1f} | {r['forkserver'] / r['floor']:.2f} |")
        if has_torch:
            line += f" {r['torch'] * 1e3:.1f} | {r['torch'] / r['floor']:.2f} | {r['nbmp'] / r['torch']:.2f} |"
        print(line)
    if opts.plot:
        import _plot
        labels = [f"{r['gib']:g} GiB parent, {r['n']} workers" for r in results]
        series = {"raw fork floor": [r["floor"] * 1e3 for r in results],
                  "nbmp.spawn": [r["nbmp"] * 1e3 for r in results],
                  "nbmp.spawn, forkserver": [r["forkserver"] * 1e3 for r in results]}
        if has_torch:
            series["torch start_processes (fork)"] = [r.get("torch", 0) * 1e3 for r in results]
        _plot.bars(opts.plot, labels, series, title="spawn start: workers and parent size",
                   xlabel="milliseconds (log scale)", log=True)


if __name__ == "__main__":
    sys.exit(main())
