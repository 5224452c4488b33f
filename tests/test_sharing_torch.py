"""torch CPU tensors in shared memory: shared in place, crossing as handles, views kept, CUDA refused."""

from __future__ import annotations

import gc
import pickle
import types

import pytest

import nbmp
from conftest import TIMEOUT
from helpers import run_main

torch = pytest.importorskip("torch")


def write_and_return(q_in, q_out):
    t = q_in.get()
    t.add_(1)
    q_out.put(t)


def byte_sum(t) -> int:
    # No torch kernels: a forked child of a parent that ran OpenMP work can hang in them
    # (fork safety is another module's job); numpy over the raw bytes is enough here.
    return int(t.detach().view(torch.uint8).numpy().sum(dtype="int64"))


def describe(q_in, q_out):
    for t in iter(q_in.get, None):
        q_out.put((type(t).__name__, t.requires_grad, nbmp.is_shared(t), byte_sum(t)))


def test_share_moves_a_tensor_in_place():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    same = nbmp.share(t)
    assert same is t and nbmp.is_shared(t) and nbmp.is_shared(t[1:, ::2]) and nbmp.is_shared(t.T)
    assert t.tolist() == torch.arange(12, dtype=torch.float32).reshape(3, 4).tolist()
    assert nbmp.share(t) is t
    assert not nbmp.is_shared(torch.zeros(3))
    assert nbmp.shm_usage().segments == 1


def test_shared_tensor_round_trip_is_zero_copy(ctx):
    t = nbmp.share(torch.zeros(256, 1024, dtype=torch.float64))
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=write_and_return, args=(q_in, q_out))
    p.start()
    q_in.put(t[8:16])
    back = q_out.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert (t[8:16] == 1).all() and (t[:8] == 0).all() and (t[16:] == 0).all()
    assert back.data_ptr() == t[8:16].data_ptr() and back.stride() == t.stride()
    back += 1
    assert (t[8:16] == 2).all()


def add_one_and_report(q_in, q_out):
    t, model = q_in.get()
    t.add_(1)
    with torch.no_grad():
        model.weight.fill_(7.0)
    q_out.put((t.is_shared(), type(model.weight).__name__))


def test_tensor_shared_by_torch_crosses_as_torchs_handle(ctx):
    # share_memory_() / model.share_memory() put memory in torch's hands: it must keep being
    # shared through nbmp's channels (not silently copied), under every start method.
    t = torch.zeros(64, 1024).share_memory_()
    model = torch.nn.Linear(4, 2).share_memory()
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=add_one_and_report, args=(q_in, q_out))
    p.start()
    q_in.put((t[8:], model))
    assert q_out.get(timeout=TIMEOUT) == (True, "Parameter")
    p.join(TIMEOUT)
    assert p.exitcode == 0
    assert (t[8:] == 1).all() and (t[:8] == 0).all()
    assert (model.weight.detach() == 7).all()


def test_tensor_shared_by_torch_as_a_spawn_argument(start_method):
    t = torch.zeros(5).share_memory_()
    nbmp.spawn(lambda i, x: x[i].add_(i + 1), args=(t,), nprocs=2, start_method=start_method)
    assert t.tolist() == [1.0, 2.0, 0.0, 0.0, 0.0]


def test_tensor_views_keep_their_layout():
    t = nbmp.share(torch.arange(60, dtype=torch.int32).reshape(3, 4, 5))
    for view in (t[1], t[:, ::2, 1:], t.transpose(0, 2), t.reshape(12, 5)[3:7], t.flatten()[1::3]):
        got = pickle.loads(nbmp._backend.pickling.dumps(view))
        assert got.data_ptr() == view.data_ptr() and got.stride() == view.stride()
        assert got.storage_offset() == view.storage_offset() and torch.equal(got, view)


def test_numpy_array_viewed_as_tensor_is_shared():
    a = nbmp.zeros((4, 4), dtype="float32")
    t = torch.from_numpy(a)
    assert nbmp.is_shared(t)
    got = pickle.loads(nbmp._backend.pickling.dumps(t))
    got[0, 0] = 9
    assert a[0, 0] == 9


def add_one_to_each(q_in, q_out):
    for t in iter(q_in.get, None):
        t.detach().numpy()[...] += 1  # numpy, not a torch kernel (see byte_sum)
        q_out.put((type(t).__name__, t.requires_grad, nbmp.is_shared(t)))


def test_unshared_tensor_is_moved_in_place_when_sent_whatever_its_size(ctx):
    # torch.multiprocessing's contract: the sender's tensor moves into shared memory, views
    # follow, and the receiver's writes are seen by the sender.
    big = torch.zeros(1 << 19, dtype=torch.float32)
    small = torch.zeros(100, dtype=torch.float64)
    view_of_small = small[10:20]
    param = torch.nn.Parameter(torch.zeros(1 << 10))
    strided = torch.zeros(1 << 10, dtype=torch.int16)[::2]
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=add_one_to_each, args=(q_in, q_out))
    p.start()
    for t in (big, small, param, strided):
        q_in.put(t)
        assert q_out.get(timeout=TIMEOUT) == (type(t).__name__, isinstance(t, torch.nn.Parameter), True)
        assert t.is_shared() and nbmp.is_shared(t)
    q_in.put(None)
    p.join(TIMEOUT)
    assert byte_sum(big) == byte_sum(torch.ones(1 << 19))
    assert (small == 1).all() and (view_of_small == 1).all() and view_of_small.is_shared()
    assert (param.detach() == 1).all() and isinstance(param, torch.nn.Parameter)
    assert strided._base.tolist() == [1, 0] * (1 << 9)


def test_share_makes_torch_see_the_tensor_as_shared():
    t = torch.arange(10.0)
    view = t[2:5]
    assert nbmp.share(t) is t
    assert t.is_shared() and view.is_shared() and t.tolist() == list(range(10))
    p = nbmp.get_context("spawn").Process(target=torch.Tensor.add_, args=(view, 100))
    p.start()
    p.join(TIMEOUT)
    assert t.tolist() == [0, 1, 102, 103, 104, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("how", ["nbmp.share", "sent once"])
def test_a_tensor_in_nbmp_shared_memory_crosses_torchs_own_queues(how):
    # A DataLoader's workers send their batches, views of the dataset's storage, through
    # torch.multiprocessing's queues, whose default strategy passes the storage's descriptor.
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.arange(12.0).reshape(6, 2)
    if how == "nbmp.share":
        nbmp.share(x)
    else:
        q = nbmp.SimpleQueue()
        q.put(x)  # moves its storage into nbmp's shared memory, in place
        q.get()
    loader = DataLoader(TensorDataset(x), batch_size=None, num_workers=2, timeout=TIMEOUT)
    assert [batch[0].tolist() for batch in loader] == x.tolist()


def test_tensors_moved_by_the_hundred_leave_the_program_its_descriptors():
    # A moved storage keeps a descriptor for torch's own queues, but only a bounded number do.
    out = run_main("""
        import os, resource, nbmp, torch
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        tensors = [torch.full((4,), float(i)) for i in range(300)]
        q = nbmp.SimpleQueue()
        for t in tensors:
            q.put(t)
            q.get()
        open(os.devnull).close()
        print(all(nbmp.is_shared(t) for t in tensors), len(os.listdir("/proc/self/fd")) <= 64)
    """)
    assert out == "True True\n"


def test_non_leaf_tensor_requiring_grad_is_refused():
    x = torch.ones(1 << 19, requires_grad=True) * 2
    a, b = nbmp.Pipe()
    with pytest.raises(RuntimeError, match=r"non-leaf tensor which requires_grad.*detach\(\)") as info:
        a.send(x)                                   # torch's RuntimeError, as torch.multiprocessing raises
    assert not isinstance(info.value, nbmp.PicklingError)


def test_cuda_tensor_gets_a_clear_error():
    # No GPU here: a 'meta' tensor is a real non-CPU tensor, and a stand-in object with a
    # CUDA device checks the message that a CUDA tensor would get.
    meta = torch.empty(1 << 20, device="meta")
    with pytest.raises(ValueError, match=r"META tensor .*cannot be put in nbmp's shared memory.*\.cpu\(\)"):
        nbmp.share(meta)
    stand_in = types.SimpleNamespace(device=torch.device("cuda", 0), is_cuda=True)
    with pytest.raises(ValueError, match=r"CUDA tensor \(cuda:0\).*t\.cpu\(\).*\.to\('cuda:0'\).*spawn"):
        nbmp._sharing._torch.check_cpu(stand_in)
    assert not nbmp.is_shared(meta)


def test_a_meta_tensor_crosses_as_its_shape_as_torch_sends_it():
    # No data to share: torch.multiprocessing pickles a meta tensor as its shape and dtype,
    # and PyTorch's own tests send them through a Queue.
    q = nbmp.Queue()
    try:
        for sent in (torch.empty(3, 4, device="meta"), torch.tensor([], dtype=torch.int64, device="meta")):
            q.put(sent)
            got = q.get(timeout=10)
            assert (got.device.type, got.shape, got.dtype) == ("meta", sent.shape, sent.dtype)
    finally:
        q.close()
        q.join_thread()


def test_a_storage_sent_from_this_process_comes_back_as_the_same_storage():
    # torch.multiprocessing's contract (PyTorch's test_fd_preserve_sharing): the storage moves
    # to shared memory, and the tensors on it sent along share it with the storage itself.
    x = torch.randn(5, 5)
    data = [x.untyped_storage(), x, x[2], x[:, 1]]
    q = nbmp.Queue()
    try:
        q.put(data)
        got = q.get(timeout=10)
    finally:
        q.close()
        q.join_thread()
    assert x.is_shared() and nbmp.is_shared(x)
    assert got[0]._cdata == data[0]._cdata
    assert all(t.untyped_storage()._cdata == data[0]._cdata for t in got[1:])
    assert torch.equal(got[1], x) and torch.equal(got[2], x[2]) and torch.equal(got[3], x[:, 1])
