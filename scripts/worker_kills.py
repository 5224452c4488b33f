"""Worker kills at random moments of random Pool lives (docs/reliability.md).

    python scripts/worker_kills.py --trials 500 --seed 1

Each trial makes a Pool (random start method, size and ``maxtasksperchild``), gives it one
call (``map``, ``starmap``, ``imap``, ``imap_unordered`` or ``apply_async`` of short tasks;
their results are bigger than the Pool's pipes in 30 % of trials, their arguments in 15 %), SIGKILLs one of its workers after a random delay in some trials, and ends the Pool the way
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


BIG = 4 << 20  # bytes: bigger than the Pool's pipes, so a kill can cut a task or result mid-way


def work_big_result(x: int) -> Any:
    """``work``, its value carried with a result bigger than the Pool's result pipe."""
    return work(x), b"r" * BIG


def work_big_task(item: Any) -> int:
    """``work`` of a task bigger than the Pool's task pipe: ``(x, payload)``."""
    x, payload = item
    if len(payload) != BIG:
        raise AssertionError("a big task came in short")
    return work(x)


SIZES = {"small": work, "big results": work_big_result, "big tasks": work_big_task}


def _items(size: str, n: int) -> List[Any]:
    payload = b"t" * BIG
    return [(i, payload) for i in range(n)] if size == "big tasks" else list(range(n))


def _values(got: List[Any], size: str) -> List[int]:
    if size != "big results":
        return got
    if any(len(payload) != BIG for _, payload in got):
        raise AssertionError("a big result came back short")
    return [value for value, _ in got]


def _hang(trial: str) -> None:
    print(f"HANG: {trial}", flush=True)
    faulthandler.dump_traceback(all_threads=True)
    os.system(f"ps -o pid,ppid,stat,wchan:20,cmd --ppid {os.getpid()}")
    sys.stdout.flush()
    os._exit(3)


def _call(pool: Any, how: str, items: List[Any], work: Any) -> List[Any]:
    if how == "map":
        return pool.map(work, items)  # type: ignore[no-any-return]
    if how == "starmap":
        return pool.starmap(work, [(item,) for item in items])  # type: ignore[no-any-return]
    if how == "imap":
        return list(pool.imap(work, items))
    if how == "imap_unordered":
        return sorted(pool.imap_unordered(work, items), key=lambda got: got[0] if isinstance(got, tuple) else got)
    return [r.get() for r in [pool.apply_async(work, (item,)) for item in items]]


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
    data = rng.choices(list(SIZES), weights=[0.55, 0.3, 0.15])[0]
    what = f"{method} Pool({size}, maxtasksperchild={limit}) {how} of {n} ({data}), end {end}, kill after {delay}"
    print(what, file=sys.stderr, flush=True)  # the last line on stderr names the trial that failed
    watchdog = threading.Timer(hang, _hang, (what,))
    watchdog.daemon = True
    watchdog.start()
    pool = nbmp.get_context(method).Pool(size, maxtasksperchild=limit)
    killer = threading.Thread(target=_kill_one, args=(pool, delay)) if delay is not None else None
    if killer is not None:
        killer.start()
    outcome = "ok"
    try:
        got = _values(_call(pool, how, _items(data, n), SIZES[data]), data)
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
    for i in range(args.trials):
        try:
            counts[trial(rng, args.hang)] += 1
        except BaseException:
            print(f"trial {i} failed:", flush=True)
            raise
    print(f"{args.trials} trials: {counts['ok']} gave every value, {counts['lost']} raised WorkerLostError, "
          f"no hang", flush=True)


if __name__ == "__main__":
    main()
