"""``%load_ext nbmp`` and the magics, over the Jupyter protocol in a real kernel."""

import pytest

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def nb(kernel):
    kernel.run("%load_ext nbmp\nimport nbmp").raise_for_error()
    return kernel


def test_load_ext_is_cheap_and_starts_nothing(kernel):
    cell = kernel.run("import sys, threading, multiprocessing\n"
                      "threads, modules = threading.active_count(), set(sys.modules)\n"
                      "%load_ext nbmp\n"
                      "print(sorted(m for m in ('ipywidgets', 'torch', 'psutil') if m in set(sys.modules) - modules),"
                      " threading.active_count() - threads, len(multiprocessing.active_children()))")
    cell.raise_for_error()
    assert cell.stdout.strip() == "[] 0 0"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_cell_magic_returns_per_rank_values(nb, method):
    nb.run("base = 100").raise_for_error()
    cell = nb.run(f"%%nbmp -n 3 -m {method} -o got\nbase + rank * world_size")
    cell.raise_for_error()
    assert cell.result == "[100, 103, 106]"
    assert nb.run("got").result == "[100, 103, 106]"


def test_cell_magic_sees_cell_defined_functions_under_spawn(nb):
    nb.run("def triple(x):\n    return 3 * x").raise_for_error()
    cell = nb.run("%%nbmp -n 2 -m spawn\ny = triple(rank)\ny + 1")
    cell.raise_for_error()
    assert cell.result == "[1, 4]"


def test_cell_magic_names_an_unpicklable_variable_before_starting(nb):
    nb.run("import threading\nguard = threading.Lock()").raise_for_error()
    cell = nb.run("%%nbmp -n 2 -m spawn\nguard.locked()")
    assert cell.error is not None
    assert "notebook variable 'guard'" in cell.error["evalue"]
    assert nb.run("len(nbmp.active_children())").result == "0"


def test_a_worker_count_below_one_is_named_as_the_magic_spells_it(nb):
    cell = nb.run("%%nbmp -n 0\nrank")
    assert cell.error is not None and "%%nbmp -n must be a positive int, not 0; e.g. %%nbmp -n 4" in cell.error["evalue"]


def test_unknown_line_command_is_named(nb):
    cell = nb.run("%nbmp frobnicate")
    assert cell.error is not None and "unknown %nbmp command 'frobnicate'" in cell.error["evalue"]


def test_kill_stops_running_workers(nb):
    nb.run("ctx = nbmp.spawn(lambda i: __import__('time').sleep(60), nprocs=2, join=False)").raise_for_error()
    cell = nb.run("%nbmp kill")
    cell.raise_for_error()
    assert "stopped 2" in cell.result
    assert nb.run("len(nbmp.active_children())").result == "0"


def test_unload_leaves_nothing_running(nb):
    nb.run("ctx = nbmp.spawn(lambda i: __import__('time').sleep(60), nprocs=2, join=False)").raise_for_error()
    nb.run("%unload_ext nbmp").raise_for_error()
    assert nb.run("len(nbmp.active_children())").result == "0"
    nb.run("%load_ext nbmp").raise_for_error()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_spawn_error_shows_the_cells_source_line(nb, method):
    nb.run("def fails(i):\n    raise KeyError('from a cell')  # visible source line").raise_for_error()
    cell = nb.run(f"nbmp.spawn(fails, nprocs=1, start_method={method!r})")
    assert cell.error is not None
    text = "\n".join(cell.error["traceback"])
    assert "-- Process 0 terminated with the following error:" in text
    assert "# visible source line" in text
    assert "Cell In[" in text


def test_spawn_in_a_kernel_shows_a_live_dashboard(nb):
    cell = nb.run("import time\nnbmp.spawn(lambda i: time.sleep(2) or i, nprocs=2)")
    cell.raise_for_error()
    assert cell.result == "[0, 1]"
    kinds = [m["msg_type"] for m in cell.messages]
    assert "comm_open" in kinds
    assert kinds.count("comm_msg") >= 3, kinds  # updated while the workers ran
    threads = nb.run("import threading\n[t.name for t in threading.enumerate() if 'nbmp' in t.name]")
    assert threads.result == "[]"


def test_pool_map_progress_shows_the_dashboard_in_a_notebook(nb):
    cell = nb.run("with nbmp.Pool(2) as pool:\n"
                  "    out = pool.map(lambda x: x * 2, range(40), chunksize=1, progress=True)\n"
                  "del pool\nout[-1]")
    cell.raise_for_error()
    assert cell.result == "78"
    kinds = [m["msg_type"] for m in cell.messages]
    assert "comm_open" in kinds and "comm_msg" in kinds
