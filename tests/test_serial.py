"""torch_xla parity: SerialExecutor (one process at a time) and ForkShared (built once in the
parent, inherited by forked workers without a copy)."""

from __future__ import annotations

import os
import time

import pytest

import nbmp
from conftest import TIMEOUT


def _overlap_probe(inside, peak):
    """A body that records how many processes were inside it at once."""
    def body() -> int:
        with inside.get_lock():
            inside.value += 1
            peak.value = max(peak.value, inside.value)
        time.sleep(0.05)  # long enough for another process to arrive if nothing stops it
        with inside.get_lock():
            inside.value -= 1
        return os.getpid()
    return body


def _serial_worker(serial, inside, peak):
    for _ in range(3):
        serial.run(_overlap_probe(inside, peak))


def test_serial_executor_runs_one_process_at_a_time(ctx):
    serial = nbmp.SerialExecutor(ctx)
    inside, peak = ctx.Value("i", 0), ctx.Value("i", 0)
    procs = [ctx.Process(target=_serial_worker, args=(serial, inside, peak)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert peak.value == 1


def test_serial_executor_in_a_lambda_under_fork_passes_args():
    serial = nbmp.SerialExecutor()  # before the Pool: inherited by its forked workers
    with nbmp.Pool(2) as pool:
        assert pool.map(lambda i: serial.run(pow, i, 2), range(4)) == [0, 1, 4, 9]


def test_fork_shared_object_is_the_inherited_one_not_a_copy():
    big = list(range(100_000))
    shared = nbmp.ForkShared(big)
    with nbmp.get_context("fork").Pool(2) as pool:
        # a lambda naming `shared` travels by value, but `shared` resolves to the object
        # each worker inherited: the same address, no pickled copy of `big`
        ids = pool.map(lambda _: id(shared.get()), range(4), chunksize=1)
    assert ids == [id(big)] * 4


_counters = {}  # set before the Pool forks: workers inherit it (a Value cannot travel in a task)


def _materialise(obj):
    _overlap_probe(_counters["inside"], _counters["peak"])()
    return sum(obj["weights"])


def test_fork_shared_transform_runs_under_the_lock():
    _counters.update(inside=nbmp.Value("i", 0), peak=nbmp.Value("i", 0))
    shared = nbmp.ForkShared({"weights": [1.0, 2.0]})
    with nbmp.get_context("fork").Pool(3) as pool:
        assert pool.map(lambda _: shared.get(_materialise), range(6), chunksize=1) == [3.0] * 6
    assert _counters["peak"].value == 1


def test_fork_shared_to_moves_a_module_under_the_lock():
    torch = pytest.importorskip("torch")
    model = nbmp.ForkShared(torch.nn.Linear(2, 1))
    with nbmp.get_context("fork").Pool(2) as pool:
        out = pool.map(lambda _: type(model.to("cpu")).__name__, range(2))
    assert out == ["Linear", "Linear"]


def test_spawned_workers_get_it_as_an_initarg_and_a_clear_error_otherwise():
    ctx = nbmp.get_context("spawn")
    serial = nbmp.SerialExecutor(ctx)
    with ctx.Pool(1) as pool:
        with pytest.raises(RuntimeError, match="reaches a worker by fork"):
            pool.apply(lambda: serial.run(abs, -1))

    def keep(s):
        global _serial
        _serial = s

    with ctx.Pool(1, initializer=keep, initargs=(serial,)) as pool:
        assert pool.apply(lambda: serial.run(abs, -1)) == 1
