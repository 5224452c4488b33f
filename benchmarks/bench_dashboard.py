"""What the live dashboard costs: a 4-worker CPU-bound job with the dashboard off, as a
terminal status line, and as the ipywidgets view, side by side.

``spawn`` is built in parallel with the dashboard, so this drives real ``nbmp.Process``
workers itself and feeds the dashboard the events spawn emits (run/worker lifecycle and
per-worker task progress, 20 steps per worker). The widget view runs in-process without
a kernel (comms go nowhere), so it counts building and diffing the widget state but not
the ZeroMQ send. Parent CPU is this process's user+system time during the run (the
workers are not counted); the dashboard thread's own CPU time is reported separately.

    python benchmarks/bench_dashboard.py [--repeats 5] [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import sys
import time
from typing import Any, Dict, List

import nbmp
from nbmp import _events as ev
from nbmp.widgets import _choice

NPROCS, STEPS = 4, 20


class TTY(io.StringIO):
    """A terminal that keeps nothing: the text view draws its live line into it."""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return len(s)


def burn(i: int, q: Any, loops: int) -> None:
    for step in range(STEPS):
        x = 0
        for k in range(loops):
            x += k * k
        q.put((i, step + 1))


def calibrate(seconds: float) -> int:
    """Loops per step so that one worker computes for about ``seconds``."""
    loops, t = 100_000, time.perf_counter()
    x = 0
    for k in range(loops):
        x += k * k
    return int(loops * seconds / STEPS / (time.perf_counter() - t))


def make_sink(mode: str) -> Any:
    if mode == "off":
        return ev.Broadcast([])
    if mode == "widget":
        _choice._in_kernel = lambda: True  # the widget view without a kernel: comms go nowhere
    return nbmp.Dashboard(mode, stream=TTY(), watch=False)


def run_once(mode: str, loops: int, run_id: int) -> Dict[str, float]:
    sink = make_sink(mode)
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    q = nbmp.SimpleQueue()
    sink.handle(ev.RunStarted(run_id=run_id, target="burn", start_method=nbmp.get_start_method(), nprocs=NPROCS))
    procs = [nbmp.Process(target=burn, args=(i, q, loops)) for i in range(NPROCS)]
    for i, p in enumerate(procs):
        p.start()
        sink.handle(ev.WorkerStarted(run_id=run_id, index=i, pid=p.pid))
    for _ in range(NPROCS * STEPS):
        i, done = q.get()
        sink.handle(ev.TaskProgress(run_id=run_id, index=i, done=done, total=STEPS))
    for i, p in enumerate(procs):
        p.join()
        sink.handle(ev.WorkerExited(run_id=run_id, index=i, exitcode=p.exitcode))
    sink.handle(ev.RunFinished(run_id=run_id, ok=True))
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    q.close()
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    thread_cpu = getattr(sink, "thread_cpu_seconds", 0.0)
    return {"wall": wall, "cpu": cpu, "thread": thread_cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5, help="CPU seconds of work per worker")
    args = parser.parse_args()
    loops = calibrate(args.seconds)
    modes = ["off", "text", "widget"]
    results: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
    run_id = 0
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits every mode alike
        for mode in modes:
            run_id += 1
            results[mode].append(run_once(mode, loops, run_id))
    base = statistics.median(r["wall"] for r in results["off"])
    print(f"{NPROCS} workers x {args.seconds:.1f} CPU-s each, {STEPS} progress events per worker; "
          f"median of {args.repeats}; {os.cpu_count()} cores; Python {sys.version.split()[0]}\n")
    # On a loaded machine the wall-clock ratio is mostly noise; the CPU the dashboard adds
    # to the parent, against the CPU the workers need, bounds what it can take from them.
    work = NPROCS * args.seconds
    base_cpu = statistics.median(r["cpu"] for r in results["off"])
    print("| dashboard | wall (s) | vs off | parent CPU (s) | dashboard thread CPU (s) | added parent CPU / worker CPU |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        wall = statistics.median(r["wall"] for r in results[mode])
        cpu = statistics.median(r["cpu"] for r in results[mode])
        thread = statistics.median(r["thread"] for r in results[mode])
        print(f"| {mode} | {wall:.2f} | {wall / base:.3f}x ({(wall / base - 1) * 100:+.1f} %) | {cpu:.3f} | "
              f"{thread:.3f} | {(cpu - base_cpu) / work * 100:.2f} % |")


if __name__ == "__main__":
    main()
