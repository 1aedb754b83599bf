"""collectives.py started by torch.multiprocessing.spawn (the self-spawning form);
START_METHOD=fork starts the ranks with mp.start_processes(start_method="fork") instead."""

import os
import sys

import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collectives  # noqa: E402
from ports import free_port  # noqa: E402


def worker(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    collectives.main()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    method = os.environ.get("START_METHOD", "spawn")
    if method == "spawn":
        mp.spawn(worker, args=(world, free_port()), nprocs=world)
    else:
        import torch  # noqa: F401  (imported before the fork, as a script that forks does)

        mp.start_processes(worker, args=(world, free_port()), nprocs=world,
                           start_method=method)
