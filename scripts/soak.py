"""Run one ordinary nbmp program many times, each in a fresh interpreter, and report the runs
that failed or took far longer than the usual one (docs/reliability.md, "Soak").

    python scripts/soak.py --runs 200            # the Pool-over-arrays program below
    python scripts/soak.py --runs 100 my_prog.py # any script

A hang that comes once in a hundred runs hides from a test suite that runs each case once;
here it shows as a run seconds slower than the median. With ``--dump`` (gdb installed), a run
still alive ``--stall`` seconds after its usual time gets every thread's Python stack printed,
its children's too, before it is left to finish.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Shared and plain arrays over a Pool, three times: the claim of pooled segments, the janitor's
# round trips and the Pool's end, where hangs once in many runs have hidden.
PROGRAM = """
import time
import numpy as np
import nbmp

def total(a):
    time.sleep(0.05)
    return float(a.sum())

if __name__ == "__main__":
    for _ in range(3):
        arrays = [nbmp.zeros(1 << 16) for _ in range(4)] + [np.ones(1 << 18) for _ in range(4)]
        with nbmp.Pool(4) as p:
            assert p.map(total, arrays * 10, chunksize=1) == [float(a.sum()) for a in arrays * 10]
"""


def stacks(pid: int) -> str:
    """Every thread's Python stack in ``pid`` and its children (gdb's py-bt)."""
    found = []
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    for one in [str(pid), *children]:
        gdb = subprocess.run(["gdb", "-p", one, "-batch", "-iex", "set auto-load safe-path /",
                              "-ex", "thread apply all py-bt"], capture_output=True, text=True)
        found.append(f"== process {one}\n{gdb.stdout}")
    return "\n".join(found)


def run_once(script: str, usual: Optional[float], stall: float, dump: bool) -> Tuple[float, int, str]:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, PYTHONPATH=ROOT, PYTHONFAULTHANDLER="1"))
    dumped = ""
    while proc.poll() is None:
        time.sleep(0.05)
        late = usual is not None and time.monotonic() - started > usual + stall
        if dump and late and not dumped:
            dumped = stacks(proc.pid) or "(no stacks)"
    output = proc.communicate()[0]
    return time.monotonic() - started, proc.returncode, output + (f"\n{dumped}" if dumped else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", nargs="?", help="a Python script (default: the Pool-over-arrays program)")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--stall", type=float, default=2.0, help="seconds beyond the median that count as a stall")
    parser.add_argument("--dump", action="store_true", help="print a stalled run's stacks (needs gdb)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = args.script
        if script is None:
            script = os.path.join(tmp, "pool_over_arrays.py")
            with open(script, "w") as f:
                f.write(PROGRAM)
        times: List[float] = []
        bad = 0
        for i in range(args.runs):
            usual = statistics.median(times) if len(times) >= 5 else None
            took, code, output = run_once(script, usual, args.stall, args.dump)
            times.append(took)
            if code != 0 or (usual is not None and took > usual + args.stall):
                bad += 1
                print(f"run {i}: exit {code}, {took:.2f} s (median {usual or took:.2f} s)\n{output}", flush=True)
    print(f"{args.runs} runs: median {statistics.median(times):.2f} s, slowest {max(times):.2f} s, "
          f"{bad} failed or stalled (> median + {args.stall:g} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
