"""Calls every collective and p2p op of torch.distributed once (2 ranks), for the recorder."""

import datetime
import warnings

import torch
import torch.distributed as dist

warnings.simplefilter("ignore", FutureWarning)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    r, w = dist.get_rank(), dist.get_world_size()
    peer = 1 - r
    t = torch.ones(4)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.broadcast(t, src=1)
    dist.barrier()
    dist.all_gather([torch.zeros(4) for _ in range(w)], t)
    dist.all_gather_into_tensor(torch.zeros(4 * w), t)
    dist.reduce_scatter(torch.zeros(4), [torch.ones(4) for _ in range(w)])
    dist.reduce_scatter_tensor(torch.zeros(4), torch.ones(4 * w))
    dist.reduce(t, dst=0)
    dist.gather(t, [torch.zeros(4) for _ in range(w)] if r == 0 else None, dst=0)
    dist.scatter(torch.zeros(4), [torch.ones(4) for _ in range(w)] if r == 0 else None, src=0)
    dist.all_to_all([torch.zeros(2) for _ in range(w)], [torch.ones(2) for _ in range(w)])
    dist.all_to_all_single(torch.zeros(2 * w), torch.ones(2 * w))
    dist.monitored_barrier()
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r})
    lst = [r, "x"]
    dist.broadcast_object_list(lst, src=0)
    dist.gather_object(r, objs if r == 0 else None, dst=0)
    out = [None]
    dist.scatter_object_list(out, [1, 2] if r == 0 else None, src=0)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    # p2p: rank 0 sends first, rank 1 receives first
    if r == 0:
        dist.send(t, dst=peer)
        dist.recv(t, src=peer)
    else:
        dist.recv(t, src=peer)
        dist.send(t, dst=peer)
    reqs = [dist.isend(t, dst=peer), dist.irecv(torch.zeros(4), src=peer)]
    for q in reqs:
        q.wait()
    ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.zeros(4), peer)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    sub = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(3), group=sub)
    dist.barrier()
    print(f"rank {r} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
