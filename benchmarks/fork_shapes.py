"""Where a forked start's floor goes, and one shape of fork round that lowers it.

Two probes, in a parent that imported numpy, torch and nbmp (a notebook kernel's imports):

* **The interpreter's share of a child's start**: the page faults a child has taken by its
  first Python line, when forked by ``os.fork()`` (CPython's before/after-fork machinery:
  ``threading``'s, ``logging``'s and ``random``'s after-fork hooks, and the first Python the
  fresh child runs) and by glibc's ``fork()`` called through ctypes (the C library's and the
  frameworks' ``pthread_atfork`` handlers only). Every forked start pays the first figure:
  the raw floor, torch's workers and nbmp's alike.
* **Sequential against tree-shaped rounds** of N children that exit at once: the raw floor
  (N x ``os.fork`` + ``waitpid``, each fork copying the parent's page tables under the
  parent's mmap lock, so forks from one process never overlap), against a round where the
  parent forks the first ceil(N/2) children and each of those, as its first act, creates one
  more with ``clone(CLONE_PARENT)`` -- a child *of the parent*, which reaps all N as usual.
  The second copy of the page tables runs on another core while the parent makes its next
  fork: on a 2-core machine the core that sits idle during a sequential round's first forks
  is put to work. nbmp's own rounds do not fork this way: built and measured, a round of
  nbmp workers gained nothing on two cores, where the fork itself is not the bottleneck.

Linux on x86-64 or AArch64 only (the ``clone`` syscall's number). Rows take turns, run after
run; medians, and the median of the per-round ratios.

Run: ``PYTHONPATH=. python benchmarks/fork_shapes.py [--repeat N] [--counts 2 4 8]``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import resource
import statistics
import sys
from typing import Callable

import numpy  # noqa: F401  (the realistic parent: numpy and torch imported)

try:
    import torch  # noqa: F401
except ImportError:  # the parent is smaller; the shapes compare all the same
    torch = None

import nbmp  # noqa: F401  (its import adds its own after-fork hooks, as in a notebook using it)
from bench_spawn import measure, raw_fork_floor as sequential  # rows take turns; the raw floor

_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
_CLONE_PARENT, _SIGCHLD = 0x00008000, 17
_libc = ctypes.CDLL(None, use_errno=True)


def _clone_sibling() -> int:
    """A fork-like ``clone`` whose child is this process's parent's child: 0 in the child,
    its pid in the caller, -1 on failure. Only called in a fresh single-threaded child."""
    return int(_libc.syscall(ctypes.c_long(_SYS_CLONE), ctypes.c_long(_CLONE_PARENT | _SIGCHLD),
                             ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)))


def tree(n: int) -> None:
    """The parent forks ceil(n/2) children; each of the first n//2 clones one more as the
    parent's child and reports its pid through a pipe; the parent reaps all ``n``."""
    direct, delegated = (n + 1) // 2, n // 2
    reports_r, reports_w = os.pipe()
    pids = []
    for k in range(direct):
        pid = os.fork()
        if pid == 0:
            if k < delegated:
                sibling = _clone_sibling()
                if sibling == 0:
                    os._exit(0)
                os.write(reports_w, sibling.to_bytes(4, "little", signed=True))
            os._exit(0)
        pids.append(pid)
    os.close(reports_w)
    data = b""
    while True:  # EOF once every direct child has written (or died) and exited
        chunk = os.read(reports_r, 4 * delegated)
        if not chunk:
            break
        data += chunk
    os.close(reports_r)
    reported = [int.from_bytes(data[i:i + 4], "little", signed=True) for i in range(0, len(data), 4)]
    pids += [pid for pid in reported if pid > 0]
    for _ in range(delegated - sum(pid > 0 for pid in reported)):  # a clone failed: fork it here
        sequential(1)
    for pid in pids:
        os.waitpid(pid, 0)


def faults_at_first_line(fork: Callable[[], int], times: int = 15) -> float:
    """Median page faults a child has taken by its first Python line after ``fork()``."""
    read_end, write_end = os.pipe()
    counts = []
    for _ in range(times):
        pid = fork()
        if pid == 0:
            os.write(write_end, resource.getrusage(resource.RUSAGE_SELF).ru_minflt.to_bytes(8, "little"))
            os._exit(0)
        os.waitpid(pid, 0)
        counts.append(int.from_bytes(os.read(read_end, 8), "little"))
    os.close(read_end)
    os.close(write_end)
    return statistics.median(counts)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=31, help="timed rounds per row")
    parser.add_argument("--counts", type=int, nargs="+", default=[2, 4, 8], help="children per round")
    opts = parser.parse_args()
    if sys.platform != "linux" or _SYS_CLONE is None:
        print(f"fork_shapes: Linux on x86-64 or AArch64 only (this is {sys.platform} {platform.machine()})")
        return 0
    print(f"Parent with numpy{' and torch' if torch is not None else ''} and nbmp imported; Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.release()}\n")
    glibc_fork = _libc.fork
    print("| child forked by | page faults by its first Python line |")
    print("|---|---:|")
    print(f"| `os.fork()` | {faults_at_first_line(os.fork):.0f} |")
    print(f"| glibc `fork()` through ctypes | {faults_at_first_line(lambda: int(glibc_fork())):.0f} |\n")
    print("| children | sequential (ms) | tree-shaped (ms) | tree ÷ sequential, per round |")
    print("|---:|---:|---:|---:|")
    for n in opts.counts:
        rounds, trees = measure([("sequential", lambda: sequential(n)), ("tree", lambda: tree(n))], opts.repeat)
        ratio = statistics.median(t / s for t, s in zip(trees, rounds))
        print(f"| {n} | {statistics.median(rounds) * 1e3:.1f} | {statistics.median(trees) * 1e3:.1f} | {ratio:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
