"""The examples of the standard multiprocessing documentation, with
``import nbmp as multiprocessing``, under every start method."""

import nbmp as multiprocessing
from conftest import TIMEOUT
from nbmp.managers import BaseManager, NamespaceProxy


def f_queue(q):
    q.put([42, None, "hello"])


def test_process_and_queue(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=f_queue, args=(q,))
    p.start()
    assert q.get(timeout=TIMEOUT) == [42, None, "hello"]
    p.join(TIMEOUT)


def f_lock(lock, counter, i):
    with lock:
        counter.value += i


def test_lock_and_value(ctx):
    lock = ctx.Lock()
    counter = ctx.Value("i", 0, lock=False)
    procs = [ctx.Process(target=f_lock, args=(lock, counter, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT)
    assert counter.value == 0 + 1 + 2 + 3


def f_value_array(n, a):
    n.value = 3.1415927
    for i in range(len(a)):
        a[i] = -a[i]


def test_value_and_array(ctx):
    num = ctx.Value("d", 0.0)
    arr = ctx.Array("i", range(10))
    p = ctx.Process(target=f_value_array, args=(num, arr))
    p.start()
    p.join(TIMEOUT)
    assert abs(num.value - 3.1415927) < 1e-6
    assert arr[:] == [-i for i in range(10)]


def f_manager(d, l):
    d[1] = "1"
    d["2"] = 2
    d[0.25] = None
    l.reverse()


def test_manager_dict_and_list(ctx):
    with ctx.Manager() as manager:
        d = manager.dict()
        l = manager.list(range(10))
        p = ctx.Process(target=f_manager, args=(d, l))
        p.start()
        p.join(TIMEOUT)
        assert dict(d) == {1: "1", "2": 2, 0.25: None}
        assert list(l) == list(range(9, -1, -1))


class MathsClass:
    def add(self, x, y):
        return x + y

    def mul(self, x, y):
        return x * y


class Counter:
    def __init__(self):
        self.total = 0


class MyManager(BaseManager):
    pass


MyManager.register("Maths", MathsClass)
MyManager.register("Counter", Counter, proxytype=NamespaceProxy)
MyManager.register("Adder", callable=lambda: MathsClass())  # a lambda in the registry


def test_custom_manager_with_registered_proxies(ctx):
    with MyManager(ctx=ctx) as manager:
        maths = manager.Maths()
        assert maths.add(4, 3) == 7
        assert maths.mul(7, 8) == 56
        assert manager.Adder().add(1, 1) == 2
        counter = manager.Counter()
        counter.total = 5
        assert counter.total == 5


def test_registering_on_nbmp_manager_leaves_the_stdlib_registry_alone():
    import multiprocessing.managers as std
    assert "Maths" not in std.BaseManager._registry
    assert "Maths" in MyManager._registry


def test_default_manager_is_fork_first():
    with multiprocessing.Manager() as manager:
        assert manager._ctx.get_start_method() == "fork"
        ns = manager.Namespace()
        ns.x = 1
        assert ns.x == 1
