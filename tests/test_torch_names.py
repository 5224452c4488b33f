"""The names of torch.multiprocessing that code may use beyond the standard package's:
SpawnContext, ProcessContext.error_files and .sentinels, reductions and init_reductions."""

from __future__ import annotations

import multiprocessing.connection
import sys

import pytest

import nbmp
from conftest import TIMEOUT


def test_spawncontext_is_torchs_alias_for_processcontext():
    assert nbmp.SpawnContext is nbmp.ProcessContext
    ctx = nbmp.spawn(lambda i: i, nprocs=2, join=False)
    assert isinstance(ctx, nbmp.SpawnContext)
    while not ctx.join(TIMEOUT):
        pass


def test_sentinels_map_each_running_worker_to_its_index_and_empty_when_done():
    ctx = nbmp.spawn(lambda i, ev: ev.wait(TIMEOUT), args=(nbmp.Event(),), nprocs=2, join=False)
    sentinels = ctx.sentinels
    assert sorted(sentinels.values()) == [0, 1]
    assert set(sentinels) == {p.sentinel for p in ctx.processes}
    assert multiprocessing.connection.wait(list(sentinels), timeout=0) == []
    for p in ctx.processes:
        p.terminate()
    try:
        ctx.join(TIMEOUT)
    except nbmp.ProcessExitedException:
        pass
    assert ctx.sentinels == {}


def test_error_files_has_one_entry_per_worker():
    ctx = nbmp.spawn(lambda i: None, nprocs=3, join=False)
    assert ctx.error_files == [None, None, None]
    while not ctx.join(TIMEOUT):
        pass


def test_torchs_reductions_are_reachable_where_torch_code_looks_for_them():
    # torch's own test_multiprocessing.py calls mp.reductions.rebuild_cuda_tensor.
    torch_mp = pytest.importorskip("torch.multiprocessing")
    assert nbmp.reductions is torch_mp.reductions
    assert nbmp.init_reductions is torch_mp.reductions.init_reductions
    nbmp.init_reductions()  # idempotent, as torch's import already called it


def test_torchs_reductions_without_torch_say_what_they_need(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.multiprocessing", None)  # as if torch were not installed
    with pytest.raises(AttributeError, match="needs torch: pip install torch"):
        nbmp.reductions
    assert not hasattr(nbmp, "init_reductions")
