"""Run CPython's own ``concurrent.futures`` process-pool tests with nbmp's executor in place.

    python scripts/cpython_cf_suite.py [--methods fork spawn forkserver] [--only test_name ...]

For each start method it runs the process-pool tests of the interpreter's
``test.test_concurrent_futures`` package (the 3.12+ layout; on older Pythons it says so and
exits 0) twice, unedited, in fresh interpreters: once as is (the standard executor) and once
with nbmp in place, as a program would put it there: ``concurrent.futures.ProcessPoolExecutor``
is ``nbmp.ProcessPoolExecutor`` and ``sys.modules["multiprocessing"]`` is nbmp with its mirrored
submodules (``scripts/cpython_mp_suite.py``), so the suite's ``get_context()`` gives nbmp's
contexts. The tests are those of the classes built for the method
(``ProcessPool<Method>...Test``) and ``FailingInitializerResourcesTest.test_<method>``. The
tests that start a fresh interpreter (``assert_python_ok``) get the standard executor there.

It prints the counts, every test whose outcome differs and every process a test left running
(descendants of the test interpreter but its resource tracker and fork server, alive 2 s after
the test); the exit status is 1 when nbmp fails a test the standard executor passes (and fails
it again alone) unless ``DELIBERATE`` (docs/dropin.md) names it, or when a test of nbmp's run
left a process running.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any, List, Optional

import cpython_mp_suite as mp_suite  # the runner, the driver and nbmp's swap are that suite's

# Tests where nbmp's executor differs on purpose (docs/dropin.md says why); by test name, any class.
DELIBERATE: "dict[str, str]" = {
    "test_processes_terminate": "a call that cannot be pickled fails in submit, a no-op in its place; the no-op's "
                                "result can free a worker before the next submit, which then starts none",
}

MODULES = ["test_as_completed", "test_deadlock", "test_init", "test_process_pool", "test_shutdown", "test_wait"]


def swap_in_nbmp() -> None:
    """nbmp's executor in ``concurrent.futures``' place and nbmp in ``multiprocessing``'s; the
    standard executor's module is loaded first, against the real package, as a program's is."""
    import concurrent.futures
    import concurrent.futures.process  # noqa: F401
    import nbmp
    concurrent.futures.ProcessPoolExecutor = nbmp.ProcessPoolExecutor  # type: ignore[misc]
    mp_suite.swap_in_nbmp()


def collect_tests(method: str) -> List[Any]:
    """The process-pool tests for ``method``, in the package's order."""
    import importlib
    import unittest
    tests = []
    for name in MODULES:
        module = importlib.import_module(f"test.test_concurrent_futures.{name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and obj.__module__ == module.__name__:
                for test in mp_suite._flatten(unittest.TestLoader().loadTestsFromTestCase(obj)):
                    if getattr(obj, "ctx", None) == method or test.id().endswith(f"ResourcesTest.test_{method}"):
                        tests.append(test)
    return tests


def has_package() -> Optional[types.ModuleType]:
    try:
        import test.test_concurrent_futures.util as util
    except ImportError:  # no test package, or 3.11's single test_concurrent_futures module
        return None
    return util


# The test interpreter and its spawned children (not a script importing this one) swap alike.
if os.environ.get(mp_suite.IMPL_VAR) == "nbmp" and __name__ in ("__main__", "__mp_main__"):
    swap_in_nbmp()


def main(argv: Optional[List[str]] = None) -> int:
    args = mp_suite.arguments(__doc__).parse_args(argv)
    if args.child:
        mp_suite.run_suite(collect_tests(os.environ[mp_suite.METHOD_VAR]))
        return 0
    if has_package() is None:
        print(f"Python {sys.version.split()[0]} has no test.test_concurrent_futures package (3.12+ layout; "
              f"pyenv and python.org builds ship it): nothing to run", file=sys.stderr)
        return 0
    return mp_suite.compare(args, lambda impl, method, only: mp_suite.run_one(impl, method, args.timeout, only,
                                                                             script=__file__),
                            DELIBERATE, processes_must_end=True)


if __name__ == "__main__":
    sys.exit(main())
