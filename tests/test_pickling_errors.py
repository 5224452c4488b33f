"""An object that cannot be pickled is named, located, and the fix suggested -- before any
process starts."""

import threading

import pytest

import nbmp
from conftest import TIMEOUT, child_pids

SPAWNING = [m for m in nbmp.get_all_start_methods() if m != "fork"]


class Holder:
    def __init__(self):
        self.config = {"lock": threading.Lock()}


@pytest.mark.parametrize("method", SPAWNING)
def test_process_args_are_located(method):
    ctx = nbmp.get_context(method)
    before = child_pids()
    p = ctx.Process(target=print, args=(1, threading.Lock()))
    with pytest.raises(nbmp.PicklingError) as info:
        p.start()
    message = str(info.value)
    assert "args[1]" in message and "_thread.lock" in message
    assert "'fork' start method" in message
    assert child_pids() == before


@pytest.mark.parametrize("method", SPAWNING)
def test_attribute_paths_are_located(method):
    p = nbmp.get_context(method).Process(target=print, kwargs={"holder": Holder()})
    with pytest.raises(nbmp.PicklingError, match=r"kwargs\['holder'\]\.config\['lock'\]"):
        p.start()


def test_the_error_is_both_standard_types():
    import pickle
    p = nbmp.get_context("spawn").Process(target=print, args=(threading.Lock(),))
    with pytest.raises(pickle.PicklingError):
        p.start()
    with pytest.raises(TypeError):
        p.start()


def test_pipe_send_names_the_object_and_does_not_suggest_fork():
    a, b = nbmp.Pipe()
    with pytest.raises(nbmp.PicklingError, match=r"the object sent\[0\]") as info:
        a.send([threading.Lock()])
    assert "Fix: pass it another way" in str(info.value) and "fork" not in str(info.value)  # fork pickles it too
    a.close(), b.close()


def test_pool_task_error_reaches_the_caller():
    with nbmp.Pool(1) as pool:
        with pytest.raises(nbmp.PicklingError, match="_thread.lock"):
            pool.apply_async(print, (threading.Lock(),)).get(TIMEOUT)


def test_a_pool_function_is_blamed_by_its_default_in_the_users_words():
    with nbmp.get_context("spawn").Pool(1) as pool:
        with pytest.raises(nbmp.PicklingError) as info:
            pool.map(lambda x, guard=threading.Lock(): x, [1, 2])
    message = str(info.value)
    assert "the function<default guard> (_thread.lock object)" in message
    assert "Prepickled" not in message and "sent[" not in message  # the Pool's own wrapping is not the user's


def test_a_task_called_with_the_wrong_arguments_says_that_none_of_its_code_ran():
    with nbmp.Pool(1) as pool:
        with pytest.raises(TypeError, match="missing 1 required positional argument") as info:
            pool.map(lambda a, b: a, [1])
    assert "no frame of the task's own code ran" in str(info.value.__cause__)


def test_a_bound_methods_closure_is_located():
    def make():
        guard = threading.Lock()

        class Holder:
            def get(self):
                return guard
        return Holder().get
    p = nbmp.get_context("spawn").Process(target=make())
    with pytest.raises(nbmp.PicklingError, match=r"the target<closure guard> \(_thread.lock object\)"):
        p.start()
