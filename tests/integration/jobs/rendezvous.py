"""Checks its own trace before init (it exists, STARTING, with its rank), then sets up groups.

Rank 1 arrives late (sleeps 1 s first).  Started by torchrun, or with `spawn` as argument by
torch.multiprocessing.spawn.  Prints "rank R early trace ok" when the check passed.
"""

import datetime
import os
import sys
import time
from pathlib import Path


def check_early_trace(rank: int) -> None:
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.reader import read_trace

    ring = Path(os.environ["DDPDOCTOR_RUN_DIR"]) / "traces" / f"pid-{os.getpid()}.ring"
    header = read_trace(ring).header
    assert header.state == L.RankState.STARTING, header.state
    assert header.rank == rank, (header.rank, rank)
    print(f"rank {rank} early trace ok", flush=True)


def main(rank: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    check_early_trace(rank)
    if rank == 1:
        time.sleep(1.0)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    world = dist.get_world_size()
    dist.new_group([0, 1])
    dist.new_subgroups(group_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [world, world]
    dist.destroy_process_group()


def spawned(index: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(index), WORLD_SIZE=str(world), LOCAL_RANK=str(index),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    main(index)


if __name__ == "__main__":
    if sys.argv[1:] == ["spawn"]:
        import torch.multiprocessing as mp
        from ports import free_port  # beside this script

        mp.spawn(spawned, args=(2, free_port()), nprocs=2)
    else:
        main(int(os.environ["RANK"]))
