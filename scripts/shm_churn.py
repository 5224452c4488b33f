"""A neighbour on the machine: another process tree doing multiprocessing work that
creates and removes its own /dev/shm entries, while the suite runs (``.ci/run`` starts it
beside the 3.13 suite; ``make test-under-load`` does the same by hand). The suite's leak
guard must count none of it.

Each round: a stdlib spawn Queue (named semaphores ``sem.mp-*``), a stdlib
SharedMemory block (``psm_*``), nbmp arrays in both sharing strategies (``nbmp-<pid>-*``
and memfds, under this process's own janitor), and a short burst of CPU in a worker.
It stops by itself after ``--seconds`` (or when its parent is gone). A round that has not
ended after ``--stuck`` seconds is a hang: every thread's traceback goes to stderr and the
neighbour exits with status 1, so that the run waiting for it fails instead of waiting for ever.

Usage: python scripts/shm_churn.py [--seconds 900] [--stuck 120]
"""

from __future__ import annotations

import argparse
import faulthandler
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing import shared_memory

import nbmp


def burn(seconds: float) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
    return n


def round_of_work(spawn: multiprocessing.context.BaseContext) -> None:
    queue = spawn.Queue()  # named semaphores: sem.mp-*
    block = shared_memory.SharedMemory(create=True, size=1 << 16)  # psm_*
    try:
        block.buf[:4] = b"load"
        for strategy in nbmp.get_all_sharing_strategies():
            nbmp.set_sharing_strategy(strategy)
            array = nbmp.zeros(1 << 14)
            nbmp.spawn(lambda rank, a: a.fill(rank + 1), args=(array,), nprocs=1)
            assert array[0] == 1
            del array
        with nbmp.get_context("fork").Pool(1) as pool:
            pool.apply(burn, (0.2,))
        time.sleep(0.1)
    finally:
        block.close()
        block.unlink()
        queue.close()
        queue.join_thread()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=900)
    parser.add_argument("--stuck", type=float, default=120)
    args = parser.parse_args()
    parent, deadline = os.getppid(), time.monotonic() + args.seconds
    spawn = multiprocessing.get_context("spawn")
    rounds, stopping = 0, []
    # SIGTERM (the Makefile's kill when the suite is done) ends the loop after the round in
    # flight, so that the neighbour too leaves nothing behind.
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while time.monotonic() < deadline and os.getppid() == parent and not stopping:
        faulthandler.dump_traceback_later(args.stuck, exit=True)
        round_of_work(spawn)
        faulthandler.cancel_dump_traceback_later()
        rounds += 1
    print(f"shm_churn: {rounds} rounds", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
