"""A job for `ddpdoctor repro`: 8 ranks with two subgroups, p2p (blocking and async), async
collectives, object collectives and rooted ops; it ends cleanly.
Run: torchrun --nproc-per-node 8 repro_mix.py"""
import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    evens = dist.new_group(list(range(0, world, 2)))
    odds = dist.new_group(list(range(1, world, 2)))
    mine = evens if rank % 2 == 0 else odds
    for _ in range(3):
        dist.all_reduce(torch.ones(4), group=mine)
        work = dist.all_reduce(torch.ones(2, 3, dtype=torch.float64), async_op=True)
        work.wait()
        dist.broadcast(torch.ones(5, dtype=torch.int64), src=3)
    after, before = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(torch.ones(3), dst=after)
        dist.recv(torch.zeros(3), src=before)
    else:
        dist.recv(torch.zeros(3), src=before)
        dist.send(torch.ones(3), dst=after)
    reqs = [dist.isend(torch.ones(2), dst=after), dist.irecv(torch.zeros(2), src=before)]
    for req in reqs:
        req.wait()
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank})
    chosen = [rank, "x"]
    dist.broadcast_object_list(chosen, src=0)
    dist.all_gather([torch.zeros(2) for _ in range(world)], torch.ones(2))
    dist.reduce(torch.ones(3), dst=1, op=dist.ReduceOp.MAX)
    dist.all_reduce(torch.ones(1, dtype=torch.int32), op=dist.ReduceOp.MIN, group=mine)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
