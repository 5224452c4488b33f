"""What a notebook user sees, over the Jupyter protocol in a real ipykernel."""

import pytest

pytestmark = pytest.mark.kernel


def test_lambda_in_a_fork_pool(kernel):
    cell = kernel.run("import nbmp as multiprocessing\n"
                      "multiprocessing.get_context('fork').Pool(2).map(lambda x: x + 1, [1, 2, 3])")
    cell.raise_for_error()
    assert cell.result == "[2, 3, 4]"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_cell_defined_function_under_spawning_methods(kernel, method):
    kernel.run("import nbmp as multiprocessing\ndef g(x):\n    return x * 2").raise_for_error()
    cell = kernel.run(f"with multiprocessing.get_context({method!r}).Pool(2) as p:\n"
                      f"    out = p.map(g, [1, 2, 3])\n"
                      f"del p  # a spawn Pool's named semaphores live as long as the Pool\nout")
    cell.raise_for_error()
    assert cell.result == "[2, 4, 6]"


def test_warm_pool_runs_a_later_cells_definition(kernel):
    kernel.run("import nbmp as multiprocessing\npool = multiprocessing.Pool(2)\ndef h(x):\n    return 'old'").raise_for_error()
    kernel.run("def h(x):\n    return 'new'").raise_for_error()
    cell = kernel.run("r = pool.map(h, [0]); pool.close(); pool.join(); r")
    cell.raise_for_error()
    assert cell.result == "['new']"


def test_cell_defined_class_and_process_under_spawn(kernel):
    code = """
import nbmp as multiprocessing
class Box:
    def __init__(self, v): self.v = v
ctx = multiprocessing.get_context('spawn')
q = ctx.Queue()
p = ctx.Process(target=lambda q: q.put(Box(7)), args=(q,))
p.start(); box = q.get(timeout=30); p.join()
code = p.exitcode
del q, p  # named semaphores live as long as their objects
(type(box).__name__, box.v, code)
"""
    cell = kernel.run(code)
    cell.raise_for_error()
    assert cell.result == "('Box', 7, 0)"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_traceback_shows_the_cells_source(kernel, method):
    kernel.run("def explode(x):\n    raise ValueError('boom from the cell')  # the cell's own line").raise_for_error()
    cell = kernel.run(
        f"import nbmp as multiprocessing\n"
        f"with multiprocessing.get_context({method!r}).Pool(1) as p:\n"
        f"    try:\n"
        f"        p.apply(explode, (1,))\n"
        f"    except ValueError as e:\n"
        f"        remote = str(e.__cause__)\n"
        f"del p\nimport gc; gc.collect()  # the exception's traceback holds the pool in a cycle\n"
        f"print(remote)")
    cell.raise_for_error()
    assert "the cell's own line" in cell.stdout
