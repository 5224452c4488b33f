"""Worker kills at random moments of random Pool lives (docs/reliability.md).

    python scripts/worker_kills.py --trials 500 --seed 1

Each trial makes a Pool (random start method, size and ``maxtasksperchild``), gives it one
call (``map``, ``starmap``, ``imap``, ``imap_unordered`` or ``apply_async`` of short tasks),
SIGKILLs one of its workers after a random delay in some trials, and ends the Pool the way
notebooks do (``close(); join()``, ``terminate()``, or a ``with`` block). A trial passes
when the call gave every right value or raised :class:`nbmp.WorkerLostError`, and the Pool
ended with none of its workers alive. A trial that takes over ``--hang`` seconds prints
every thread's stack and the worker processes, and the campaign exits 3: that is the bug
this looks for (a call or a ``join`` waiting forever on what a dead worker held).

tests/test_faults.py runs a few trials inside ``make test``.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections import Counter
from typing import Any, List

import nbmp

CALLS = ("map", "starmap", "imap", "imap_unordered", "apply_async")
ENDS = ("close-join", "terminate", "with")


def work(x: int) -> int:
    time.sleep(random.random() * 0.02)
    return 2 * x


def _hang(trial: str) -> None:
    print(f"HANG: {trial}", flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os.system(f"ps -o pid,ppid,stat,wchan:20,cmd --ppid {os.getpid()}")
    sys.stdout.flush()
    os._exit(3)


def _call(pool: Any, how: str, n: int) -> List[int]:
    if how == "map":
        return pool.map(work, range(n))  # type: ignore[no-any-return]
    if how == "starmap":
        return pool.starmap(work, [(i,) for i in range(n)])  # type: ignore[no-any-return]
    if how == "imap":
        return list(pool.imap(work, range(n)))
    if how == "imap_unordered":
        return sorted(pool.imap_unordered(work, range(n)))
    return [r.get() for r in [pool.apply_async(work, (i,)) for i in range(n)]]


def _kill_one(pool: Any, delay: float) -> None:
    time.sleep(delay)
    alive = [w for w in list(pool._pool) if w.pid and w.exitcode is None]
    if alive:
        try:
            os.kill(random.choice(alive).pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def trial(rng: random.Random, hang: float) -> str:
    """One Pool life; returns "ok" or "lost" (a WorkerLostError), exits 3 on a hang."""
    method = rng.choice(nbmp.get_all_start_methods() + ["fork", "fork"])
    size, limit = rng.choice([1, 2, 3]), rng.choice([None, 1, 2, 5])
    how, end, n = rng.choice(CALLS), rng.choice(ENDS), rng.choice([1, 5, 20, 60])
    delay = rng.random() * 0.2 if rng.random() < 0.4 else None
    what = f"{method} Pool({size}, maxtasksperchild={limit}) {how} of {n}, end {end}, kill after {delay}"
    watchdog = threading.Timer(hang, _hang, (what,))
    watchdog.daemon = True
    watchdog.start()
    pool = nbmp.get_context(method).Pool(size, maxtasksperchild=limit)
    killer = threading.Thread(target=_kill_one, args=(pool, delay)) if delay is not None else None
    if killer is not None:
        killer.start()
    outcome = "ok"
    try:
        got = _call(pool, how, n)
        if got != [2 * i for i in range(n)]:
            raise AssertionError(f"{what}: wrong values {got}")
    except nbmp.WorkerLostError:
        outcome = "lost"
    finally:
        if killer is not None:
            killer.join()
        if end == "terminate":
            pool.terminate()
        elif end == "with":
            pool.__exit__(None, None, None)
        else:
            pool.close()
        pool.join()
    left = [w.pid for w in pool._pool if w.exitcode is None]
    if left:
        raise AssertionError(f"{what}: workers {left} alive after join()")
    watchdog.cancel()
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hang", type=float, default=60.0, help="seconds a trial may take (default 60)")
    args = parser.parse_args()
    # The watchdog and killer are threads of this script: nbmp warns about forking beside them.
    warnings.simplefilter("ignore", nbmp.ForkSafetyWarning)
    rng = random.Random(args.seed)
    counts: Counter = Counter()
    for _ in range(args.trials):
        counts[trial(rng, args.hang)] += 1
    print(f"{args.trials} trials: {counts['ok']} gave every value, {counts['lost']} raised WorkerLostError, "
          f"no hang", flush=True)


if __name__ == "__main__":
    main()
