"""HeteroActivation inside torch.distributed: DistributedDataParallel, gloo, 2 processes on this machine."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian's python3-torch) is not installed")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("skipped: this PyTorch has no gloo backend", allow_module_level=True)


def _train(rank, world, store, results):
    import hsnn.torch as ht
    # A file store: no port to race for, and no TCPStore, which PyTorch >= 2.4
    # starts on libuv by default (Debian's PyTorch is built without it).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), ht.HeteroActivation(["gelu", "tanh", "softplus", "relu"] * 2),
                                torch.nn.Linear(8, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = ht.FormulaLoss("mse")
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    x = torch.randn(128, 4, generator=gen)
    y = (x[:, :1] - 0.5 * x[:, 1:2]).tanh()
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    results[rank] = (first, loss.item(), [p.detach().clone() for p in model.parameters()])
    dist.destroy_process_group()


def test_ddp_two_processes_gloo(tmp_path):
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    results = manager.dict()
    procs = [ctx.Process(target=_train, args=(r, 2, tmp_path / "store", results)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    (f0, l0, w0), (f1, l1, w1) = results[0], results[1]
    assert l0 < f0 and l1 < f1
    for a, b in zip(w0, w1):  # gradients were all-reduced: the replicas stayed identical
        assert torch.equal(a, b)
