"""Run CPython's own multiprocessing tests with nbmp in place of ``multiprocessing``.

    python scripts/cpython_mp_suite.py [--methods fork spawn forkserver]
                                       [--types processes threads manager misc]

For each start method it runs ``test._test_multiprocessing`` (the interpreter's test
package; pyenv and python.org builds ship it) twice, in fresh interpreters: once as is
(the standard module) and once with nbmp in the standard package's place, as a program
would put it there: ``sys.modules["multiprocessing"]`` is ``nbmp`` and every mirrored
submodule (``multiprocessing.pool``, ``.connection``, ``.util``, ...) is nbmp's (the tests
also read and patch private names, ``multiprocessing.process._dangling``,
``multiprocessing.shared_memory._make_filename``: the mirrors must carry them). The
test classes are built as ``Lib/test/test_multiprocessing_<method>`` builds them
(``install_tests_in_module_dict``), all four kinds by default (``misc``: the plain
TestCase classes), so every ``self.Process``, ``self.Queue``, ``self.Pool``,
``multiprocessing.get_context(...)`` and ``set_start_method`` in the tests is nbmp's. It
prints, per method, the counts for both, the tests whose outcome differs, the
``/dev/shm`` entries a run left behind and the processes a test left running; the exit status is 1 when nbmp fails a test the
standard module passes (and fails it again when rerun alone), unless docs/dropin.md lists
the test as deliberate.

The child interpreters (spawn, forkserver) re-run this file as ``__mp_main__``: the
swap happens at import, driven by environment variables, so they see the same modules.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from typing import Any, Callable, Dict, List, Optional, Set

IMPL_VAR, METHOD_VAR, TYPES_VAR, ONLY_VAR = "NBMP_SUITE_IMPL", "NBMP_SUITE_METHOD", "NBMP_SUITE_TYPES", "NBMP_SUITE_ONLY"
TEST_TIMEOUT_VAR = "NBMP_SUITE_TEST_TIMEOUT"
SHM_DIR = "/dev/shm"  # POSIX shared memory and named semaphores (sem.*) live here on Linux
MODULE = "_nbmp_cpython_suite_tests"  # the test classes' importable home (spawn children unpickle them)
MIRRORS = ["connection", "context", "dummy", "dummy.connection", "forkserver", "heap", "managers", "pool",
           "popen_fork", "popen_forkserver", "popen_spawn_posix", "process", "queues", "reduction", "resource_sharer",
           "resource_tracker", "shared_memory", "sharedctypes", "synchronize", "util"]
STDLIB_ONLY = ["spawn"]  # nbmp.spawn is torch's function: the tests' multiprocessing.spawn is the standard module


# Tests where nbmp differs on purpose (docs/dropin.md says why); by test name, any class.
DELIBERATE = {
    "test_get_all_start_methods": "nbmp's default start method is fork, first in the list, on every Python (the standard module's is forkserver on 3.14+)",
    "test_unpickleable_result": "the 'unpicklable' result is a lambda: cloudpickle sends it",
    "test_queue_feeder_donot_stop_onexc": "Queue.put pickles in the caller: the error is raised there, not in the feeder",
    "test_queue_feeder_on_queue_feeder_error": "Queue.put pickles in the caller: the error is raised there, not in the feeder",
}


# Tests left out for both modules, by id (class.test): they test neither nbmp nor a difference.
LEFT_OUT = {
    # 3.11's version sleeps support.LONG_TIMEOUT (300 s) in ThreadPool workers, which cannot be
    # stopped: when a worker takes a task before terminate() empties the queue, join() waits
    # the whole 300 s (with the standard module as with nbmp; CPython 3.12 sleeps 1 s there).
    "WithThreadsTestPool.test_terminate",
}


# --------------------------------------------------------------------------
# In the interpreter that runs the tests (and in its spawned children)
# --------------------------------------------------------------------------

def swap_in_nbmp() -> None:
    """Put nbmp in the standard package's place, as a program would: ``sys.modules["multiprocessing"]``
    and every ``multiprocessing.<name>`` that nbmp mirrors become nbmp's modules."""
    import importlib
    import nbmp
    for name in MIRRORS:
        sys.modules[f"multiprocessing.{name}"] = importlib.import_module(f"nbmp.{name}")
    sys.modules["multiprocessing"] = nbmp


def build_tests() -> types.ModuleType:
    """The module holding the test classes for this interpreter's method and types. Each kind
    is also kept apart, as CPython's ``test_multiprocessing_<method>`` package keeps it in a
    module of its own with its own set-up (``run_tests``): a misc test that leaves the start
    method unset must not move the next kind's tests to the default method."""
    import importlib
    for name in MIRRORS + STDLIB_ONLY:  # every stdlib submodule loads now, against the real package
        importlib.import_module(f"multiprocessing.{name}")
    if os.environ.get(IMPL_VAR) == "nbmp":
        swap_in_nbmp()
    import test._test_multiprocessing as suite
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    module.kinds = []
    method = os.environ.get(METHOD_VAR, "fork")
    for type_ in os.environ.get(TYPES_VAR, "processes threads manager misc").split():
        kind: Dict[str, Any] = {"__name__": MODULE}  # install_tests_in_module_dict names the classes' module by it
        if type_ == "misc":  # the plain TestCase classes (start methods, resource tracker, wait, ...)
            suite.install_tests_in_module_dict(kind, method, exclude_types=True)
        else:
            suite.install_tests_in_module_dict(kind, method, only_type=type_)
        # The classes' importable home: spawned children unpickle them by it.
        module.__dict__.update((name, obj) for name, obj in kind.items() if isinstance(obj, type))
        module.kinds.append(kind)
    return module


def run_tests(module: types.ModuleType) -> None:
    """Run the test classes of ``module``, kind by kind, each between its own set-up and tear-down."""
    import unittest
    loader = unittest.TestLoader()
    for kind in module.kinds:
        tests = [t for name, obj in sorted(kind.items())
                 if isinstance(obj, type) and issubclass(obj, unittest.TestCase)
                 for t in _flatten(loader.loadTestsFromTestCase(obj)) if t.id().split(".", 1)[1] not in LEFT_OUT]
        run_suite(tests, kind["setUpModule"], kind["tearDownModule"])


def run_suite(tests: List[Any], set_up: Callable[[], Any] = lambda: None,
              tear_down: Callable[[], Any] = lambda: None) -> None:
    """Run ``tests`` (those --only names, when given) between ``set_up`` and ``tear_down``,
    printing one ``@@ outcome test_id`` line per test as it ends, the /dev/shm names made and
    the processes left."""
    import faulthandler
    import unittest
    # A driver started in the background (``make cpython-suite &``) hands its children
    # SIGINT ignored; the tests that send SIGINT expect Python's default handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    per_test = float(os.environ.get(TEST_TIMEOUT_VAR, "300"))
    seen = _shm_names()
    children = _children()

    class Result(unittest.TextTestResult):
        # A test that hangs dumps every thread's stack to stderr and ends the run, as
        # regrtest's --timeout does: the driver prints it and names the test.
        def startTest(self, test: Any) -> None:
            _note_shm(seen, f"(before {test.id()})")
            print(f"@@ start {test.id()}", file=sys.__stdout__, flush=True)
            faulthandler.dump_traceback_later(per_test, exit=True)
            super().startTest(test)

        def stopTest(self, test: Any) -> None:
            faulthandler.cancel_dump_traceback_later()
            super().stopTest(test)
            _note_shm(seen, test.id())
            _note_children(children, test.id())

        def _report(self, outcome: str, test: Any) -> None:
            print(f"@@ {outcome} {test.id()}", file=sys.__stdout__, flush=True)

        def addSuccess(self, test: Any) -> None:
            super().addSuccess(test); self._report("ok", test)

        def addFailure(self, test: Any, err: Any) -> None:
            super().addFailure(test, err); self._report("FAIL", test)

        def addError(self, test: Any, err: Any) -> None:
            super().addError(test, err); self._report("ERROR", test)

        def addSkip(self, test: Any, reason: str) -> None:
            super().addSkip(test, reason); self._report("skip", test)

        def addExpectedFailure(self, test: Any, err: Any) -> None:
            super().addExpectedFailure(test, err); self._report("ok", test)

        def addUnexpectedSuccess(self, test: Any) -> None:
            super().addUnexpectedSuccess(test); self._report("ok", test)

    only = os.environ.get(ONLY_VAR)
    if only:  # --only: the tests whose id contains one of these words
        tests = [t for t in tests if any(w in t.id() for w in only.split())]
    if not tests:  # a kind none of them is in: not even its set-up
        return
    set_up()
    try:
        unittest.TextTestRunner(stream=sys.stderr, resultclass=Result, verbosity=0).run(unittest.TestSuite(tests))
    finally:
        tear_down()
        _note_shm(seen, "(the module's set-up and tear-down)")


def _note_shm(seen: Set[str], where: str) -> None:
    """Print the /dev/shm names made since the last look (the driver reports those left at the end)."""
    new = _shm_names() - seen
    for name in sorted(new):
        print(f"@@ shm {name} {where}", file=sys.__stdout__, flush=True)
    seen.update(new)


def _note_children(before: Set[int], test_id: str, settle: float = 2.0) -> None:
    """Print the processes a test left: descendants of this interpreter that were not there
    before it, still alive ``settle`` seconds after it ended (each is named once)."""
    deadline = time.monotonic() + settle
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in sorted(left):
        print(f"@@ left {pid} {test_id}", file=sys.__stdout__, flush=True)
    before.update(left)


def _children() -> Set[int]:
    """Live descendants of this process but the standard module's helpers (the resource
    tracker, the fork server: they serve every test); a fork server's workers count."""
    import psutil
    helpers = {"multiprocessing.resource_tracker", "multiprocessing.forkserver"}
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and not any(h in " ".join(child.cmdline()) for h in helpers):
                found.add(child.pid)
        except psutil.Error:  # ended meanwhile
            continue
    return found


def _shm_names() -> Set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _flatten(suite: Any) -> List[Any]:
    import unittest
    if isinstance(suite, unittest.TestSuite):
        return [t for s in suite for t in _flatten(s)]
    return [suite]


# A test interpreter, or one of its spawned children (not a script importing this one): build the same tests.
if os.environ.get(IMPL_VAR) and __name__ in ("__main__", "__mp_main__"):
    _tests = build_tests()


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------

def run_one(impl: str, method: str, timeout: float, only: List[str], script: str = __file__,
            env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``script --child`` (its tests for ``impl`` and ``method``) in a fresh interpreter;
    its outcomes, what it left, how long it took."""
    env = {**os.environ, **(env or {}), IMPL_VAR: impl, METHOD_VAR: method, ONLY_VAR: " ".join(only)}
    started = time.monotonic()
    # Its output goes to files and it runs in a session of its own: a process it leaves
    # running cannot hold the driver's pipes open, and is found by its session id.
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        proc = subprocess.Popen([sys.executable, os.path.abspath(script), "--child"], env=env,
                                stdout=out_file, stderr=err_file, text=True, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            hung = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            hung = True
        finally:
            outlived = _end_session(proc.pid)
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    outcomes: Dict[str, str] = {}
    last_started = None
    made: Dict[str, str] = {}  # /dev/shm name -> the test during which it appeared
    left_running: Dict[str, str] = {}  # pid -> the test after which it was still alive
    for line in out.splitlines():
        line = line[max(line.find("@@ "), 0):]  # a test's own print without a newline may come first
        if line.startswith(("@@ shm ", "@@ left ")):
            _, kind, name, where = line.split(" ", 3)
            (made if kind == "shm" else left_running)[name] = where if where.startswith("(") else where.split(".", 1)[1]
        elif line.startswith("@@ "):
            _, outcome, test_id = line.split(" ", 2)
            if outcome == "start":
                last_started = test_id.split(".", 1)[1]
            else:
                outcomes[test_id.split(".", 1)[1]] = outcome
    if hung or proc.returncode != 0:  # a hang or a crash: say where, with the child's last words
        print(f"{method} {impl}: the run {'hung' if hung else f'exited with {proc.returncode}'}"
              f" during {last_started or 'start-up'}; its stderr ends with:\n{err[-6000:]}", flush=True)
    left = _left_in_shm(made)
    for name, test_id in sorted(left.items()):
        # Reported, not failed on: other processes on a shared machine make and remove their own.
        print(f"{method} {impl}: /dev/shm/{name} was made during {test_id} and is still there after the run",
              flush=True)
    for pid, test_id in sorted(left_running.items()):
        print(f"{method} {impl}: process {pid} was still running after {test_id}", flush=True)
    for pid, command in sorted(outlived.items()):
        print(f"{method} {impl}: process {pid} ({command}) outlived the run; ended by the driver", flush=True)
        left_running.setdefault(str(pid), "(the run)")
    return {"outcomes": outcomes, "hung": hung, "seconds": round(time.monotonic() - started),
            "stderr_tail": err[-4000:], "returncode": proc.returncode, "last_started": last_started,
            "left_in_shm": left, "left_running": left_running}


def _end_session(sid: int, settle: float = 5.0) -> Dict[int, str]:
    """The processes of session ``sid`` still alive ``settle`` seconds after its leader ended
    (the resource tracker and fork server end by themselves meanwhile), killed: the others
    first, then, given ``settle`` seconds more to unlink what they were told of (a hung run's
    semaphores), the resource trackers."""
    import psutil

    def alive(trackers: bool) -> Dict[int, str]:
        found = {}
        for pid in psutil.pids():
            try:
                if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    command = " ".join(psutil.Process(pid).cmdline())
                    if trackers or "resource_tracker" not in command:
                        found[pid] = command[:120]
            except (OSError, psutil.Error):  # ended meanwhile
                continue
        return found

    left: Dict[int, str] = {}
    for trackers in (False, True):
        deadline = time.monotonic() + settle
        while (now := alive(trackers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in now:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        left.update(now)
    return left


def _left_in_shm(made: Dict[str, str], settle: float = 3.0) -> Dict[str, str]:
    """The names in ``made`` still in /dev/shm once the run's resource trackers have had
    ``settle`` seconds to remove what they were told of (they outlive the run's interpreter)."""
    deadline = time.monotonic() + settle
    while True:
        left = {name: test_id for name, test_id in made.items() if name in _shm_names()}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def confirmed(rerun: Callable[[List[str]], Dict[str, Any]], suspects: List[str]) -> List[str]:
    """The ``suspects`` (nbmp failed or skipped, stdlib passed) that do so again when ``rerun`` alone.

    Some of CPython's tests are timing-sensitive and fail now and then on a busy machine
    with either module, and some skip after a test that leaves the start method unset (the
    standard module's baseline run, of nbmp's failures only, runs them without it); a
    difference counts only when nbmp's outcome repeats."""
    if not suspects:
        return []
    again = rerun(suspects)["outcomes"]
    repeated = [test_id for test_id in suspects if again.get(test_id) != "ok"]
    for test_id in suspects:
        print(f"    rerun of {test_id} with nbmp: {again.get(test_id, 'not run')}"
              f"{'' if test_id in repeated else '  (passed alone: not a difference; a failure of timing, or a skip the tests before it made)'}")
    return repeated


def count(outcomes: Dict[str, str]) -> Dict[str, int]:
    counts = {"ok": 0, "FAIL": 0, "ERROR": 0, "skip": 0}
    for outcome in outcomes.values():
        counts[outcome] += 1
    return counts


def arguments(doc: str) -> argparse.ArgumentParser:
    """The options both suites take."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["fork", "spawn", "forkserver"])
    parser.add_argument("--impls", nargs="+", default=["stdlib", "nbmp"])
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run (default 1200)")
    parser.add_argument("--test-timeout", type=float, default=300,
                        help="seconds per test before its stacks are dumped and the run ends (default 300)")
    parser.add_argument("--only", nargs="+", default=[], help="run only the tests whose id contains one of these")
    parser.add_argument("--baseline", choices=["all", "failures"], default="all",
                        help="run the standard module on every test, or after nbmp only on the tests nbmp did "
                             "not pass, a skip included (failures: about half the time, and only nbmp's counts are complete)")
    parser.add_argument("--json", help="also write the full results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def compare(args: argparse.Namespace, run: Callable[[str, str, List[str]], Dict[str, Any]],
            deliberate: Dict[str, str], processes_must_end: bool = False) -> int:
    """Run the tests per method with each of ``args.impls`` (``run(impl, method, only)``), print
    the counts and every test whose outcome differs; 1 when nbmp fails, again when rerun alone,
    a test the standard module passes and ``deliberate`` does not name (by test name, any
    class), or (``processes_must_end``) when a test left a process of nbmp's run running."""
    os.environ[TEST_TIMEOUT_VAR] = str(args.test_timeout)
    results: Dict[str, Dict[str, Any]] = {}
    regressions = 0
    for method in args.methods:
        for impl in sorted(args.impls, reverse=args.baseline == "all"):  # nbmp first where its failures pick the baseline
            only = args.only
            if impl == "stdlib" and args.baseline == "failures":
                # Skips too: one the standard module runs is a difference (a start method gone astray).
                only = [test_id for test_id, outcome in results[f"nbmp/{method}"]["outcomes"].items() if outcome != "ok"]
                if not only:  # nbmp passed them all: nothing to compare
                    results[f"stdlib/{method}"] = {"outcomes": {}, "seconds": 0, "hung": False}
                    continue
            results[f"{impl}/{method}"] = result = run(impl, method, only)
            print(f"{method:10} {impl:6} {count(result['outcomes'])} in {result['seconds']} s"
                  f"{'  HUNG (killed)' if result['hung'] else ''}", flush=True)
            if processes_must_end and impl == "nbmp":
                regressions += len(result["left_running"])
        if set(args.impls) == {"stdlib", "nbmp"}:
            std, ours = results[f"stdlib/{method}"]["outcomes"], results[f"nbmp/{method}"]["outcomes"]
            compared = set(std) | set(ours) if args.baseline == "all" else set(std) | {
                test_id for test_id, outcome in ours.items() if outcome != "ok"}
            suspects = []
            for test_id in sorted(compared):
                if std.get(test_id) != ours.get(test_id):
                    why = deliberate.get(test_id.rsplit(".", 1)[-1])
                    print(f"    {test_id}: stdlib {std.get(test_id, 'not run')}, nbmp {ours.get(test_id, 'not run')}"
                          f"{f'  (deliberate: {why})' if why else ''}")
                    if std.get(test_id) == "ok" and ours.get(test_id) != "ok" and not why:
                        suspects.append(test_id)
            regressions += len(confirmed(lambda only: run("nbmp", method, only), suspects))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if regressions else 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--types", nargs="+", default=["processes", "threads", "manager", "misc"],
                        help="test kinds: processes, threads, manager, and misc (the plain TestCase classes)")
    args = parser.parse_args(argv)
    if args.child:
        run_tests(_tests)
        return 0
    try:
        import test._test_multiprocessing  # noqa: F401
    except ImportError as exc:
        print(f"this interpreter has no test package ({exc}): install a Python built with it "
              f"(pyenv and python.org builds are; Debian's needs libpython3-testsuite)", file=sys.stderr)
        return 2
    types_env = {TYPES_VAR: " ".join(args.types)}
    return compare(args, lambda impl, method, only: run_one(impl, method, args.timeout, only, env=types_env),
                   DELIBERATE)


if __name__ == "__main__":
    sys.exit(main())
