"""cloudpickle on every path through nbmp objects, under every start method."""

import io

import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main


def _offset(k):
    return lambda x: x + k  # a closure: plain pickle refuses it


def test_process_target_and_args_may_be_lambdas(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=lambda f, q: q.put(f(1)), args=(_offset(41), q))
    p.start()
    assert q.get(timeout=TIMEOUT) == 42
    p.join(TIMEOUT)
    assert p.exitcode == 0


@pytest.mark.parametrize("kind", ["Queue", "SimpleQueue", "JoinableQueue"])
def test_queue_payloads_may_be_lambdas(ctx, kind):
    q = getattr(ctx, kind)()
    p = ctx.Process(target=lambda q: q.put(_offset(10)), args=(q,))
    p.start()
    assert q.get()(1) == 11
    p.join(TIMEOUT)
    assert p.exitcode == 0


def test_pipe_payloads_may_be_lambdas_both_ways(ctx):
    here, there = ctx.Pipe()
    p = ctx.Process(target=lambda c: c.send(c.recv()(2) * 2), args=(there,))
    p.start()
    here.send(_offset(1))
    assert here.poll(TIMEOUT)
    assert here.recv() == 6
    p.join(TIMEOUT)


def test_pool_tasks_results_and_initializer(ctx):
    with ctx.Pool(2, initializer=lambda: None) as pool:
        assert pool.map(lambda x: x + 1, [1, 2, 3]) == [2, 3, 4]
        assert pool.starmap(lambda a, b: a * b, [(2, 3), (4, 5)]) == [6, 20]
        assert pool.apply_async(_offset(5), (1,)).get(TIMEOUT) == 6
        assert sorted(pool.imap_unordered(lambda x: -x, range(3))) == [-2, -1, 0]
        returned = pool.apply_async(lambda: _offset(7)).get(TIMEOUT)
        assert returned(1) == 8
        pool.close()
        pool.join()


def test_importable_functions_still_go_by_reference():
    from nbmp._backend import pickling as _pickling
    import os.path
    assert len(_pickling.dumps(os.path.join)) < 100
    assert b"posixpath" in _pickling.dumps(os.path.join)


@pytest.mark.parametrize("method", nbmp.get_all_start_methods())
def test_functions_and_classes_defined_in_main(method):
    out = run_main(f"""
        import nbmp

        class Point:
            def __init__(self, x): self.x = x

        def g(p):
            return Point(p.x * 10)

        if __name__ == "__main__":
            ctx = nbmp.get_context({method!r})
            with ctx.Pool(2) as pool:
                print([p.x for p in pool.map(g, [Point(1), Point(2)])])
            q = ctx.Queue()
            proc = ctx.Process(target=lambda q: q.put(g(Point(3))), args=(q,))
            proc.start(); print(q.get().x); proc.join()
    """)
    assert out.split("\n")[:2] == ["[10, 20]", "30"]


def test_warm_pool_runs_the_latest_definition():
    out = run_main("""
        import nbmp
        pool = nbmp.Pool(2)                      # "cell 1": workers forked now
        def f(x): return x + 1
        print(pool.map(f, [1]))
        def f(x): return x * 100                 # "cell 2": redefined after the fork
        print(pool.map(f, [1]))
        pool.close(); pool.join()
    """)
    assert out.split() == ["[2]", "[100]"]


# -- the pickler's own decisions (it decides by reference itself, reads the reducer tables itself) --

def test_what_cloudpickle_sends_by_value_still_goes_by_value(tmp_path):
    # A registered module's function, a rebound module name and a method go by value:
    # they load in a process that cannot import the module.
    (tmp_path / "nbmp_byvalue_mod.py").write_text(
        "def f(x): return x + 1\n"
        "def g(x): return x * 2\n"
        "class C:\n"
        "    @staticmethod\n"
        "    def h(x): return x - 1\n")
    out = run_main(f"""
        import pickle, subprocess, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import cloudpickle, nbmp_byvalue_mod as mod
        from nbmp._backend.pickling import dumps
        old_g = mod.g
        mod.g = lambda x: -x                        # the module's name now means another function
        payloads = [dumps([{{"k": old_g}}])]
        cloudpickle.register_pickle_by_value(mod)
        payloads.append(dumps((mod.f, 1)))
        cloudpickle.unregister_pickle_by_value(mod)
        payloads.append(dumps(mod.f))                # by reference again: cannot load elsewhere
        code = ("import pickle, sys; ps = [pickle.loads(p) for p in pickle.loads(sys.stdin.buffer.read())]; "
                "print(ps[0][0]['k'](5), ps[1][0](5))")
        print(subprocess.run([sys.executable, "-c", code], input=pickle.dumps(payloads[:2]),
                             capture_output=True, check=True).stdout.decode().strip())
        print(b"nbmp_byvalue_mod" in payloads[2] and len(payloads[2]) < 100)
    """)
    assert out.split("\n")[:2] == ["10 6", "True"]


def test_the_pickler_keeps_nothing_it_pickled():
    import gc
    import weakref
    from nbmp._backend import pickling as _pickling

    class Payload:  # a local class: by value, through cloudpickle's reducer
        pass

    made = []

    class Makes:  # its reduction makes an object only the pickler's memo holds
        def __reduce__(self):
            part = Payload()
            made.append(weakref.ref(part))
            return list, ([part],)

    class Refuses:
        def __reduce__(self):
            raise RuntimeError("refused")

    sent = Payload()
    watched = weakref.ref(sent)
    assert type(_pickling.loads(_pickling.dumps([sent, Makes(), _offset(1)]))[0]).__name__ == "Payload"
    with pytest.raises(RuntimeError, match="refused") as kept_error:  # as a notebook keeps the last error
        _pickling.dumps([Makes(), Refuses()])
    del sent
    gc.collect()
    assert [watched()] + [ref() for ref in made] == [None, None, None]
    assert kept_error.traceback  # alive until here


def test_a_reducer_may_pickle_while_the_pickler_runs():
    from nbmp._backend import pickling as _pickling

    class Nested:
        def __reduce__(self):
            return _pickling.loads, (_pickling.dumps({"inner": _offset(2)}),)

    loaded = _pickling.loads(_pickling.dumps([Nested(), _offset(3), Nested()]))
    assert [loaded[0]["inner"](1), loaded[1](1), loaded[2]["inner"](2)] == [3, 4, 4]


def test_every_reducer_table_is_read_in_order():
    import copyreg
    from multiprocessing.reduction import ForkingPickler
    from nbmp._backend import pickling as _pickling

    class ByCopyreg:
        pass

    class ByStdlib:
        pass

    class ByBoth:
        pass

    copyreg.pickle(ByCopyreg, lambda obj: (str, ("copyreg",)))
    copyreg.pickle(ByBoth, lambda obj: (str, ("copyreg",)))
    ForkingPickler.register(ByStdlib, lambda obj: (str, ("stdlib",)))
    ForkingPickler.register(ByBoth, lambda obj: (str, ("stdlib",)))
    try:
        assert _pickling.loads(_pickling.dumps([ByCopyreg(), ByStdlib(), ByBoth()])) == \
            ["copyreg", "stdlib", "stdlib"]
    finally:
        for cls in (ByCopyreg, ByBoth):
            copyreg.dispatch_table.pop(cls)
        for cls in (ByStdlib, ByBoth):
            ForkingPickler._extra_reducers.pop(cls)


@pytest.mark.parametrize("dumps", ["dumps", "dumps_plain"])
def test_code_sent_by_value_keeps_its_file_name(dumps):
    # A traceback finds a function's lines by its code's file name (a notebook cell's is
    # "<ipython-input-...>"); cloudpickle 3.1.3 replaced it with "<dynamic-code>".
    from nbmp._backend import pickling
    namespace = {}
    exec(compile("def outer(k):\n    return lambda x: x + k\n", "<cell-7>", "exec"), namespace)
    sent = pickling.loads(getattr(pickling, dumps)(namespace["outer"]))
    assert sent.__code__.co_filename == "<cell-7>"
    inner = sent(1)
    assert inner.__code__.co_filename == "<cell-7>"  # a code object nested in the constants
    assert inner(41) == 42


# -- managers: a proxy's requests and replies go through nbmp's pickler --

@pytest.mark.parametrize("method", nbmp.get_all_start_methods())
def test_manager_proxies_carry_lambdas_and_objects_defined_in_main(method):
    out = run_main(f"""
        import nbmp

        class Point:
            def __init__(self, x): self.x = x

        if __name__ == "__main__":
            with nbmp.get_context({method!r}).Manager() as m:
                d, q, ns, shared = m.dict(), m.Queue(), m.Namespace(), m.list()
                d["f"] = lambda x: x + 1
                q.put(lambda: 3)
                ns.p = Point(4)
                shared.append(Point(5))
                print(d["f"](1), q.get(timeout=30)(), ns.p.x, shared[0].x)
    """)
    assert out.split() == ["2", "3", "4", "5"]


def test_a_shared_array_stored_in_a_manager_is_read_back_as_the_same_memory(ctx):
    import numpy as np
    a = nbmp.zeros(8)
    with ctx.Manager() as m:
        d = m.dict()
        d["a"] = a
        b = d["a"]
        b[0] = 5                                # b maps a's segment: a handle went both ways
        assert a[0] == 5
        big = np.ones(2 ** 18)                  # 2 MiB, an unshared array: copied once into shared memory
        d["big"] = big
        d["big"][1] = 7                         # the manager's copy, mapped here
        assert d["big"][1] == 7 and big[1] == 1  # the sender's array is untouched
        del b
    # the guard checks that the manager's holds on both segments went with it


def test_a_manager_proxy_is_rebuilt_in_an_interpreter_that_never_imported_nbmp(ctx):
    import pickle
    import subprocess
    import sys
    with ctx.Manager() as m:
        d = m.dict(x=1)
        # The proxy names nbmp's serializer; unpickled, that name imports nbmp, which
        # registers it with the standard module before the proxy looks its client up.
        code = ("import multiprocessing as mp, pickle, sys\n"
                "mp.current_process().authkey = bytes.fromhex(sys.argv[1])\n"
                "before = 'nbmp' in sys.modules\n"
                "d = pickle.loads(sys.stdin.buffer.read())\n"
                "d['y'] = lambda: 2\n"
                "print(before, sorted(d.keys()))")
        proc = subprocess.run([sys.executable, "-c", code, bytes(nbmp.current_process().authkey).hex()],
                              input=pickle.dumps(d), capture_output=True, timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode().split() == ["False", "['x',", "'y']"]
        assert d["y"]() == 2


def test_a_manager_asked_for_the_standard_pickler_refuses_a_lambda_as_the_standard_one_does():
    import pickle
    with nbmp.Manager() as default, nbmp.managers.SyncManager(serializer="pickle") as plain:
        assert default.dict() is not None
        d = plain.dict()
        with pytest.raises((pickle.PicklingError, AttributeError)):
            d["f"] = lambda: 1


def test_plain_values_skip_the_pickler_and_load_back_the_same():
    import pickle
    from nbmp._backend import pickling
    # A Pool's result messages: nested tuples, and a map chunk's list, of atoms.
    for message in [(7, 3, (True, "x", 0, 1.5, None)), (7, 3, (True, [4, "y"], 0, 1.5, 2.5))]:
        assert pickling.plain(message, 3)
        assert pickling.dumps(message) == pickle.dumps(message, pickling.cloudpickle.DEFAULT_PROTOCOL)
        assert pickling.loads(pickling.dumps(message)) == message
        as_nbmp_pickles = io.BytesIO()
        pickling.Pickler(as_nbmp_pickles).dump(message)  # what the pickler skipped would have written
        assert pickle.loads(as_nbmp_pickles.getvalue()) == message
    for not_plain in [(1, (2, (3,))), (1, [2, [3]]), tuple(range(17)), list(range(17)), (1, (lambda: 0)),
                      {"a": 1}, [1, object()], (1, [2, {"a": 1}])]:
        assert not pickling.plain(not_plain), not_plain
