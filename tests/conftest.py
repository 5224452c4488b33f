"""Fixtures every test gets: a per-start-method parameter, and a guard that fails a
test which leaves child processes, /dev/shm entries or fork handlers behind."""

from __future__ import annotations

from typing import Iterator

import multiprocessing
import pytest

import nbmp
from leaks import child_pids, left_behind, shm_entries  # noqa: F401 (child_pids: for tests)

# One timeout for every join and get in the suite (seconds).
TIMEOUT = 30

START_METHODS = nbmp.get_all_start_methods()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves processes, shared-memory entries or fork handlers behind."""
    children_before, shm_before = child_pids(), shm_entries()
    handlers_before = nbmp._forking.user_handlers()
    yield
    handlers_left = [h for h in nbmp._forking.user_handlers() if h not in handlers_before]
    for handler in handlers_left:
        nbmp._forking.registry._user_handlers.remove(handler)
    leaked, new_shm = left_behind(children_before, shm_before)
    assert not leaked, f"test left child processes running: {sorted(leaked)}"
    assert not new_shm, f"test left entries in /dev/shm: {sorted(new_shm)}"
    assert not handlers_left, f"test left fork handlers registered (call .remove() on the handle): {handlers_left}"


@pytest.fixture(params=START_METHODS)
def start_method(request: pytest.FixtureRequest) -> str:
    """Each behaviour test runs once per start method."""
    return request.param


@pytest.fixture
def ctx(start_method: str) -> multiprocessing.context.BaseContext:
    return nbmp.get_context(start_method)


@pytest.fixture(scope="module")
def kernel():
    """One real ipykernel per test module."""
    from kernel import Kernel
    k = Kernel()
    try:
        yield k
    finally:
        k.shutdown()
