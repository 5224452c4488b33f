"""nbmp's contexts: fork first, standard semantics, and the standard module untouched."""

import multiprocessing
import os

import pytest

import nbmp
from helpers import run_main


def test_default_start_method_is_fork():
    assert nbmp.get_start_method() == "fork"
    assert nbmp.get_all_start_methods()[0] == "fork"


def test_default_is_chosen_explicitly_not_inherited():
    out = run_main("""
        import multiprocessing
        multiprocessing.set_start_method("spawn")
        import nbmp
        print(nbmp.get_start_method(), multiprocessing.get_start_method())
    """)
    assert out.split() == ["fork", "spawn"]


@pytest.mark.parametrize("method", nbmp.get_all_start_methods())
def test_get_context_returns_nbmp_contexts(method):
    ctx = nbmp.get_context(method)
    assert ctx.get_start_method() == method
    assert type(ctx).__module__ == "nbmp._backend.context"
    assert ctx.Process.__module__ == "nbmp._backend.process"


def test_unknown_start_method_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown start method 'threads'.*fork.*spawn"):
        nbmp.get_context("threads")


def test_set_start_method_has_standard_semantics():
    out = run_main("""
        import nbmp, multiprocessing
        try:
            nbmp.get_start_method()           # fixes the default, as in the stdlib
            nbmp.set_start_method("spawn")
        except RuntimeError as e:
            print("refused:", e)
        nbmp.set_start_method("spawn", force=True)
        print(nbmp.get_start_method(), type(nbmp.get_context()).__name__)
        print(multiprocessing.get_start_method(allow_none=True))
        p = nbmp.Process(target=lambda: None); p.start(); p.join()
        print(p.exitcode)
    """)
    lines = out.splitlines()
    assert lines[0].startswith("refused: context has already been set") and "To change it" in lines[0]
    assert lines[1:] == ["spawn SpawnContext", "None", "0"]


def test_setting_the_same_start_method_again_says_nothing_would_change():
    out = run_main("""
        import nbmp
        nbmp.set_start_method("fork")
        try:
            nbmp.set_start_method("fork")     # the cell run a second time
        except RuntimeError as e:
            print(e)
    """)
    assert "It is already 'fork': drop this call" in out and "change" not in out


def test_importing_nbmp_leaves_the_standard_module_alone():
    out = run_main("""
        import multiprocessing, multiprocessing.reduction as r, pickle
        import multiprocessing.connection, multiprocessing.pool, multiprocessing.managers  # their own registrations
        before = (dict(r.ForkingPickler._extra_reducers), multiprocessing.Queue, multiprocessing.Pool)
        import nbmp
        nbmp.Pool(1).terminate()
        print(multiprocessing.get_start_method(allow_none=True))
        print(multiprocessing.Queue is before[1], multiprocessing.Pool is before[2])
        # the stdlib Pool still refuses a lambda, exactly as before
        with multiprocessing.get_context("fork").Pool(1) as pool:
            try:
                pool.map(lambda x: x, [1])
            except (pickle.PicklingError, AttributeError) as e:
                print("stdlib refused:", type(e).__name__)
        added = set(r.ForkingPickler._extra_reducers) - set(before[0])
        print(sorted(t.__module__ for t in added))
    """)
    lines = out.splitlines()
    assert lines[0] == "None"
    assert lines[1] == "True True"
    assert lines[2].startswith("stdlib refused:")
    # the only additions to the stdlib's reducer table are for nbmp's own types
    assert all(mod.startswith("nbmp") for mod in eval(lines[3]))


STDIN_SCRIPT = """
import os, sys, nbmp

def look(*_):
    return (os.readlink(f"/proc/self/fd/{sys.stdin.fileno()}"), sys.stdin.read(), sys.__stdin__.closed)

if __name__ == "__main__":
    q = nbmp.Queue()
    p = nbmp.Process(target=lambda: q.put(look()))
    p.start(); p.join()
    print(q.get(timeout=30))
    print(nbmp.spawn(look, nprocs=2))
    print(nbmp.spawn(lambda i: nbmp.spawn(look, nprocs=1), nprocs=1))  # a worker's own workers
    with nbmp.Pool(1) as pool:
        print(pool.apply(look))
    print(repr(sys.stdin.readline()))  # the parent's own stdin is untouched
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd (Linux)")
def test_a_forked_child_reads_devnull_and_its_inherited_stdin_is_closed():
    # As the standard library's children: the inherited stdin object closed, sys.stdin on /dev/null.
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", STDIN_SCRIPT], input="parent line\n", capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = ("/dev/null", "", True)
    assert proc.stdout.splitlines() == [repr(seen), repr([seen] * 2), repr([[seen]]), repr(seen), repr("parent line\n")]
