"""Fork safety, measured: nbmp next to plain multiprocessing and torch.multiprocessing.

1. the cost of nbmp's fork handlers: start + join of a no-op fork worker, numpy and torch loaded;
2. "fork after compute": the parent runs a parallel torch matmul, two forked workers each run one;
3. oversubscription: 2 forked workers x 12 numpy 800x800 matmuls after the parent used BLAS;
4. the garbage collector: in a parent holding 3 million small objects (a kernel's data), each of
   2 forked workers builds 800,000 small lists of its own; its private memory and its time.

Each case runs in a fresh interpreter. Prints a Markdown table. Usage:
    PYTHONPATH=. python benchmarks/fork_safety.py
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Dict, Optional

HANG_LIMIT = 10.0  # seconds a "fork after compute" run may take before it counts as hung

PEERS = {"multiprocessing": "import multiprocessing as mp",
         "torch.multiprocessing": "import torch.multiprocessing as mp",
         "nbmp": "import nbmp as mp"}

COMMON = """
import time, numpy as np
{peer}
try:
    import torch
except ImportError:
    torch = None
ctx = mp.get_context("fork")
def run_all(target, n, timeout):
    ps = [ctx.Process(target=target) for _ in range(n)]
    t = time.perf_counter()
    for p in ps: p.start()
    for p in ps: p.join(timeout)
    hung = any(p.is_alive() for p in ps)
    for p in ps:
        if p.is_alive(): p.kill(); p.join()
    return time.perf_counter() - t, hung
"""

CASES = {
    "fork start + join, no-op worker (ms each)": """
m = np.random.rand(200, 200); m @ m
if torch is not None:
    t = torch.randn(200, 200); t @ t
run_all(int, 3, 30)
total = 0.0
for _ in range(30):
    dt, _ = run_all(int, 1, 30)
    total += dt
print(total / 30 * 1000)
""",
    "torch fork after compute: 2 workers (s)": """
if torch is None: raise SystemExit(3)
torch.set_num_threads(2)
a = torch.randn(600, 600); (a @ a).sum()
def child():
    b = torch.randn(600, 600); (b @ b).sum()
dt, hung = run_all(child, 2, {limit})
print("hung" if hung else dt)
""",
    "2 workers x 12 numpy 800x800 matmuls (s)": """
m = np.random.rand(800, 800); m @ m          # the parent's BLAS pool: all cores
def child():
    x = np.random.rand(800, 800)
    for _ in range(12): x @ x
print(run_all(child, 2, 120)[0])
""",
}

# Case 4: what a worker's own collections cost when its parent holds many objects.
GARBAGE = """
data = [{{"k": i, "v": [i]}} for i in range(1_000_000)]   # 3 million small objects
q = ctx.SimpleQueue()
def child():
    t = time.perf_counter()
    mine = [[j] for j in range(800_000)]
    t = time.perf_counter() - t
    private = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean", "Private_Dirty")):
                private += int(line.split()[1])
    q.put((private / 1024, t))
run_all(child, 2, 120)
print(max(q.get()[{which}] for _ in range(2)))
"""
CASES["parent holds 3M objects; a worker builds 800k lists: its private memory (MB)"] = GARBAGE.replace("{which}", "0")
CASES["parent holds 3M objects; a worker builds 800k lists: its time (s)"] = GARBAGE.replace("{which}", "1")


def measure(peer: str, case: str) -> Optional[str]:
    src = textwrap.dedent(COMMON.format(peer=PEERS[peer]) + CASES[case].format(limit=HANG_LIMIT))
    try:
        out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "hung"
    if out.returncode == 3 or ("torch" in peer and "No module named 'torch'" in out.stderr):
        return None
    if out.returncode != 0:
        return "error"
    return out.stdout.strip().splitlines()[-1]


def cell(value: Optional[str], base: Optional[str]) -> str:
    if value is None:
        return "n/a"
    if value == "hung":
        return f"hangs (killed after {HANG_LIMIT:g} s)"
    text = f"{float(value):.3g}"
    if base not in (None, "hung", "error") and value != "error":
        text += f" ({float(value) / float(base):.2f}x)"
    return text


def main() -> None:
    rows: Dict[str, Dict[str, Optional[str]]] = {case: {peer: measure(peer, case) for peer in PEERS} for case in CASES}
    print("| case | " + " | ".join(PEERS) + " |")
    print("|---|" + "---|" * len(PEERS))
    for case, values in rows.items():
        base = values["multiprocessing"]
        print(f"| {case} | " + " | ".join(cell(values[p], base) for p in PEERS) + " |")


if __name__ == "__main__":
    main()
