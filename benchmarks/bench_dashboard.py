"""What the live dashboard costs: a 4-worker CPU-bound ``nbmp.spawn`` run with the
dashboard off, as a terminal status line, and as the ipywidgets view (plots included),
side by side; then a 4-worker ``nbmp.Pool.map`` of CPU-bound chunks with the widget
(plots and task timeline: one ``TaskRan`` event per chunk) against none.

Each worker computes for about ``--seconds`` CPU-seconds in 20 steps and prints a line
per step (relayed whole-line, and shown in the dashboard's output section). The widget
view runs in-process without a kernel (comms go nowhere), so it counts building and
diffing the widget state but not the ZeroMQ send. Parent CPU is this process's
user+system time during the run (the workers are not counted); the dashboard thread's
own CPU time is reported separately.

    PYTHONPATH=. python benchmarks/bench_dashboard.py [--repeats 5] [--seconds 1.5] [--plot PNG]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import statistics
import sys
import time
from typing import Dict, List, Optional

import _plot
import nbmp
from nbmp.widgets import _choice, _dashboard

NPROCS, STEPS = 4, 20


class TTY(io.StringIO):
    """A terminal that keeps nothing: the text view draws its live line into it."""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return len(s)


def burn(i: int, loops: int) -> int:
    for step in range(STEPS):
        x = 0
        for k in range(loops):
            x += k * k
        print(f"step {step + 1}/{STEPS}")
    return i


def calibrate(seconds: float) -> int:
    """Loops per step so that one worker computes for about ``seconds``."""
    loops, t = 100_000, time.perf_counter()
    x = 0
    for k in range(loops):
        x += k * k
    return int(loops * seconds / STEPS / (time.perf_counter() - t))


def dashboard(mode: str) -> Optional[nbmp.Dashboard]:
    if mode == "off":
        return None
    if mode == "widget":
        _choice._in_kernel = lambda: True  # the widget view without a kernel: comms go nowhere
        _dashboard.live_widget_updates = lambda: True  # redraws while the run goes, as in ipykernel
    return nbmp.Dashboard(mode, stream=TTY(), watch=False)


def burn_item(loops: int) -> int:
    x = 0
    for k in range(loops):
        x += k * k
    return loops


def run_once(mode: str, loops: int, pool: Optional[nbmp.Pool] = None) -> Dict[str, float]:
    board = dashboard(mode.replace("pool ", ""))
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if pool is not None:  # STEPS items per worker, four chunks per worker (the stdlib's default)
        results = pool.map(burn_item, [loops] * (NPROCS * STEPS), progress=board if board is not None else False)
        assert results == [loops] * (NPROCS * STEPS)
    else:
        with contextlib.redirect_stdout(TTY()):  # the workers' relayed lines
            results = nbmp.spawn(burn, args=(loops,), nprocs=NPROCS, dashboard=False,
                                 sinks=[board] if board is not None else [])
        assert results == list(range(NPROCS))
    if board is not None and mode.endswith("widget"):
        board.html()  # the static snapshot a notebook's cell keeps when the run ends
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    thread_cpu = board.thread_cpu_seconds if board is not None else 0.0
    if board is not None:
        board.close()
    return {"wall": wall, "cpu": cpu, "thread": thread_cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5, help="CPU seconds of work per worker")
    parser.add_argument("--plot", default=None, help="save a bar chart here (matplotlib)")
    args = parser.parse_args()
    loops = calibrate(args.seconds)
    modes = ["off", "text", "widget", "pool off", "pool widget"]
    results: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
    with nbmp.Pool(NPROCS) as pool:
        pool.map(burn_item, [1] * NPROCS)  # the workers are up before anything is timed
        for _ in range(args.repeats):  # interleaved, so drifting machine load hits every mode alike
            for mode in modes:
                results[mode].append(run_once(mode, loops, pool if mode.startswith("pool") else None))
    print(f"{NPROCS} workers x {args.seconds:.1f} CPU-s each: nbmp.spawn with {STEPS} output lines per worker, "
          f"nbmp.Pool.map of {STEPS} items per worker; median of {args.repeats}; {os.cpu_count()} cores; "
          f"Python {sys.version.split()[0]}\n")
    # On a loaded machine the wall-clock ratio is mostly noise; the CPU the dashboard adds
    # to the parent, against the CPU the workers need, bounds what it can take from them.
    work = NPROCS * args.seconds
    print("| run | dashboard | wall (s) | vs off | parent CPU (s) | dashboard thread CPU (s) | "
          "added parent CPU / worker CPU |")
    print("|---|---|---|---|---|---|---|")
    for mode in modes:
        off = "pool off" if mode.startswith("pool") else "off"
        base = statistics.median(r["wall"] for r in results[off])
        base_cpu = statistics.median(r["cpu"] for r in results[off])
        wall = statistics.median(r["wall"] for r in results[mode])
        cpu = statistics.median(r["cpu"] for r in results[mode])
        thread = statistics.median(r["thread"] for r in results[mode])
        print(f"| {'Pool.map' if off != 'off' else 'spawn'} | {mode.replace('pool ', '')} | {wall:.2f} | "
              f"{wall / base:.3f}x ({(wall / base - 1) * 100:+.1f} %) | {cpu:.3f} | "
              f"{thread:.3f} | {(cpu - base_cpu) / work * 100:.2f} % |")
    if args.plot:
        _plot.bars(args.plot, modes, {"wall clock (s)": [statistics.median(r["wall"] for r in results[m]) for m in modes],
                                      "parent CPU (s)": [statistics.median(r["cpu"] for r in results[m]) for m in modes]},
                   title=f"{NPROCS} CPU-bound workers with the dashboard off, as text, as a widget (median)",
                   xlabel="seconds")


if __name__ == "__main__":
    main()
