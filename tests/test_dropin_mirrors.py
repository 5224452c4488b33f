"""The standard package's submodules, mirrored as ``nbmp.<name>``: every standard name
resolves, and the mirrors are bound to nbmp's contexts where the standard ones bind their own."""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.sharedctypes
import subprocess
import sys
import textwrap

import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main

# Where nbmp defines nothing of its own, the mirror is the standard module itself.
STANDARD_ITSELF = ["synchronize", "util", "dummy", "dummy.connection", "heap", "process", "shared_memory", "forkserver",
                   "popen_fork", "popen_forkserver", "popen_spawn_posix", "resource_sharer", "resource_tracker"]
NBMPS_OWN = ["pool", "connection", "sharedctypes", "queues", "reduction", "context", "managers"]
MIRRORED = NBMPS_OWN + STANDARD_ITSELF


@pytest.mark.parametrize("name", MIRRORED)
def test_every_standard_name_imports_from_the_mirror(name):
    standard = importlib.import_module(f"multiprocessing.{name}")
    mirror = importlib.import_module(f"nbmp.{name}")
    for attr in standard.__all__:
        namespace: dict = {}
        exec(f"from nbmp.{name} import {attr}", namespace)
        assert namespace[attr] is getattr(mirror, attr)
    assert set(standard.__all__) <= set(mirror.__all__)


@pytest.mark.parametrize("name", NBMPS_OWN)
def test_every_other_standard_name_reads_through_the_mirror(name):
    # Names outside __all__ (connection.families, pool.TimeoutError) and private ones:
    # a program or test suite swapped onto nbmp reads them as there.
    standard = importlib.import_module(f"multiprocessing.{name}")
    mirror = importlib.import_module(f"nbmp.{name}")
    others = [attr for attr in dir(standard) if not attr.startswith("__") and attr not in vars(mirror)]
    assert others, "every standard module has names the mirror leaves to it"
    for attr in others:
        assert getattr(mirror, attr) is getattr(standard, attr), attr
    with pytest.raises(AttributeError, match=f"module 'nbmp.{name}' has no attribute 'no_such_name'"):
        mirror.no_such_name


@pytest.mark.parametrize("name", STANDARD_ITSELF)
def test_a_mirror_that_adds_nothing_is_the_standard_module_itself(name):
    standard = importlib.import_module(f"multiprocessing.{name}")
    assert importlib.import_module(f"nbmp.{name}") is standard
    assert eval(f"nbmp.{name}") is standard


def test_what_is_patched_on_such_a_mirror_is_patched_on_the_standard_module():
    import unittest.mock
    from nbmp.shared_memory import SharedMemory
    with unittest.mock.patch("nbmp.shared_memory._make_filename", return_value="/nbmp_test_patched_name"):
        shm = SharedMemory(create=True, size=16)
    try:
        assert shm.name == "nbmp_test_patched_name"
    finally:
        shm.close()
        shm.unlink()
    assert nbmp.dummy.connection.families == [None]


def test_the_standard_packages_other_names_are_the_standard_ones():
    assert (nbmp.SUBDEBUG, nbmp.SUBWARNING) == (multiprocessing.SUBDEBUG, multiprocessing.SUBWARNING)
    with pytest.raises(AttributeError, match="module 'nbmp' has no attribute 'no_such_name'"):
        nbmp.no_such_name


SWAPPED = """
    import importlib, sys
    import nbmp
    for name in {mirrors!r}:
        sys.modules["multiprocessing." + name] = importlib.import_module("nbmp." + name)
    sys.modules["multiprocessing"] = nbmp
    import multiprocessing

    def child(value, condition, q):
        with condition:
            value.value += 1
        q.put((value.value, multiprocessing.get_start_method()))

    if __name__ == "__main__":
        ctx = multiprocessing.get_context({method!r})
        value, condition, q = ctx.Value("i", 41), ctx.Condition(), ctx.Queue()
        p = ctx.Process(target=child, args=(value, condition, q))
        p.start()
        print(q.get(timeout=60))
        p.join()
        multiprocessing.set_start_method({method!r}, force=True)
        with multiprocessing.Manager() as manager:  # its Pool, made in the manager's process
            pool = manager.Pool(1)
            print(pool.map(abs, [-3]))
            pool.terminate()
        # nbmp's spawn layer, first loaded now, with nbmp in the package's place
        print(multiprocessing.spawn(lambda i: -i, nprocs=2, start_method={method!r}))
"""


@pytest.mark.parametrize("method", [m for m in nbmp.get_all_start_methods() if m != "fork"])
def test_a_program_that_puts_nbmp_in_multiprocessings_place_sends_standard_objects(method, tmp_path):
    # A standard Value reduces to multiprocessing.sharedctypes.synchronized, a name the swapped-in
    # mirror holds nbmp's own function under: it still goes by reference to the standard one.
    # A file, not ``-c``: the spawned children (the manager's among them) run it again, swap included.
    script = tmp_path / "swapped.py"
    script.write_text(textwrap.dedent(SWAPPED.format(mirrors=MIRRORED, method=method)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT * 4)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.split("\n")[:3] == [f"(42, {method!r})", "[3]", "[0, -1]"]


def test_mirrors_are_reachable_after_import_nbmp_alone():
    out = run_main(f"""
        import nbmp as mp
        for name in {[n for n in MIRRORED if "." not in n]!r}:
            expected = ("multiprocessing." if name in {STANDARD_ITSELF!r} else "nbmp.") + name
            assert getattr(mp, name).__name__ == expected, name
        print(mp.pool.ThreadPool is __import__("multiprocessing.pool").pool.ThreadPool, mp.connection.wait.__module__)
    """)
    assert out.split() == ["True", "multiprocessing.connection"]


def test_nbmp_spawn_stays_the_torch_style_function():
    assert nbmp.spawn is nbmp._spawn.spawn
    with pytest.raises(AttributeError):
        nbmp.no_such_submodule


def test_pool_mirror_is_nbmps_pool():
    assert nbmp.pool.Pool is nbmp._pool.Pool
    with nbmp.pool.Pool(1) as pool:
        assert pool.map(lambda x: x + 1, [1]) == [2]


def test_queues_mirror_takes_a_context(start_method):
    q = nbmp.queues.Queue(ctx=nbmp.get_context(start_method))
    p = nbmp.get_context(start_method).Process(target=lambda q: q.put(lambda: 7), args=(q,))
    p.start()
    assert q.get(timeout=TIMEOUT)() == 7
    p.join(TIMEOUT)
    q.close(); q.join_thread()


def test_connection_listener_and_client_send_with_cloudpickle():
    with nbmp.connection.Listener(("localhost", 0)) as listener:
        with nbmp.connection.Client(listener.address) as client, listener.accept() as server:
            client.send(lambda: "from the client")
            server.send(lambda: "from the server")
            assert server.recv()() == "from the client"
            assert client.recv()() == "from the server"
            assert nbmp.connection.wait([client], timeout=0) == []


def test_reduction_mirror_uses_nbmps_pickler_and_leaves_the_standard_one_alone():
    from multiprocessing.reduction import ForkingPickler

    class Marker:
        pass

    nbmp.reduction.register(Marker, lambda m: (str, ("reduced by nbmp",)))
    try:
        assert nbmp.reduction.ForkingPickler.loads(nbmp.reduction.ForkingPickler.dumps(Marker())) == "reduced by nbmp"
        assert Marker not in ForkingPickler._extra_reducers
    finally:
        nbmp._backend.pickling._reducers.pop(Marker)


def test_context_mirror_holds_nbmps_contexts():
    assert nbmp.context.SpawnContext is nbmp._backend.context.SpawnContext
    assert nbmp.context.Process is nbmp.Process is nbmp._backend.context.Process
    assert nbmp.context.assert_spawning is multiprocessing.context.assert_spawning


def _increment(v):
    with v.get_lock():
        v.value += 1


@pytest.mark.parametrize("lock_from", ["nbmp.sharedctypes", "a spawn context of the standard module"])
def test_sharedctypes_lock_goes_to_a_spawned_nbmp_process(lock_from):
    make = "nbmp.sharedctypes.Value('i', 0)" if lock_from == "nbmp.sharedctypes" else \
        "multiprocessing.sharedctypes.Value('i', 0, ctx=multiprocessing.get_context('spawn'))"
    out = run_main(f"""
        import multiprocessing, multiprocessing.sharedctypes, nbmp, nbmp.sharedctypes
        def increment(v):
            with v.get_lock():
                v.value += 1
        if __name__ == "__main__":
            nbmp.set_start_method("spawn", force=True)
            v = {make}
            p = nbmp.Process(target=increment, args=(v,)); p.start(); p.join()
            print(p.exitcode, v.value)
    """)
    assert out.split() == ["0", "1"]


def test_a_fork_context_lock_sent_to_a_spawned_child_names_the_method_and_the_fix():
    v = multiprocessing.sharedctypes.Value("i", 0, ctx=multiprocessing.get_context("fork"))
    p = nbmp.get_context("spawn").Process(target=_increment, args=(v,))
    with pytest.raises(RuntimeError, match="fork context") as info:
        p.start()
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "None" not in text
    if hasattr(info.value, "__notes__"):
        assert "'spawn' start method" in text and "nbmp.sharedctypes" in text
