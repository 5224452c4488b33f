"""The fault campaign (docs/reliability.md): interrupts at random moments of every nbmp call's
life, SIGKILL of the parent at random moments, and a table of what was lost or left behind.

    python scripts/fault_campaign.py --trials 1000 --seed 1      # make fault-campaign

Interrupt trials run in a child interpreter of their own session (one per scenario, many trials
each). Per trial the child signals it is about to make the call; after a random delay the
campaign sends SIGINT to the child's process group, as the Jupyter interrupt button does to a
kernel (its ``%%nbmp`` scenario uses a real kernel). The child then reports, and the campaign
counts:

* a **lost interrupt**: the call ran on and returned although the interrupt came while it ran,
  or nothing was raised at all (an interrupt that comes after the call returned is "late", not
  lost: the trial is counted apart);
* the **error time**: from the signal to the KeyboardInterrupt caught around the call;
* **orphans**: workers still alive 5 s after the interrupt (besides a warm Pool's, made before);
* **leaked bytes**: segments of the child's tree still live 5 s after it (janitor and /dev/shm);
* **tracebacks**: anything a worker printed on stderr (they ignore SIGINT);
* a **warm Pool** made before the trial that no longer maps (or does not say it is closed).

SIGKILL trials start a child busy with a Pool or ``spawn`` over shared arrays (random sharing
strategy and start method), kill it at a random moment, and count every process of its session
and its janitor still alive after 5 s (orphans) and its /dev/shm segments left (leaked bytes).

tests/test_faults.py runs a few trials of each kind inside ``make test``; the functions here are
what both use.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUND = 5.0  # seconds a segment (or, after a parent's SIGKILL, a worker) may take to go
ORPHAN_BOUND = 2.0  # seconds an interrupted call's workers may take to go (its tasks run longer)
AFTER = 3.0  # seconds the child waits after a call that returned, for an interrupt still to come

# --------------------------------------------------------------------------
# What a trial measured, and the table
# --------------------------------------------------------------------------


@dataclass
class Trial:
    kind: str
    seed: int
    delay: float = 0.0
    outcome: str = ""  # interrupted | late | lost | hang | killed
    error_s: Optional[float] = None  # signal -> KeyboardInterrupt
    orphans: List[str] = field(default_factory=list)
    leaked: Dict[str, int] = field(default_factory=dict)
    stderr: str = ""
    warm: str = "ok"

    @property
    def problems(self) -> List[str]:
        found = [f"{self.outcome} interrupt"] if self.outcome in ("lost", "hang") else []
        found += [f"orphans {self.orphans}"] if self.orphans else []
        found += [f"leaked {self.leaked}"] if self.leaked else []
        found += [f"printed {self.stderr!r}"] if _noisy(self.stderr) else []
        found += [f"warm Pool {self.warm}"] if self.warm not in ("ok", "closed") else []
        return found

    @property
    def in_finalizer(self) -> bool:
        """The interrupt landed in a finalizer (an array's release): Python prints and drops it
        there (docs/reliability.md, Limits)."""
        return "Exception ignored in: <finalize" in self.stderr and "KeyboardInterrupt" in self.stderr

    def __str__(self) -> str:
        took = "" if self.error_s is None else f", error after {self.error_s:.3f} s"
        return f"{self.kind} (seed {self.seed}, delay {self.delay * 1000:.0f} ms): {self.outcome}{took}"


def _noisy(stderr: str) -> bool:
    return any(word in stderr for word in ("Traceback", "KeyboardInterrupt", "Exception ignored", "Error"))


def table(trials: List[Trial]) -> str:
    """One Markdown row per kind of trial, and a total."""
    rows = ["| scenario | trials | interrupted | late | lost interrupts | orphans | leaked bytes | tracebacks "
            "| lost in a finalizer | warm Pool broken | median error (s) | slowest error (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    kinds = sorted({t.kind for t in trials}) + ["**all**"]
    for kind in kinds:
        some = [t for t in trials if kind in (t.kind, "**all**")]
        errors = sorted(t.error_s for t in some if t.error_s is not None)
        rows.append(f"| {kind} | {len(some)} | {_count(some, 'interrupted')} | {_count(some, 'late')} "
                    f"| {_count(some, 'lost') + _count(some, 'hang')} | {sum(len(t.orphans) for t in some)} "
                    f"| {sum(sum(t.leaked.values()) for t in some)} | {sum(_noisy(t.stderr) for t in some)} | {sum(t.in_finalizer for t in some)} "
                    f"| {sum(t.warm not in ('ok', 'closed') for t in some)} "
                    f"| {_fmt(errors[len(errors) // 2] if errors else None)} | {_fmt(errors[-1] if errors else None)} |")
    return "\n".join(rows)


def _count(trials: List[Trial], outcome: str) -> int:
    return sum(t.outcome == outcome for t in trials)


def _fmt(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"


# --------------------------------------------------------------------------
# The child: a warm Pool, then one call per trial, interrupted
# --------------------------------------------------------------------------

# What the child (and the kernel) run after a trial: wait for workers and segments to go,
# then check the warm Pool. ``warm`` and ``before`` are defined by the caller.
CHECKS = """
import gc, json, os, time
import psutil
import nbmp
from nbmp._sharing._ledger import live_segments

def _cmdline(p):
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone, or a zombie (whose command line cannot be read)
        return ""

def _helpers():
    return {p.pid for p in psutil.Process().children(recursive=True)
            if "resource_tracker" in _cmdline(p) or "forkserver" in _cmdline(p)}

def _ours():
    for _ in range(100):  # a child may go between listing and asking: ask again
        try:
            kids = {p.pid for p in psutil.Process().children(recursive=True)
                    if p.status() != psutil.STATUS_ZOMBIE}
            break
        except psutil.Error:
            time.sleep(0.01)
    else:  # one last time, letting the error show
        kids = {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}
    return kids - _helpers() - {p.pid for p in warm._pool}

def _segments(baseline=None):
    gc.collect()
    baseline = before if baseline is None else baseline
    found = dict(live_segments())
    pids = {os.getpid(), *_ours()}
    for name in os.listdir("/dev/shm"):
        if name.startswith("nbmp-") and name.split("-")[1].isdigit() and int(name.split("-")[1]) in pids:
            found.setdefault(name, os.stat(os.path.join("/dev/shm", name)).st_size)
    return {name: size for name, size in found.items() if name not in baseline}

def _wait(probe, bound):
    deadline = time.monotonic() + bound
    while True:
        found = probe()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)

def _warm_state():
    global warm
    try:
        ok = warm.map_async(abs, [-1, -2]).get(10) == [1, 2]
        return "ok" if ok else "wrong result"
    except ValueError as e:
        if "not running" not in str(e):
            return f"ValueError: {e}"
        warm = nbmp.Pool(2)
        return "closed"
    except BaseException as e:
        return f"{type(e).__name__}: {e}"

def after_trial(orphan_bound, bound):
    orphans = _wait(_ours, orphan_bound)
    for pid in orphans:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    leaked = _wait(_segments, bound)
    return {"orphans": [f"{p}" for p in orphans], "leaked": leaked, "warm": _warm_state()}
"""

CHILD = CHECKS + """
import signal, sys
import numpy as np

# An ignored SIGINT is inherited through exec (a parent that ignores it): the child takes Python's own.
signal.signal(signal.SIGINT, signal.default_int_handler)

def nap(x):  # 160 naps on 4 workers: 4 s, longer than any delay + ORPHAN_BOUND
    time.sleep(0.1)
    return x

def sleeper(i):
    time.sleep(6)

def total(a):
    time.sleep(0.05)
    return float(a.sum())

def pool_map():
    with nbmp.Pool(4) as p:
        p.map(nap, range(160), chunksize=1)

def pool_join(bare):
    global kept
    if bare:  # kept, as a notebook's global: no finalizer stops it
        kept = p = nbmp.Pool(4)
        p.map_async(nap, range(160), chunksize=1)
        p.close()
        p.join()
        return
    with nbmp.Pool(4) as p:
        p.map_async(nap, range(160), chunksize=1)
        p.close()
        p.join()

def shm_transfer():
    end = time.monotonic() + 3
    while time.monotonic() < end:
        a = nbmp.zeros(1 << 18, dtype="uint8")
        b = nbmp.share(np.ones(1 << 18, dtype="uint8"))
        q.put((a, b, np.ones(1 << 20, dtype="uint8")))
        q.get(timeout=10)

def drain():  # what the interrupt left in the queue is read, as a user would: its tickets go back
    while True:
        try:
            q.get(timeout=0.2)
        except Exception:  # queue.Empty
            return

def pool_shm_map():
    arrays = [nbmp.zeros(1 << 16) for _ in range(4)] + [np.ones(1 << 18) for _ in range(4)]
    with nbmp.Pool(4) as p:
        p.map(total, arrays * 10, chunksize=1)

def manager():  # a manager's start, 0.3 s of calls that carry shared arrays both ways, its shutdown
    with nbmp.Manager() as m:
        d, i = m.dict(), 0
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            d[i %% 20] = nbmp.zeros(1 << 14)
            d[i %% 20][0] = i
            i += 1

CALLS = {
    "pool-start": pool_map,
    "pool-map": pool_map,
    "pool-close-join": lambda: pool_join(bare=False),
    "pool-join-bare": lambda: pool_join(bare=True),
    "spawn-start": lambda: nbmp.spawn(sleeper, nprocs=4),
    "spawn-running": lambda: nbmp.spawn(sleeper, nprocs=4),
    "parallel-map": lambda: nbmp.parallel_map(nap, range(160), workers=4),
    "shm-transfer": shm_transfer,
    "pool-shm-map": pool_shm_map,
    "manager": manager,
}

scenario, trials = sys.argv[1], int(sys.argv[2])
q = nbmp.Queue()
warm = nbmp.Pool(2)
warm.map(abs, [-1, -2])
for _ in range(trials):
    before = _segments({})
    stage, end, caught = "call", None, None
    try:
        print(json.dumps({"ready": time.monotonic()}), flush=True)
        CALLS[scenario]()
        stage = "after"
        end = time.monotonic()
        time.sleep(%(after)r)
        stage = "none"
    except KeyboardInterrupt:
        caught = time.monotonic()
    drain()
    print(json.dumps({"stage": stage, "end": end, "caught": caught, **after_trial(%(orphans)r, %(bound)r)}), flush=True)
warm.terminate()
warm.join()
q.close()
q.join_thread()
""" % {"after": AFTER, "bound": BOUND, "orphans": ORPHAN_BOUND}

# Where each scenario's interrupt may land, seconds after the child said "ready".
SCENARIOS = {
    "pool-start": (0.0, 0.1),
    "pool-map": (0.1, 1.6),
    "pool-close-join": (0.1, 1.6),
    "pool-join-bare": (0.1, 1.6),
    "spawn-start": (0.0, 0.15),
    "spawn-running": (0.15, 2.0),
    "parallel-map": (0.0, 1.6),
    "shm-transfer": (0.0, 2.5),
    "pool-shm-map": (0.0, 1.2),
    "manager": (0.0, 0.33),
}


class Child:
    """A child interpreter in its own session; its stdout read line by line, its stderr
    collected as it comes (a thread each, so that a hung child is seen, not waited for)."""

    def __init__(self, source: str, *args: str) -> None:
        env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONPATH=ROOT)
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(source), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True, env=env, cwd=ROOT)
        self.lines: List[str] = []
        self.err: List[str] = []
        self.seen = {self.proc.pid}
        self._ready = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, into: List[str]) -> None:
        for line in stream:
            with self._ready:
                into.append(line)
                self._ready.notify_all()

    def line(self, timeout: float) -> Optional[Dict[str, Any]]:
        """The next line of stdout, as JSON; None if none came within ``timeout``."""
        with self._ready:
            if not self._ready.wait_for(lambda: self.lines or self.proc.poll() is not None, timeout):
                return None
            return json.loads(self.lines.pop(0)) if self.lines else None

    def stderr(self) -> str:
        with self._ready:
            text, self.err[:] = "".join(self.err), []
        return text

    def members(self) -> List[int]:
        """Live processes of the child's session (the child and whatever it started)."""
        found = []
        for proc in psutil.process_iter(["status"]):
            try:
                if os.getsid(proc.pid) == self.proc.pid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(proc.pid)
            except (OSError, psutil.Error):
                continue
        self.seen.update(found)
        return found

    def end(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
        finally:
            kill(self.members())
            self.proc.wait()
            for reader in self._readers:
                reader.join(10)
            self.proc.stdout.close()
            self.proc.stderr.close()

    def dump_stacks(self) -> None:
        """SIGABRT the session: faulthandler prints every thread's stack on stderr, the
        child's own first (what it waits for), then its workers'."""
        members = self.members()
        kill([pid for pid in members if pid == self.proc.pid], signal.SIGABRT)
        time.sleep(1)
        kill([pid for pid in members if pid != self.proc.pid], signal.SIGABRT)
        time.sleep(1)


def kill(pids: List[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def interrupt_trials(scenario: str, n: int, seed: int) -> List[Trial]:
    """``n`` trials of ``scenario`` in one child: each call interrupted at a random moment."""
    rng = random.Random(f"{scenario}-{seed}")
    lo, hi = SCENARIOS[scenario]
    child = Child(CHILD, scenario, str(n))
    trials: List[Trial] = []
    try:
        for _ in range(n):
            trial = Trial(scenario, seed, delay=rng.uniform(lo, hi))
            trials.append(trial)
            if child.line(120) is None:  # "ready"
                trial.outcome, trial.stderr = "hang", "child ended before the call: " + child.stderr()
                break
            time.sleep(trial.delay)
            os.killpg(child.proc.pid, signal.SIGINT)
            sent = time.monotonic()
            report = child.line(AFTER + 4 * BOUND + 30)
            if report is None:
                child.dump_stacks()
                trial.outcome, trial.stderr = "hang", child.stderr()
                break
            _judge(trial, report, sent)
            trial.stderr = child.stderr()
    finally:
        child.end()
    trials[-1].stderr += child.stderr()
    trials[-1].orphans += [f"{pid} (after the child exited)" for pid in child.members()]
    return trials


def _judge(trial: Trial, report: Dict[str, Any], sent: float) -> None:
    stage, end, caught = report["stage"], report["end"], report["caught"]
    if stage == "call":
        trial.outcome, trial.error_s = "interrupted", caught - sent
    elif stage == "after" and end is not None and end > sent + 0.02:
        trial.outcome, trial.error_s = "lost", caught - sent  # the call ran on after the interrupt
    elif stage == "after":
        trial.outcome = "late"  # the call had returned when the interrupt came
    else:
        trial.outcome = "lost"  # no KeyboardInterrupt at all
    trial.orphans, trial.leaked, trial.warm = report["orphans"], report["leaked"], report["warm"]


# --------------------------------------------------------------------------
# %%nbmp in a real kernel, interrupted by the kernel manager (the interrupt button)
# --------------------------------------------------------------------------

CELL = "%%nbmp -n 2\nimport time\ntime.sleep(6)\n"
KERNEL_WINDOW = (0.0, 1.5)


def kernel_trials(kernel: Any, n: int, seed: int) -> List[Trial]:
    """``n`` interrupted ``%%nbmp`` cells in ``kernel`` (tests/kernel.py's Kernel)."""
    rng = random.Random(f"kernel-{seed}")
    kernel.run("%load_ext nbmp\n" + CHECKS + "\nwarm = nbmp.Pool(2)\nwarm.map(abs, [1])").raise_for_error()
    trials = []
    try:
        for _ in range(n):
            trial = Trial("%%nbmp cell (kernel)", seed, delay=rng.uniform(*KERNEL_WINDOW))
            trials.append(trial)
            kernel.run("before = _segments({})").raise_for_error()
            _interrupt_cell(kernel, trial)
            cell = kernel.run(f"import json\nprint(json.dumps(after_trial({ORPHAN_BOUND!r}, {BOUND!r})))")
            if cell.error is not None:
                trial.warm = "kernel unusable: " + cell.error["ename"]
                break
            report = json.loads(cell.stdout.strip().splitlines()[-1])
            trial.orphans, trial.leaked, trial.warm = report["orphans"], report["leaked"], report["warm"]
    finally:
        kernel.run("warm.terminate()\nwarm.join()")
    return trials


def _interrupt_cell(kernel: Any, trial: Trial) -> None:
    client = kernel.client
    msg_id = client.execute(CELL)
    sent, busy = None, False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if busy and sent is None:
            time.sleep(trial.delay)
            kernel.manager.interrupt_kernel()
            sent = time.monotonic()
        try:
            msg = client.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty: nothing yet
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "busy":
            busy = True
        elif kind == "stream" and content["name"] == "stderr":
            trial.stderr += content["text"]
        elif kind == "error":
            trial.error_s = time.monotonic() - sent if sent else None
            trial.outcome = "interrupted" if content["ename"] == "KeyboardInterrupt" else "lost"
        elif kind == "status" and content["execution_state"] == "idle":
            break
    else:
        trial.outcome = "hang"
    client.get_shell_msg(timeout=60)
    if not trial.outcome:
        trial.outcome = "lost"  # the cell returned although the interrupt came 0-1.5 s into its 4 s


# --------------------------------------------------------------------------
# SIGKILL of the parent at a random moment
# --------------------------------------------------------------------------

BUSY = """
import sys, time
import numpy as np
import nbmp

kind, strategy, method = sys.argv[1:4]
nbmp.set_sharing_strategy(strategy)
ctx = nbmp.get_context(method)
data = nbmp.zeros(1 << 20, dtype="uint8")

def work(i, a):
    kept = [nbmp.share(np.ones(1 << 18, dtype="uint8")) for _ in range(4)]
    time.sleep(30)
    return a[:10], kept

print("{}", flush=True)
if kind == "pool":
    with ctx.Pool(3) as p:
        p.starmap(work, [(i, data) for i in range(6)], chunksize=1)
else:
    nbmp.spawn(work, args=(data,), nprocs=3, start_method=method)
"""
KILL_WINDOW = (0.0, 2.0)


def kill_trial(kind: str, strategy: str, method: str, seed: int) -> Trial:
    """Start a child busy with ``kind`` (pool or spawn), SIGKILL it after a random delay;
    whatever of its session or its janitor lives ``BOUND`` s later is an orphan, whatever of
    its /dev/shm segments is left is leaked."""
    rng = random.Random(f"kill-{kind}-{strategy}-{method}-{seed}")
    trial = Trial(f"SIGKILL {kind} {strategy} {method}", seed, delay=rng.uniform(*KILL_WINDOW))
    child = Child(BUSY, kind, strategy, method)
    try:
        if child.line(120) is None:
            trial.outcome, trial.stderr = "hang", child.stderr()
            return trial
        end = time.monotonic() + trial.delay
        while time.monotonic() < end:  # note every pid of the tree, for its segments' names
            child.members()
            time.sleep(0.02)
        child.members()
        os.kill(child.proc.pid, signal.SIGKILL)
        trial.outcome = "killed"
        deadline = time.monotonic() + BOUND
        while (_tree_left(child) or _segments_of(child.seen)) and time.monotonic() < deadline:
            time.sleep(0.05)
        trial.orphans = [str(pid) for pid in _tree_left(child)]
        trial.leaked = _segments_of(child.seen)
        trial.stderr = "".join(line for line in child.stderr().splitlines(True) if "Error" in line)
    finally:
        child.end()
        kill([pid for pid in _janitors(child.proc.pid)])
        for name in _segments_of(child.seen):
            os.unlink(os.path.join("/dev/shm", name))
    return trial


def _tree_left(child: Child) -> List[int]:
    return child.members() + _janitors(child.proc.pid)


def _janitors(root: int) -> List[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(arg.endswith("_janitor.py") for arg in cmdline) and str(root) in cmdline:
            found.append(proc.pid)
    return found


def _segments_of(pids: Any) -> Dict[str, int]:
    found = {}
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        if parts[0] == "nbmp" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) in pids:
            try:
                found[name] = os.stat(os.path.join("/dev/shm", name)).st_size
            except FileNotFoundError:
                continue
    return found


# --------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------


def campaign(trials: int, seed: int, only: Optional[Sequence[str]] = None) -> List[Trial]:
    """About ``trials`` trials: interrupts of every scenario, %%nbmp cells, parent kills
    (``only``: just these of the scenarios, "kernel" and "kill")."""
    import nbmp
    chosen = set(only or [*SCENARIOS, "kernel", "kill"])
    scenarios = [s for s in SCENARIOS if s in chosen]
    # A full campaign's shares: 63% interrupts of the scenarios, 10% %%nbmp cells, 27% parent
    # kills; a kind not chosen gives its share to the others.
    shares = {"interrupt": 0.63 if scenarios else 0.0, "kernel": 0.1 if "kernel" in chosen else 0.0,
              "kill": 0.27 if "kill" in chosen else 0.0}
    counts = {kind: trials * share / sum(shares.values()) for kind, share in shares.items()}
    kills = [(k, s, m) for k in ("pool", "spawn") for s in nbmp.get_all_sharing_strategies()
             for m in nbmp.get_all_start_methods()]
    per = max(1, int(counts["interrupt"]) // max(1, len(scenarios)))
    done: List[Trial] = []
    for round_ in range(max(1, per // 25) if scenarios else 0):  # batches of 25 per child: a slow leak shows up in time
        for scenario in scenarios:
            done += _report(interrupt_trials(scenario, min(per, 25), seed + round_))
    if counts["kernel"]:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from kernel import Kernel
        kernel = Kernel()
        try:
            done += _report(kernel_trials(kernel, max(1, int(counts["kernel"])), seed))
        finally:
            kernel.shutdown()
    if counts["kill"]:
        for i in range(max(len(kills), int(counts["kill"]))):
            done += _report([kill_trial(*kills[i % len(kills)], seed=seed + i)])
    return done


def _report(trials: List[Trial]) -> List[Trial]:
    for trial in trials:
        problems = trial.problems
        if problems:
            print(f"PROBLEM {trial}: {'; '.join(problems)}", flush=True)
    print(f"{trials[0].kind}: {len(trials)} trials", file=sys.stderr, flush=True)
    return trials


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="about how many trials in all")
    parser.add_argument("--seed", type=int, default=1, help="the first seed (trials reproduce from it)")
    parser.add_argument("--only", nargs="+", choices=[*SCENARIOS, "kernel", "kill"], metavar="KIND",
                        help=f"run only these kinds of trial: {', '.join([*SCENARIOS, 'kernel', 'kill'])}")
    args = parser.parse_args()
    started = time.monotonic()
    trials = campaign(args.trials, args.seed, only=args.only)
    print(f"\n{len(trials)} trials, seed {args.seed}, {time.monotonic() - started:.0f} s\n")
    print(table(trials))
    return 1 if any(t.problems for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
