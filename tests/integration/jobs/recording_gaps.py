"""Collectives that plain patching misses: compiled, future-completed, _base, P2POp peers.

SHAPE picks the part: "compiled" (three all_reduces inside a torch.compile'd function, then
an eager functional all_reduce),
"future" (an async all_reduce completed through get_future().wait(), then 8 s of compute),
"base_p2p" (_all_gather_base, _reduce_scatter_base, batch_isend_irecv with group_peer, a
_coalescing_manager batch).
"""

import datetime
import os
import time
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", category=FutureWarning)


def compiled_step(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    y = x * 2
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    z = y + 1
    dist.all_reduce(z)
    return z


def main() -> None:
    shape = os.environ.get("SHAPE", "compiled")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(torch.ones(2))  # eager, seq 0
    if shape == "compiled":
        step = torch.compile(compiled_step, backend="aot_eager", fullgraph=True)
        for _ in range(2):
            out = step(torch.ones(4))
        assert out.tolist() == [(2.0 * world + 1) * world] * 4, out
        import torch.distributed._functional_collectives as funcol

        summed = funcol.all_reduce(torch.ones(2), "sum", dist.group.WORLD)  # eager funcol
        assert (summed + 0).tolist() == [float(world)] * 2
    elif shape == "future":
        work = dist.all_reduce(torch.ones(4), async_op=True)
        work.get_future().wait()
        t0 = time.time()
        while time.time() - t0 < 8:  # compute, no collective
            torch.randn(64, 64) @ torch.randn(64, 64)
        work.wait()
    elif shape == "base_p2p":
        out = torch.empty(2 * world)
        dist._all_gather_base(out, torch.ones(2))
        dist._reduce_scatter_base(torch.empty(2), torch.ones(2 * world))
        other = 1 - rank
        ops = [dist.P2POp(dist.isend, torch.ones(3), group_peer=other),
               dist.P2POp(dist.irecv, torch.empty(3), group_peer=other)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        from torch.distributed.distributed_c10d import _coalescing_manager

        with _coalescing_manager():  # one coalesced record, not two
            dist.all_reduce(torch.ones(3))
            dist.all_reduce(torch.ones(5))
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
