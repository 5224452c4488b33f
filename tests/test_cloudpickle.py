"""cloudpickle on every path through nbmp objects, under every start method."""

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
