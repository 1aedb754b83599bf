"""torch DDP features in one 2-rank torchrun job; saves each case's final parameters.

Cases: plain steps, no_sync accumulation, static_graph, a user comm hook, Join with uneven
inputs plus ZeroRedundancyOptimizer, deepcopy / pickle / torch.save of the DDP model, the
private attributes frameworks read, sparse gradients, torch.compile (COMPAT_COMPILE=0 leaves it out).  Usage: torchrun --nproc-per-node 2 torch_features.py OUT
"""

import copy
import io
import os
import pickle
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * rank + step))


def train(ddp: nn.Module, rank: int, steps: int = 3, accumulate: int = 0) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(steps):
        for micro in range(accumulate):
            with ddp.no_sync():
                ddp(batch(rank, 50 + micro)).square().mean().backward()
        ddp(batch(rank, step)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    results: dict[str, dict[str, torch.Tensor]] = {}
    checks: dict[str, object] = {}

    plain = DDP(model())
    train(plain, rank)
    results["plain"] = plain.module.state_dict()
    checks["isinstance"] = isinstance(plain, DDP)
    checks["reducer"] = plain.reducer is not None
    checks["logging_data"] = "world_size" in plain._get_ddp_logging_data()
    checks["grad_not_bucket_view"] = all(
        p.grad is None for p in plain.parameters())  # zero_grad set them to None

    acc = DDP(model())
    train(acc, rank, accumulate=2)
    results["no_sync"] = acc.module.state_dict()

    static = DDP(model(), static_graph=True)
    train(static, rank)
    results["static_graph"] = static.module.state_dict()
    checks["static_graph"] = bool(static.static_graph)

    hooked = DDP(model())
    hooked.register_comm_hook(None, default_hooks.allreduce_hook)
    train(hooked, rank)
    results["user_hook"] = hooked.module.state_dict()

    joined = DDP(model())
    zero = ZeroRedundancyOptimizer(joined.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    with Join([joined, zero]):
        for step in range(3 + rank):  # rank 1 has one batch more
            joined(batch(rank, step)).square().mean().backward()
            zero.step()
            zero.zero_grad()
    results["join_zero"] = joined.module.state_dict()

    ema = copy.deepcopy(plain)
    pickled = pickle.loads(pickle.dumps(plain))
    buf = io.BytesIO()
    torch.save(plain, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    train(ema, rank, steps=1)  # a copy still trains (its new reducer gets a hook too)
    results["deepcopy_trained"] = ema.module.state_dict()
    checks["pickle_same"] = all(torch.equal(a, b) for a, b in zip(
        pickled.state_dict().values(), plain.state_dict().values()))
    checks["torch_save_same"] = all(torch.equal(a, b) for a, b in zip(
        loaded.state_dict().values(), plain.state_dict().values()))

    sparse = DDP(nn.EmbeddingBag(10, 4, sparse=True))  # ddpdoctor: a notice, torch reduces
    sparse_opt = torch.optim.SGD(sparse.parameters(), lr=0.1)
    for step in range(2):
        sparse(torch.tensor([[rank, step + 2]])).square().sum().backward()
        sparse_opt.step()
        sparse_opt.zero_grad()
    results["sparse"] = sparse.module.state_dict()

    if os.environ.get("COMPAT_COMPILE", "1") == "1":
        compiled = torch.compile(DDP(model()))
        train(compiled, rank)
        results["compile"] = compiled.module.state_dict()

    torch.save({"params": results, "checks": checks}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
