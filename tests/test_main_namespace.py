"""Functions of ``__main__`` (a notebook's cells) in workers: what a forked worker inherited goes
by reference, as the standard module sends it, and the functions a worker receives by value
share its ``__main__`` namespace (nbmp._backend.main_module).

Each test runs its program as the ``__main__`` of a fresh interpreter (``python -c``, no file:
under spawn and forkserver the workers do not import it, as with a notebook).
"""

import pytest

import nbmp
from helpers import run_main

METHODS = nbmp.get_all_start_methods()

# A global whose pickling fails loudly: a task that carries it by value cannot be sent.
UNPICKLABLE = """
class Unpicklable:
    def __reduce__(self):
        raise TypeError("the notebook's big object was pickled")
"""


def test_a_pool_task_inherited_by_fork_does_not_carry_the_globals_it_reads():
    out = run_main(UNPICKLABLE + """
import nbmp
big = Unpicklable()
def uses_big(x):
    return (type(big).__name__, x)
with nbmp.Pool(2) as pool:
    print(pool.map(uses_big, [1, 2]))
    print(pool.apply(uses_big, (3,)))
    print(list(pool.imap(uses_big, [4])))
    try:  # a lambda the workers cannot have inherited goes by value, with what it reads
        pool.map(lambda x: (big, x), [1])
    except nbmp.PicklingError as error:
        print("by value:", "the notebook's big object was pickled" in str(error))
with nbmp.ProcessPoolExecutor(2) as ex:
    print(list(ex.map(uses_big, [5])))
""")
    assert out.splitlines() == ["[('Unpicklable', 1), ('Unpicklable', 2)]", "('Unpicklable', 3)",
                                "[('Unpicklable', 4)]", "by value: True", "[('Unpicklable', 5)]"]


def test_a_function_rebound_after_the_fork_goes_by_value_and_runs_its_own_code():
    out = run_main("""
import nbmp
def f(x): return ("first", x)
first = f
pool = nbmp.Pool(1, maxtasksperchild=1)     # each task in a new worker: forked later, it has the later f
print(pool.map(f, [1]))
def f(x): return ("second", x)              # "a later cell": f rebound after the workers were forked
print(pool.map(f, [2]))
print(pool.map(first, [3]))                 # the first object is no longer __main__.f: it goes by value
def f(x): return ("third", x)
print(pool.map(first, [4]), pool.map(f, [5]))
pool.close(); pool.join()
""")
    assert out.splitlines() == ["[('first', 1)]", "[('second', 2)]", "[('first', 3)]",
                                "[('first', 4)] [('third', 5)]"]


# cloudpickle's by-value path for functions, refused: what still reaches the workers went by reference.
NO_BY_VALUE = """
from nbmp._backend import pickling
def refused(self, func):
    raise TypeError("sent by value: " + func.__qualname__)
pickling.Pickler._dynamic_function_reduce = refused
"""


def test_a_lambda_written_where_the_pool_starts_goes_to_forked_workers_by_its_code():
    out = run_main(NO_BY_VALUE + """
import nbmp
def made_later():
    return lambda x: x * 3
with nbmp.Pool(2) as pool:
    print(pool.map(lambda x, k=10: (x + k, len("ab")), [1, 2]))
    print(pool.starmap(lambda a, b: a - b, [(5, 1)]))
    print(pool.apply(lambda: "applied"))
    print(pool.map(made_later(), [2]))       # its code was there at the fork, in made_later's
    print(pool.map(lambda x: globals() is __import__("sys").modules["__main__"].__dict__, [0]))
    print(pool.apply(lambda d=None: (d, "x"), ()))
""")
    assert out.splitlines() == ["[(11, 2), (12, 2)]", "[4]", "applied", "[6]", "[True]", "(None, 'x')"]


def test_a_function_the_workers_cannot_rebuild_from_its_code_alone_still_goes_by_value():
    # The same program with cloudpickle's by-value path refused: each of these must need it.
    cases = {
        "closure": "k = 2\ndef make(k):\n    return lambda x: x + k\nf = make(k)",
        "global": "k = 2\nf = lambda x: x + k",
        "rebound builtin": "len = lambda s: 99\nf = lambda x: len([x])",
        "keyword default": "f = lambda x, *, k=1: x + k",
        "unplain default": "f = lambda x, k=[1]: x + k[0]",
        "attribute": "f = lambda x: x\nf.tag = 1",
        "code made after the fork": "f = None",
    }
    for name, definition in cases.items():
        late = name == "code made after the fork"
        out = run_main(NO_BY_VALUE + f"""
import nbmp
{definition}
with nbmp.Pool(1) as pool:
    if {late}:
        exec(compile("f = lambda x: x + 1", "<a later cell>", "exec"))
    try:
        print(pool.map(f, [1]))
    except Exception as error:
        print("by value" if "sent by value" in str(error) else repr(error))
""")
        assert out.splitlines() == ["by value"], (name, out)


def test_a_lambda_goes_by_value_to_the_result_of_a_rebound_builtin():
    out = run_main("""
import nbmp
with nbmp.Pool(1) as pool:
    len = lambda s: 99                        # after the fork: the workers' builtins would say 1
    print(pool.map(lambda x: len([x]), [1]))
""")
    assert out.splitlines() == ["[99]"]


@pytest.mark.parametrize("method", METHODS)
def test_globals_set_by_the_initializer_are_seen_by_tasks(method):
    # The standard Pool's way to give each worker a model: the initializer sets a global.
    # The notebook holds a placeholder of the same name: the worker's own value wins.
    out = run_main(f"""
import nbmp
model = None
def load(scale):
    global model
    model = {{"scale": scale}}
def predict(x):
    return model["scale"] * x
with nbmp.get_context({method!r}).Pool(2, initializer=load, initargs=(10,)) as pool:
    print(pool.map(predict, [1, 2]))
    print(pool.map(lambda x: model["scale"] + x, [1]))       # a lambda: by value under every method
    def later(x):                                            # defined after the workers started
        return -model["scale"] * x
    print(pool.apply(later, (3,)))
with nbmp.get_context({method!r}).Pool(1) as pool:           # no initializer: the notebook's value
    print(pool.apply(lambda: model))
ctx = nbmp.get_context({method!r})
with nbmp.ProcessPoolExecutor(1, mp_context=ctx, initializer=load, initargs=(7,)) as ex:
    print(ex.submit(predict, 2).result(), ex.submit(lambda: model["scale"]).result())
print(model)
""")
    assert out.splitlines() == ["[10, 20]", "[11]", "-30", "None", "14 7", "None"]


@pytest.mark.parametrize("method", METHODS)
def test_a_worker_keeps_what_it_rebinds_and_sees_what_the_notebook_changes(method):
    out = run_main(f"""
import nbmp
count = 0
scale = 2
def bump(x):
    global count
    count += 1
    return count
with nbmp.get_context({method!r}).Pool(1) as pool:
    print(pool.map(bump, range(3), chunksize=1))
    print(pool.map(bump, range(2), chunksize=1))   # the worker's count goes on, as the standard's does
    def bump_more(x):                              # sent by value, with the notebook's count (0)
        global count
        count += 10
        return count
    print(pool.apply(bump_more, (0,)))             # the worker's own count wins where it was delivered
    print(pool.apply(lambda: scale * 10))
    scale = 3                                      # the notebook's new value reaches a function sent after it
    print(pool.apply(lambda: scale * 10))
print(count)
""")
    # Under fork the worker inherited count rather than received it: the notebook's 0 replaces
    # what bump made of it (docs/dropin.md, "The notebook's namespace in workers").
    assert out.splitlines() == ["[1, 2, 3]", "[4, 5]", "10" if method == "fork" else "15", "20", "30", "0"]


@pytest.mark.parametrize("method", METHODS)
def test_what_workers_send_back_never_changes_the_notebooks_namespace(method):
    out = run_main(f"""
import nbmp
value = "notebook"
def rebinds(i):
    global value
    value = "worker"
    return lambda: value
returned = nbmp.spawn(rebinds, nprocs=1, start_method={method!r})[0]
with nbmp.get_context({method!r}).Pool(1) as pool:
    also = pool.apply(rebinds, (0,))
print(value, returned(), also())
""")
    assert out.split() == ["notebook", "worker", "worker"]


def test_results_of_a_cell_defined_class_are_the_notebooks_class_under_fork():
    # By value, the class came back as a copy unless the parent had pickled it before the fork.
    out = run_main("""
import nbmp
class Point:
    def __init__(self, x):
        self.x = x
class CellError(Exception):
    pass
def fails(i):
    raise CellError(i)
print([isinstance(p, Point) for p in nbmp.spawn(lambda i: Point(i), nprocs=2)])
try:
    nbmp.spawn(fails, nprocs=1)
except nbmp.ProcessRaisedException as error:
    print("CellError" in str(error))
with nbmp.Pool(2) as pool:
    print([type(p) is Point for p in pool.map(Point, [1, 2])])
    try:
        pool.map(fails, [1])
    except CellError:
        print("caught as itself")
with nbmp.ProcessPoolExecutor(1) as ex:
    print(type(ex.submit(Point, 1).result()) is Point)
""")
    assert out.splitlines() == ["[True, True]", "True", "[True, True]", "caught as itself", "True"]


@pytest.mark.parametrize("method", METHODS)
def test_the_workers_main_keeps_its_builtins_module(method):
    out = run_main(f"""
import nbmp
def names_builtins(x):
    import __main__
    return type(__main__.__builtins__).__name__
with nbmp.get_context({method!r}).Pool(1) as pool:
    print(pool.apply(lambda: names_builtins(0)), pool.apply(names_builtins, (0,)))
""")
    assert out.split() == ["module", "module"]
